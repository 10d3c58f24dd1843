"""Search-space rows: one deployment shape and the concurrencies to run it at."""

from __future__ import annotations

from pydantic import Field, StrictInt, model_validator

from kvbench.recipe.base import (
    RecipeModel,
    check_concurrency,
    check_dcp_divides_tp,
    check_kv_offload,
    check_worker_hardware_pair,
)
from kvbench.recipe.components import AggregateWorker, ComponentMetadata, KvOffloadBackend, Worker
from kvbench.recipe.fields import KvOffloading, SpecDecoding


class _Concurrency(RecipeModel):
    # newer layout: the srt-slurm recipe that launches this row (and its eval)
    srt_recipe: str | None = Field(default=None, alias="srt-recipe", min_length=1)
    eval_srt_recipe: str | None = Field(default=None, alias="eval-srt-recipe", min_length=1)
    conc_start: int | None = Field(default=None, alias="conc-start", strict=True)
    conc_end: int | None = Field(default=None, alias="conc-end", strict=True)
    # StrictInt items: `strict` on the list does not reach them ("4", true and 4.0 passed)
    conc_list: list[StrictInt] | None = Field(default=None, alias="conc-list", strict=True)


class FixedSingleNodeRow(_Concurrency):
    """A fixed-seq-len row of a single-node entry."""

    tp: int = Field(gt=0, strict=True)
    pp: int = Field(default=1, gt=0, strict=True)
    dcp_size: int = Field(default=1, alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(default=1, alias="pcp-size", gt=0, strict=True)
    ep: int | None = Field(default=None, gt=0, strict=True)
    dp_attn: bool | None = Field(default=None, alias="dp-attn", strict=True)
    spec_decoding: SpecDecoding = Field(default="none", alias="spec-decoding")
    router: ComponentMetadata | None = None

    @model_validator(mode="after")
    def _rules(self) -> FixedSingleNodeRow:
        check_concurrency(self)
        check_dcp_divides_tp(self)
        return self


def check_multinode_topology(row: object) -> None:
    """`worker` (aggregated) or both `prefill` and `decode`; `num-nodes` goes with `worker`."""
    worker, prefill, decode = row.worker, row.prefill, row.decode  # type: ignore[attr-defined]
    has_pair = prefill is not None and decode is not None
    if (worker is not None) == (prefill is not None or decode is not None) or (
            worker is None and not has_pair):
        raise ValueError("a multi-node row gives either 'worker' (aggregated) or both "
                         "'prefill' and 'decode'")
    if worker is not None and row.num_nodes is None:  # type: ignore[attr-defined]
        raise ValueError("an aggregated 'worker' row needs 'num-nodes' (the nodes its "
                         "allocation takes)")
    if worker is None and row.num_nodes is not None:  # type: ignore[attr-defined]
        raise ValueError("'num-nodes' is only valid with an aggregated 'worker' (a prefill/"
                         "decode row's node count follows from its workers)")
    if has_pair:
        check_worker_hardware_pair(row)


class FixedMultiNodeRow(_Concurrency):
    """A fixed-seq-len row of a multi-node entry: prefill and decode workers, or one
    aggregated `worker` with `num-nodes`."""

    spec_decoding: SpecDecoding = Field(default="none", alias="spec-decoding")
    worker: AggregateWorker | None = None
    prefill: Worker | None = None
    decode: Worker | None = None
    num_nodes: int | None = Field(default=None, alias="num-nodes", gt=0, strict=True)
    router: ComponentMetadata | None = None
    kv_p2p_transfer: str | None = Field(default=None, alias="kv-p2p-transfer", min_length=1)

    @model_validator(mode="after")
    def _rules(self) -> FixedMultiNodeRow:
        check_concurrency(self)
        check_multinode_topology(self)
        return self


class AgenticRow(_Concurrency):
    """An agentic-coding row: `tp` (single node), `prefill` + `decode` or an aggregated
    `worker` (multi-node)."""

    tp: int | None = Field(default=None, gt=0, strict=True)
    pp: int = Field(default=1, gt=0, strict=True)
    dcp_size: int = Field(default=1, alias="dcp-size", gt=0, strict=True)
    pcp_size: int = Field(default=1, alias="pcp-size", gt=0, strict=True)
    ep: int | None = Field(default=None, gt=0, strict=True)
    dp_attn: bool | None = Field(default=None, alias="dp-attn", strict=True)
    spec_decoding: SpecDecoding = Field(default="none", alias="spec-decoding")
    worker: AggregateWorker | None = None
    prefill: Worker | None = None
    decode: Worker | None = None
    num_nodes: int | None = Field(default=None, alias="num-nodes", gt=0, strict=True)
    kv_offloading: KvOffloading | None = Field(default=None, alias="kv-offloading")
    kv_offload_backend: KvOffloadBackend | None = Field(default=None, alias="kv-offload-backend")
    router: ComponentMetadata | None = None
    kv_p2p_transfer: str | None = Field(default=None, alias="kv-p2p-transfer", min_length=1)

    @property
    def is_multinode(self) -> bool:
        return self.tp is None

    @model_validator(mode="after")
    def _rules(self) -> AgenticRow:
        check_concurrency(self)
        check_kv_offload(self)
        has_workers = self.prefill is not None and self.decode is not None
        topologies = (self.tp is not None) + has_workers + (self.worker is not None)
        if topologies != 1 or (
            not has_workers and (self.prefill is not None or self.decode is not None)
        ):
            raise ValueError(
                "an agentic row gives exactly one topology: 'tp' (single node), both "
                "'prefill' and 'decode', or 'worker' (multi-node)"
            )
        if self.tp is not None:
            if self.num_nodes is not None:
                raise ValueError("'num-nodes' is only valid with an aggregated 'worker'")
            if self.kv_offloading is None:
                raise ValueError(
                    "single-node agentic rows must set 'kv-offloading' (allowed: none, dram)"
                )
            check_dcp_divides_tp(self)
            return self
        explicit = [
            alias
            for name, alias in (("pp", "pp"), ("dcp_size", "dcp-size"), ("pcp_size", "pcp-size"))
            if name in self.model_fields_set
        ]
        if explicit:
            raise ValueError(
                f"multi-node agentic rows cannot set {', '.join(explicit)} at row level; "
                "set them inside 'prefill'/'decode'"
            )
        check_multinode_topology(self)
        return self
