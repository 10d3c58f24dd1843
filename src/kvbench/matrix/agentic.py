"""Rows of the agentic-coding scenario: one per (row x concurrency x runner), multi-node rows
in one-concurrency chunks (one server allocation per concurrency)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kvbench.errors import KvbenchError, MatrixError
from kvbench.matrix.budget import agentic_budget_gb
from kvbench.matrix.concurrency import filter_plain, only, written
from kvbench.matrix.entry import EntryContext, plain_copy, srt_recipe, worker_pair
from kvbench.matrix.names import agentic_exp_name, multinode_agentic_exp_name
from kvbench.matrix.selection import Selection
from kvbench.recipe.arms import patches_for
from kvbench.recipe.fields import DEFAULT_AGENTIC_DURATION_SECONDS

if TYPE_CHECKING:
    from kvbench.recipe.facts import RunnerFacts

# How many concurrencies share one multi-node allocation; 1 matches single-node agentic.
CONCURRENCIES_PER_ALLOCATION = 1


def agentic_rows(ctx: EntryContext, sel: Selection, runners: RunnerFacts) -> Iterator[dict]:
    for b, block in enumerate(ctx.raw["scenarios"].get("agentic-coding") or []):
        for r, row in enumerate(block["search-space"]):
            try:
                budget = agentic_budget_gb(block, row, ctx.raw["runner"], runners)
            except KvbenchError as e:
                raise MatrixError(
                    f"{ctx.key}.agentic-coding[{b}].search-space[{r}]: {e.message}", hint=e.hint
                ) from None
            values = only(filter_plain(written(row, sel.step_size), sel.min_conc,
                                       sel.max_conc), sel.concs)
            if not values:
                continue
            if ctx.is_multinode:
                yield from _multinode(ctx, row, values, budget)
            else:
                yield from _single_node(ctx, row, values, budget)


def _tail(ctx: EntryContext, row: dict, out: dict[str, Any]) -> dict[str, Any]:
    backend = row.get("kv-offload-backend")
    if backend is not None:
        out["kv-offload-backend"] = plain_copy(backend)
    out.update(ctx.components(row))
    if ctx.is_multinode:
        ctx.with_node_count(out, row)
    # kvbench extension: the entry's engine patches for this row's arm travel in the row
    if patches := patches_for(ctx.raw.get("patches"), out):
        out["patches"] = patches
    return out


def _single_node(ctx: EntryContext, row: dict, values: list[int], budget: int
                 ) -> Iterator[dict]:
    tp, ep, dp_attn = row["tp"], row.get("ep"), row.get("dp-attn")
    spec = row.get("spec-decoding", "none")
    mode = row["kv-offloading"]
    for conc in values:
        for runner in ctx.runners:
            yield _tail(ctx, row, {
                **ctx.head(runner),
                "tp": tp,
                "pp": row.get("pp", 1),
                "dcp-size": row.get("dcp-size", 1),
                "pcp-size": row.get("pcp-size", 1),
                "ep": ep if ep is not None else 1,
                "dp-attn": dp_attn if dp_attn is not None else False,
                "spec-decoding": spec,
                "conc": conc,
                **srt_recipe(row),
                "kv-offloading": mode,
                "total-cpu-dram-gb": budget,
                "duration": DEFAULT_AGENTIC_DURATION_SECONDS,
                "exp-name": agentic_exp_name(ctx.raw["model-prefix"], tp, conc, mode,
                                             row.get("kv-offload-backend"), spec),
                "scenario-type": "agentic-coding",
            })


def _multinode(ctx: EntryContext, row: dict, values: list[int], budget: int) -> Iterator[dict]:
    prefill, decode = worker_pair(row)
    mode = row.get("kv-offloading", "none")
    size = CONCURRENCIES_PER_ALLOCATION
    chunks = [values[i:i + size] for i in range(0, len(values), size)]
    for runner in ctx.runners:
        for concs in chunks:
            yield _tail(ctx, row, {
                **ctx.head(runner),
                "spec-decoding": row.get("spec-decoding", "none"),
                "prefill": plain_copy(prefill),
                "decode": plain_copy(decode),
                "conc": list(concs),
                "kv-offloading": mode,
                "total-cpu-dram-gb": budget,
                "duration": DEFAULT_AGENTIC_DURATION_SECONDS,
                "exp-name": multinode_agentic_exp_name(
                    ctx.raw["model-prefix"], prefill, decode, concs, mode,
                    row.get("kv-offload-backend"),
                ),
                "disagg": ctx.disagg,
                "scenario-type": "agentic-coding",
            })
