"""What the matrix stage needs from runners.yaml, as plain data: labels, the layout, and the
node facts per master `runner` label. Built from a validated `Runners`, or read back from the
parse cache (recipe/cache.py) without the schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.errors import RecipeError
from kvbench.recipe.fields import CLUSTER_LABEL_PREFIX


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """Host facts of one node type."""

    available_cpu_dram_mib: int
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class RunnerFacts:
    labels: dict[str, list[str]]
    layout: str  # "classic" (hardware:) or "e2e" (clusters:)
    # master `runner` label -> {"gpus-per-node": n, "available-cpu-dram-mib": m (if known)}
    nodes: dict[str, dict[str, int]]

    def to_json(self) -> dict:
        return {"labels": self.labels, "layout": self.layout, "nodes": self.nodes}

    @classmethod
    def of(cls, runners: Any) -> RunnerFacts:
        """The facts of a validated runners file: the pydantic `Runners` or the plain
        schema's view of one (recipe/plain.py), read through the same attributes."""
        if runners.clusters:
            nodes = {f"{CLUSTER_LABEL_PREFIX}{cid}": {
                k: v for k, v in (("gpus-per-node", c.gpus_per_node),
                                  ("available-cpu-dram-mib", c.available_cpu_dram_mib))
                if v is not None} for cid, c in runners.clusters.items()}
        else:
            nodes = {label: {"gpus-per-node": h.gpus_per_node,
                             "available-cpu-dram-mib": h.available_cpu_dram_mib}
                     for label, h in runners.hardware.items()}
        return cls(labels={k: list(v) for k, v in runners.labels.items()},
                   layout="e2e" if runners.clusters else "classic", nodes=nodes)

    @classmethod
    def from_json(cls, data: dict) -> RunnerFacts:
        return cls(labels=data["labels"], layout=data["layout"], nodes=data["nodes"])

    def node_facts(self) -> dict[str, dict[str, int]]:
        return self.nodes

    def gpus_per_node(self, runner: str) -> int | None:
        facts = self.nodes.get(runner)
        return facts["gpus-per-node"] if facts else None

    def nodes_for(self, label: str) -> list[str]:
        """Concrete runner names of a scheduling label (empty if unknown)."""
        return list(self.labels.get(label, []))

    def hardware_for(self, runner: str) -> NodeFacts:
        """The node facts of `runner`; a RecipeError lists the known keys when absent."""
        where = "clusters" if self.layout == "e2e" else "hardware"
        facts = self.nodes.get(runner)
        if facts is None:
            known = ", ".join(sorted(self.nodes)) or "(none)"
            raise RecipeError(
                f"runner {runner!r} has no entry under '{where}' in runners.yaml; known: "
                f"{known}",
                hint="add available-cpu-dram-mib and gpus-per-node for it to runners.yaml")
        if "available-cpu-dram-mib" not in facts:
            raise RecipeError(
                f"cluster {runner.removeprefix(CLUSTER_LABEL_PREFIX)!r} in runners.yaml has "
                "no 'available-cpu-dram-mib', so its 'kv-offloading: dram' rows have no "
                "host-DRAM budget",
                hint="add available-cpu-dram-mib to the cluster's record")
        return NodeFacts(facts["available-cpu-dram-mib"], facts["gpus-per-node"])
