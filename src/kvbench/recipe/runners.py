"""runners.yaml: scheduling labels and the per-cluster host facts the DRAM budget needs."""

from __future__ import annotations

from pydantic import Field, field_validator

from kvbench.errors import RecipeError
from kvbench.recipe.base import RecipeModel


class RunnerHardware(RecipeModel):
    """Host facts of one node type, keyed in runners.yaml by the master `runner` label."""

    available_cpu_dram_mib: int = Field(alias="available-cpu-dram-mib", gt=0, strict=True)
    gpus_per_node: int = Field(alias="gpus-per-node", gt=0, strict=True)


class Runners(RecipeModel):
    """`labels` map a scheduling label to concrete runner names; `hardware` maps a master
    `runner` label (agentic: `cluster:<name>`) to its node facts."""

    labels: dict[str, list[str]]
    hardware: dict[str, RunnerHardware] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _non_empty(cls, labels: dict[str, list[str]]) -> dict[str, list[str]]:
        empty = [label for label, nodes in labels.items() if not nodes]
        if empty:
            raise ValueError(f"runner labels need at least one runner name (empty: {empty})")
        return labels

    def hardware_for(self, runner: str) -> RunnerHardware:
        """The node facts of `runner`; a RecipeError lists the known keys when absent."""
        try:
            return self.hardware[runner]
        except KeyError:
            known = ", ".join(sorted(self.hardware)) or "(none)"
            raise RecipeError(
                f"runner {runner!r} has no entry under 'hardware' in runners.yaml; "
                f"known: {known}",
                hint="add available-cpu-dram-mib and gpus-per-node for it to runners.yaml",
            ) from None

    def nodes_for(self, label: str) -> list[str]:
        """Concrete runner names of a scheduling label (empty if unknown)."""
        return list(self.labels.get(label, []))
