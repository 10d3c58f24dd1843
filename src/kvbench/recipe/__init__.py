"""The InferenceX master-config format (recipes) and runners.yaml: schema, loader, errors."""

from __future__ import annotations

from kvbench.errors import RecipeError
from kvbench.recipe.components import ComponentMetadata, KvOffloadBackend, Worker
from kvbench.recipe.fields import (
    CLUSTER_LABEL_PREFIX,
    DEFAULT_AGENTIC_DURATION_SECONDS,
    KV_OFFLOAD_BACKENDS,
    KV_OFFLOADINGS,
    SCENARIO_TYPES,
    SPEC_DECODINGS,
)
from kvbench.recipe.loader import load_master_configs, load_runners, master_config_errors
from kvbench.recipe.master import MasterEntry, MultiNodeMasterEntry, SingleNodeMasterEntry
from kvbench.recipe.rows import AgenticRow, FixedMultiNodeRow, FixedSingleNodeRow
from kvbench.recipe.runners import RunnerHardware, Runners

__all__ = [
    "CLUSTER_LABEL_PREFIX",
    "DEFAULT_AGENTIC_DURATION_SECONDS",
    "KV_OFFLOADINGS",
    "KV_OFFLOAD_BACKENDS",
    "SCENARIO_TYPES",
    "SPEC_DECODINGS",
    "AgenticRow",
    "ComponentMetadata",
    "FixedMultiNodeRow",
    "FixedSingleNodeRow",
    "KvOffloadBackend",
    "MasterEntry",
    "MultiNodeMasterEntry",
    "RecipeError",
    "RunnerHardware",
    "Runners",
    "SingleNodeMasterEntry",
    "Worker",
    "load_master_configs",
    "load_runners",
    "master_config_errors",
]
