"""Recipe spellings an InferenceX checkout may have retired while configs still carry them.

Newer InferenceX validation (inferencex-e2e/infx/matrix/validation.py, `_validate_srt_recipes`,
from 07db303e) refuses launch-recipe selection in worker `additional-settings` (CONFIG_FILE=,
EVAL_CONFIG_FILE=): it belongs in a row's `srt-recipe` / `eval-srt-recipe`. Older checkouts
select every srt-slurm recipe that way (843c6254f: utils/matrix_logic/validation.py never
looks at the setting; fabe70b7's generator reads CONFIG_FILE= for node counts). So whether the
spelling is retired is the checkout's own answer: `retiring_validation` finds the checkout's
validation module and reports it only where that module rules on these settings (names them),
and `kvbench validate` warns only then, naming each place."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchError
from kvbench.files import read_bounded
from kvbench.units import MiB

RECIPE_SETTINGS = ("CONFIG_FILE", "EVAL_CONFIG_FILE", "SRT_RECIPE", "EVAL_SRT_RECIPE")
ROLES = ("worker", "prefill", "decode")
# a checkout's own master-config validation, newer layout then classic, under its base folder
VALIDATION_MODULES = ("infx/matrix/validation.py", "utils/matrix_logic/validation.py")


def retiring_validation(base: Path) -> Path | None:
    """The validation module of the checkout whose benchmark folder is `base` when it rules
    on launch-recipe settings (a string constant naming one, as the refusing validation's
    mapping to srt-recipe does); None when it does not, or when there is none (a copy of the
    configs outside a checkout: nothing to say)."""
    for rel in VALIDATION_MODULES:
        path = base / rel
        if not path.is_file():
            continue
        try:
            tree = ast.parse(read_bounded(path, 16 * MiB, "validation module"))
        except (KvbenchError, OSError, SyntaxError, ValueError):
            continue
        if any(isinstance(node, ast.Constant) and node.value in RECIPE_SETTINGS
               for node in ast.walk(tree)):
            return path
    return None


def _rows(raw: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for scenario in ("fixed-seq-len", "agentic-coding"):
        for b, block in enumerate(raw.get("scenarios", {}).get(scenario) or []):
            for r, row in enumerate(block.get("search-space") or []):
                yield f"{scenario}[{b}].search-space[{r}]", row


def recipe_setting_warnings(entries: Mapping[str, Any], retired_by: Path) -> list[str]:
    """One line per config key whose worker settings select a launch recipe, with the
    first place and the count (validated entries), for a checkout whose validation module
    `retired_by` refuses them."""
    out = []
    for key, entry in entries.items():
        places = []
        for where, row in _rows(entry.raw):
            for role in ROLES:
                worker = row.get(role)
                if not isinstance(worker, Mapping):
                    continue
                for i, setting in enumerate(worker.get("additional-settings") or []):
                    name = str(setting).partition("=")[0]
                    if name in RECIPE_SETTINGS:
                        places.append((f"{where}.{role}.additional-settings[{i}]", name))
        if places:
            (first, name), more = places[0], len(places) - 1
            also = f" (and {more} more)" if more else ""
            out.append(f"{entry.source}: {key}.{first}{also}: {name}= selects a launch "
                       f"recipe, which this checkout's validation ({retired_by}) refuses; "
                       f"name it in the row's srt-recipe")
    return out
