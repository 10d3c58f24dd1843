"""What every row of one config key shares: identity fields, runners, component metadata."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbench.recipe.facts import RunnerFacts


@dataclass(frozen=True, slots=True)
class EntryContext:
    key: str
    raw: dict[str, Any]
    runners: tuple[str, ...]  # runner values to emit rows for (label, or filtered nodes)
    inventory: RunnerFacts | None = None
    # the generator the rows follow: "classic" (843c6254f) or "e2e" (the newer one, which
    # adds node-count to multi-node rows and eval-framework/eval-suite to eval rows)
    layout: str = "classic"
    base: Path | None = None  # the checkout's benchmark folder (srt-slurm recipes)

    @property
    def e2e(self) -> bool:
        return self.layout == "e2e"

    @property
    def is_multinode(self) -> bool:
        return bool(self.raw.get("multinode", False))

    @property
    def disagg(self) -> bool:
        return bool(self.raw.get("disagg", False))

    def head(self, runner: str) -> dict[str, Any]:
        """The leading keys of every row, in the reference's order."""
        raw = self.raw
        return {
            "image": raw["image"],
            "model": raw["model"],
            "model-prefix": raw["model-prefix"],
            "precision": raw["precision"],
            "framework": raw["framework"],
            "runner": runner,
        }

    def with_node_count(self, out: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        """Newer layout: a multi-node row's `node-count`, after its component metadata."""
        if self.e2e and self.inventory is not None:
            from kvbench.errors import MatrixError
            from kvbench.matrix.nodes import node_count

            try:
                out["node-count"] = node_count(out, row.get("num-nodes"), self.inventory,
                                               self.base)
            except MatrixError as e:
                raise MatrixError(f"{self.key}: {e.message}", hint=e.hint) from None
        return out

    def components(self, row: dict[str, Any]) -> dict[str, Any]:
        """router / kv-p2p-transfer from the row, else from the top level (never both)."""
        out = {}
        for field in ("router", "kv-p2p-transfer"):
            value = row.get(field, self.raw.get(field))
            if value is not None:
                out[field] = plain_copy(value)
        return out


def plain_copy(value: Any) -> Any:
    """A deep copy of YAML data (mappings, lists, scalars): copy.deepcopy's memo and
    dispatch are a tenth of expanding the catalog, and recipes hold nothing else."""
    if type(value) is dict:
        return {k: plain_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [plain_copy(v) for v in value]
    return value


def srt_recipe(row: dict[str, Any]) -> dict[str, Any]:
    """Newer layout: the srt-slurm recipe a single-node row launches with (when it names one)."""
    return {"srt-recipe": row["srt-recipe"]} if row.get("srt-recipe") is not None else {}


def worker_pair(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The row's prefill and decode workers as the generator writes them. An aggregated
    `worker` becomes a prefill worker (num-worker 1 unless written) beside a num-worker 0
    decode worker without its settings (InferenceX inferencex-e2e generate.py,
    multinode_worker_pair)."""
    if "worker" not in row:
        return with_worker_defaults(row["prefill"]), with_worker_defaults(row["decode"])
    worker = with_worker_defaults(row["worker"])
    prefill = {"num-worker": 1, **worker}
    decode = {"num-worker": 0, **{k: v for k, v in worker.items()
                                  if k not in ("num-worker", "additional-settings")}}
    return prefill, decode


def with_worker_defaults(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker copy with pp / dcp-size / pcp-size made explicit (kept in place if written)."""
    return {
        **plain_copy(worker),
        "pp": worker.get("pp", 1),
        "dcp-size": worker.get("dcp-size", 1),
        "pcp-size": worker.get("pcp-size", 1),
    }
