"""The recipe fingerprint InferenceX gives a generated row: what names one curve (one recipe at
every concurrency) in CI's job JSON, result file names and the aggregate JSON."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Point-level fields a curve's rows differ in, left out of the hash (InferenceX 843c6254f,
# utils/process_changelog.py:220-233 `recipe_fingerprint`).
POINT_FIELDS = frozenset({"conc", "exp-name", "recipe-fingerprint"})


def recipe_fingerprint(row: dict[str, Any]) -> str:
    """SHA-256 hex of the row without its point-level fields, as canonical JSON (sorted keys,
    no spaces, ASCII), so two concurrencies of one recipe share it."""
    recipe = {k: v for k, v in row.items() if k not in POINT_FIELDS}
    text = json.dumps(recipe, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
