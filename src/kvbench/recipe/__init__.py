"""The InferenceX master-config format (recipes) and runners.yaml: schema, loader, errors.

Exports resolve lazily: the matrix stage's warm path (recipe/cache.py) reads cached recipes
without importing pydantic and the schema (about 0.1 s of a `kvbench matrix` run)."""

from __future__ import annotations

from kvbench.registry import lazy_exports

_EXPORTS = {
    "RecipeError": "kvbench.errors",
    "ComponentMetadata": "kvbench.recipe.components",
    "KvOffloadBackend": "kvbench.recipe.components",
    "Worker": "kvbench.recipe.components",
    "CLUSTER_LABEL_PREFIX": "kvbench.recipe.fields",
    "DEFAULT_AGENTIC_DURATION_SECONDS": "kvbench.recipe.fields",
    "KV_OFFLOAD_BACKENDS": "kvbench.recipe.fields",
    "KV_OFFLOADINGS": "kvbench.recipe.fields",
    "SCENARIO_TYPES": "kvbench.recipe.fields",
    "SPEC_DECODINGS": "kvbench.recipe.fields",
    "load_master_configs": "kvbench.recipe.loader",
    "load_runners": "kvbench.recipe.loader",
    "master_config_errors": "kvbench.recipe.loader",
    "MasterEntry": "kvbench.recipe.master",
    "MultiNodeMasterEntry": "kvbench.recipe.master",
    "SingleNodeMasterEntry": "kvbench.recipe.master",
    "AgenticRow": "kvbench.recipe.rows",
    "FixedMultiNodeRow": "kvbench.recipe.rows",
    "FixedSingleNodeRow": "kvbench.recipe.rows",
    "RunnerFacts": "kvbench.recipe.facts",
    "RunnerHardware": "kvbench.recipe.runners",
    "Runners": "kvbench.recipe.runners",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
