"""runners.yaml: scheduling labels and the per-cluster host facts the DRAM budget needs.

Two layouts exist. The classic one (InferenceX `configs/runners.yaml`, 843c6254f) keys a
`hardware:` mapping by the master `runner` label (`cluster:b300-nv`). The newer one
(`inferencex-e2e/configs/runners.yaml`) has `clusters:` records keyed by the bare cluster id,
each with its scheduler's sub-record, and `partition:<name>` labels selecting one Slurm
partition of a cluster; every runner must belong to exactly one `cluster:<id>` label
(InferenceX `inferencex-e2e/infx/clusters/__init__.py`, RunnerInventory)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from kvbench.recipe import rules
from kvbench.recipe.base import RecipeModel
from kvbench.recipe.facts import NodeFacts, RunnerFacts
from kvbench.recipe.fields import Arch


class RunnerHardware(RecipeModel):
    """Host facts of one node type, keyed in runners.yaml by the master `runner` label."""

    available_cpu_dram_mib: int = Field(alias="available-cpu-dram-mib", gt=0, strict=True)
    gpus_per_node: int = Field(alias="gpus-per-node", gt=0, strict=True)

    _dram_in_range = field_validator("available_cpu_dram_mib")(rules.host_mib)
    _gpus_in_range = field_validator("gpus_per_node")(rules.gpus_per_node)


class Cluster(RecipeModel):
    """One `clusters:` record of the newer layout. kvbench reads the node facts; the
    scheduler's sub-record, model locations and environment are the launcher's business and
    are kept as written."""

    gpus_per_node: int = Field(alias="gpus-per-node", gt=0, strict=True)
    # optional upstream: a cluster without it simply cannot run `kv-offloading: dram` rows
    available_cpu_dram_mib: int | None = Field(default=None, alias="available-cpu-dram-mib",
                                               gt=0, strict=True)
    arch: Arch
    scheduler: str = Field(min_length=1)
    slurm: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    env: dict[str, str] | None = None

    _dram_in_range = field_validator("available_cpu_dram_mib")(rules.host_mib)
    _gpus_in_range = field_validator("gpus_per_node")(rules.gpus_per_node)


class Runners(RecipeModel):
    """`labels` map a scheduling label to concrete runner names; `hardware` (classic) maps a
    master `runner` label to its node facts, `clusters` (newer) holds one record per
    `cluster:<id>` label."""

    labels: dict[str, list[str]]
    hardware: dict[str, RunnerHardware] = Field(default_factory=dict)
    clusters: dict[str, Cluster] = Field(default_factory=dict)

    _non_empty = field_validator("labels")(rules.runner_labels)
    _one_layout = model_validator(mode="after")(rules.runners_layout)

    @property
    def layout(self) -> str:
        """`e2e` for the `clusters:` layout, `classic` for `hardware:`."""
        return self.facts().layout

    def facts(self) -> RunnerFacts:
        """The plain data the matrix stage reads (labels, layout, node facts)."""
        return RunnerFacts.of(self)

    def node_facts(self) -> dict[str, dict[str, int]]:
        """Master `runner` label -> the node facts it has (either layout)."""
        return self.facts().nodes

    def gpus_per_node(self, runner: str) -> int | None:
        return self.facts().gpus_per_node(runner)

    def hardware_for(self, runner: str) -> NodeFacts:
        """The node facts of `runner`; a RecipeError lists the known keys when absent."""
        return self.facts().hardware_for(runner)

    def nodes_for(self, label: str) -> list[str]:
        """Concrete runner names of a scheduling label (empty if unknown)."""
        return self.facts().nodes_for(label)
