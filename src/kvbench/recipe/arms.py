"""The arm of a matrix row (GPU-resident, or its offload backend) and the engine patches
(recipe/patches.py) scoped to it. Plain functions on raw rows, so the matrix stage needs no
schema."""

from __future__ import annotations

from typing import Any

from kvbench.recipe.fields import KV_OFFLOAD_BACKENDS

RESIDENT_ARM = "resident"
ALL_ARMS = "all"
PATCH_ARMS: tuple[str, ...] = (ALL_ARMS, RESIDENT_ARM, *KV_OFFLOAD_BACKENDS)


def arm_of(row: dict[str, Any]) -> str:
    """`resident`, or the offload backend's name for a `dram` row."""
    backend = row.get("kv-offload-backend")
    if row.get("kv-offloading") == "dram" and isinstance(backend, dict):
        return str(backend.get("name"))
    return RESIDENT_ARM


def patches_for(patches: list[dict[str, Any]] | None, row: dict[str, Any]) -> list[dict]:
    """The entry's patches (raw YAML mappings) that apply to this row's arm."""
    arm = arm_of(row)
    return [dict(p) for p in patches or []
            if ALL_ARMS in p.get("arms", [ALL_ARMS]) or arm in p.get("arms", [])]
