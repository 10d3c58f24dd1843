"""`node-count` of a multi-node row (newer layout): how many nodes its allocation takes.

The newer generator (InferenceX inferencex-e2e/infx/matrix/generate.py, fabe70b7:
add_multinode_node_count, multinode_node_count, recipe_node_count, worker_node_count) takes,
in order: an aggregated row's `num-nodes`; the node count of the srt-slurm recipe its
CONFIG_FILE= setting names, when that recipe is in the checkout; else each role's
`<ROLE>_NODES=` setting or ceil(num-worker * tp * pp * pcp-size / gpus-per-node)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.errors import MatrixError
from kvbench.recipe.fields import CLUSTER_LABEL_PREFIX
from kvbench.recipe.layout import multinode_recipe_path

if TYPE_CHECKING:
    from kvbench.recipe.facts import RunnerFacts

RECIPE_SCHEMA = 2


def _settings(worker: dict[str, Any]) -> list[str]:
    return [str(s) for s in worker.get("additional-settings") or []]


def _node_override(worker: dict[str, Any], name: str) -> int | None:
    pattern = re.compile(rf"^{re.escape(name)}=(\d+)$")
    values = [int(m.group(1)) for s in _settings(worker) if (m := pattern.match(s))]
    if not values:
        return None
    if len(set(values)) != 1 or values[0] <= 0:
        raise MatrixError(f"conflicting or invalid {name} settings: {values}")
    return values[0]


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A recipe variant: the override's keys over the base, nested mappings merged, a null
    value deleting the key."""
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def recipe_nodes(prefill: dict[str, Any], decode: dict[str, Any], base: Path | None
                 ) -> int | None:
    """The node count of the recipe the workers' CONFIG_FILE= names (`file[:variant]`), or
    None when there is none or the recipe is not in the checkout (some live only in the
    runtime image: the workers' topology is then the best estimate)."""
    names = {s.split("=", 1)[1] for w in (prefill, decode) for s in _settings(w)
             if s.startswith("CONFIG_FILE=")}
    if not names:
        return None
    if len(names) != 1:
        raise MatrixError(f"conflicting CONFIG_FILE settings: {sorted(names)}")
    if base is None:
        return None
    name, _, variant = names.pop().partition(":")
    path = multinode_recipe_path(name, base)
    if not path.is_file():
        return None
    import yaml

    recipe = yaml.safe_load(path.read_text()) or {}
    if "base" in recipe:
        if not (variant == "base" or (variant.startswith("override_") and variant in recipe)):
            return None
        schema = recipe.get("schema")
        recipe = _merged(recipe["base"], recipe.get(variant) or {})
        recipe.setdefault("schema", schema)
        if recipe.get("schema") != RECIPE_SCHEMA:
            return None
    if recipe.get("schema") != RECIPE_SCHEMA:
        raise MatrixError(f"{path}: srt-slurm recipes must declare schema: {RECIPE_SCHEMA}")
    roles = recipe.get("roles")
    if not roles:
        raise MatrixError(f"{path}: the recipe has no worker roles")
    for role_name, role in roles.items():
        if "nodes" not in role:
            raise MatrixError(f"{path}: recipe role {role_name!r} must give 'nodes'")
    return sum(0 if r["nodes"] == "colocate" else int(r["nodes"]) for r in roles.values())


def _family(label: str) -> str:
    return label.removeprefix(CLUSTER_LABEL_PREFIX).split("-", 1)[0]


def scheduling_gpus_per_node(label: str, runners: RunnerFacts) -> int:
    """gpus-per-node of a cluster label, or of the one GPU family a label or runner name
    (`gb300-nv_00`, `b200`) belongs to."""
    facts = runners.node_facts()
    if label in facts:
        return facts[label]["gpus-per-node"]
    found = {f["gpus-per-node"] for name, f in facts.items() if _family(name) == _family(label)}
    if len(found) == 1:
        return found.pop()
    if not found:
        raise MatrixError(f"cannot resolve gpus-per-node for {label!r}",
                          hint="runners.yaml has no cluster of that GPU family")
    raise MatrixError(f"ambiguous gpus-per-node for {label!r}: {sorted(found)}")


def _worker_nodes(worker: dict[str, Any], role: str, runner: str, runners: RunnerFacts) -> int:
    override = _node_override(worker, f"{role.upper()}_NODES")
    if override is not None:
        return override
    per_node = scheduling_gpus_per_node(worker.get("hardware") or runner, runners)
    gpus = worker["num-worker"] * worker["tp"] * worker.get("pp", 1) * worker.get("pcp-size", 1)
    return math.ceil(gpus / per_node)


def node_count(row: dict[str, Any], num_nodes: int | None, runners: RunnerFacts,
               base: Path | None) -> int:
    """The row's `node-count` (`row` carries runner, disagg, prefill and decode)."""
    if num_nodes is not None:
        if row["disagg"]:
            raise MatrixError("'num-nodes' is not valid for disaggregated entries")
        return num_nodes
    prefill, decode = row["prefill"], row["decode"]
    from_recipe = recipe_nodes(prefill, decode, base)
    if from_recipe is not None:
        return from_recipe
    return (_worker_nodes(prefill, "prefill", row["runner"], runners)
            + _worker_nodes(decode, "decode", row["runner"], runners))
