"""runners.yaml: scheduling labels and the per-cluster host facts the DRAM budget needs.

Two layouts exist. The classic one (InferenceX `configs/runners.yaml`, 843c6254f) keys a
`hardware:` mapping by the master `runner` label (`cluster:b300-nv`). The newer one
(`inferencex-e2e/configs/runners.yaml`) has `clusters:` records keyed by the bare cluster id,
each with its scheduler's sub-record, and `partition:<name>` labels selecting one Slurm
partition of a cluster; every runner must belong to exactly one `cluster:<id>` label
(InferenceX `inferencex-e2e/infx/clusters/__init__.py`, RunnerInventory)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kvbench.recipe.base import RecipeModel
from kvbench.recipe.facts import NodeFacts, RunnerFacts
from kvbench.recipe.fields import CLUSTER_LABEL_PREFIX

PARTITION_LABEL_PREFIX = "partition:"


class RunnerHardware(RecipeModel):
    """Host facts of one node type, keyed in runners.yaml by the master `runner` label."""

    available_cpu_dram_mib: int = Field(alias="available-cpu-dram-mib", gt=0, strict=True)
    gpus_per_node: int = Field(alias="gpus-per-node", gt=0, strict=True)


class Cluster(RecipeModel):
    """One `clusters:` record of the newer layout. kvbench reads the node facts; the
    scheduler's sub-record, model locations and environment are the launcher's business and
    are kept as written."""

    gpus_per_node: int = Field(alias="gpus-per-node", gt=0, strict=True)
    # optional upstream: a cluster without it simply cannot run `kv-offloading: dram` rows
    available_cpu_dram_mib: int | None = Field(default=None, alias="available-cpu-dram-mib",
                                               gt=0, strict=True)
    arch: Literal["x86_64", "aarch64"]
    scheduler: str = Field(min_length=1)
    slurm: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    env: dict[str, str] | None = None

    def partitions(self) -> set[str]:
        slurm = self.slurm or {}
        names = set(slurm.get("partitions") or [])
        if slurm.get("partition"):
            names.add(slurm["partition"])
        return {str(n) for n in names}


class Runners(RecipeModel):
    """`labels` map a scheduling label to concrete runner names; `hardware` (classic) maps a
    master `runner` label to its node facts, `clusters` (newer) holds one record per
    `cluster:<id>` label."""

    labels: dict[str, list[str]]
    hardware: dict[str, RunnerHardware] = Field(default_factory=dict)
    clusters: dict[str, Cluster] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _non_empty(cls, labels: dict[str, list[str]]) -> dict[str, list[str]]:
        empty = [label for label, nodes in labels.items() if not nodes]
        if empty:
            raise ValueError(f"runner labels need at least one runner name (empty: {empty})")
        return labels

    @model_validator(mode="after")
    def _one_layout(self) -> Runners:
        if self.hardware and self.clusters:
            raise ValueError("give 'hardware' (classic layout) or 'clusters' (inferencex-e2e "
                             "layout), not both")
        if self.clusters:
            self._check_inventory()
        return self

    def _check_inventory(self) -> None:
        """Every cluster has its label, every label its cluster, every runner one cluster."""
        owned = {label.removeprefix(CLUSTER_LABEL_PREFIX): runners
                 for label, runners in self.labels.items()
                 if label.startswith(CLUSTER_LABEL_PREFIX)}
        if unlabeled := sorted(self.clusters.keys() - owned.keys()):
            raise ValueError(f"clusters without a '{CLUSTER_LABEL_PREFIX}<id>' label: "
                             f"{unlabeled}")
        if undefined := sorted(owned.keys() - self.clusters.keys()):
            raise ValueError(f"'{CLUSTER_LABEL_PREFIX}<id>' labels without a clusters entry: "
                             f"{undefined}")
        owner: dict[str, list[str]] = {}
        for cluster_id, runners in owned.items():
            for runner in runners:
                owner.setdefault(runner, []).append(cluster_id)
        if shared := {r: ids for r, ids in owner.items() if len(ids) > 1}:
            raise ValueError(f"runners listed under several clusters: {shared}")
        if orphans := sorted({r for rs in self.labels.values() for r in rs} - owner.keys()):
            raise ValueError(f"runners without a '{CLUSTER_LABEL_PREFIX}<id>' label: "
                             f"{orphans}")
        for label, runners in self.labels.items():
            if not label.startswith(PARTITION_LABEL_PREFIX):
                continue
            name = label.removeprefix(PARTITION_LABEL_PREFIX)
            for cluster_id in sorted({owner[r][0] for r in runners}):
                known = self.clusters[cluster_id].partitions()
                if name not in known:
                    raise ValueError(
                        f"label {label!r} selects partition {name!r}, which cluster "
                        f"{cluster_id!r} does not declare (its slurm partitions: "
                        f"{', '.join(sorted(known)) or 'none'})")

    @property
    def layout(self) -> str:
        """`e2e` for the `clusters:` layout, `classic` for `hardware:`."""
        return "e2e" if self.clusters else "classic"

    def facts(self) -> RunnerFacts:
        """The plain data the matrix stage reads (labels, layout, node facts)."""
        if self.clusters:
            nodes = {f"{CLUSTER_LABEL_PREFIX}{cid}": {
                k: v for k, v in (("gpus-per-node", c.gpus_per_node),
                                  ("available-cpu-dram-mib", c.available_cpu_dram_mib))
                if v is not None} for cid, c in self.clusters.items()}
        else:
            nodes = {label: {"gpus-per-node": h.gpus_per_node,
                             "available-cpu-dram-mib": h.available_cpu_dram_mib}
                     for label, h in self.hardware.items()}
        return RunnerFacts(labels={k: list(v) for k, v in self.labels.items()},
                           layout=self.layout, nodes=nodes)

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
