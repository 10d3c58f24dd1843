"""Search-space rows: one deployment shape and the concurrencies to run it at."""

from __future__ import annotations

from pydantic import Field, StrictInt, field_validator, model_validator

from kvbench.recipe import rules
from kvbench.recipe.base import RecipeModel
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

    _gpus_in_range = field_validator("tp", "pp", "dcp_size", "pcp_size", "ep")(
        rules.parallelism)
    _rules = model_validator(mode="after")(rules.fixed_single_node_row)


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

    _nodes_in_range = field_validator("num_nodes")(rules.node_count)
    _rules = model_validator(mode="after")(rules.fixed_multi_node_row)


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

    _gpus_in_range = field_validator("tp", "pp", "dcp_size", "pcp_size", "ep")(
        rules.parallelism)
    _nodes_in_range = field_validator("num_nodes")(rules.node_count)
    _rules = model_validator(mode="after")(rules.agentic_row)
