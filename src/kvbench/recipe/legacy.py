"""Recipe spellings the newer InferenceX retires but configs still carry.

InferenceX's newer validation (inferencex-e2e/infx/matrix/validation.py @07db303e,
_validate_multinode_entry_scope) refuses launch-recipe selection in worker
`additional-settings` (CONFIG_FILE=, EVAL_CONFIG_FILE=, SRT_RECIPE=, EVAL_SRT_RECIPE=): it
belongs in a row's `srt-recipe` / `eval-srt-recipe`. The configs at fabe70b7 still select
recipes that way, and the generator still reads CONFIG_FILE= for node counts, so kvbench
accepts them and `kvbench validate` warns, naming each place."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

RECIPE_SETTINGS = ("CONFIG_FILE", "EVAL_CONFIG_FILE", "SRT_RECIPE", "EVAL_SRT_RECIPE")
ROLES = ("worker", "prefill", "decode")


def _rows(raw: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for scenario in ("fixed-seq-len", "agentic-coding"):
        for b, block in enumerate(raw.get("scenarios", {}).get(scenario) or []):
            for r, row in enumerate(block.get("search-space") or []):
                yield f"{scenario}[{b}].search-space[{r}]", row


def recipe_setting_warnings(entries: Mapping[str, Any]) -> list[str]:
    """One line per config key whose worker settings select a launch recipe, with the
    first place and the count (validated entries)."""
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
                       "recipe; InferenceX retired this (07db303e) for the row's srt-recipe")
    return out
