"""Rows of the fixed-seq-len scenario (isl/osl random-data benchmarks)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench.matrix.concurrency import filter_list, filter_range, geometric, only, written
from kvbench.matrix.entry import EntryContext, plain_copy, srt_recipe, worker_pair
from kvbench.matrix.names import fixed_exp_name
from kvbench.matrix.selection import Selection

# The reference leaves this much room above isl + osl for chat-template tokens.
MAX_MODEL_LEN_MARGIN_TOKENS = 256


def fixed_rows(ctx: EntryContext, sel: Selection, seq_filter: set | None) -> Iterator[dict]:
    for block in ctx.raw["scenarios"].get("fixed-seq-len") or []:
        isl, osl = block["isl"], block["osl"]
        if seq_filter and (isl, osl) not in seq_filter:
            continue
        # newer layout: a power-measured block says so in each of its rows
        power = {"require-power": True} if block.get("require-power") else {}
        for row in block["search-space"]:
            if ctx.is_multinode:
                yield from _multinode(ctx, sel, row, isl, osl, power)
            else:
                yield from _single_node(ctx, sel, row, isl, osl, power)


def _multinode(ctx: EntryContext, sel: Selection, row: dict, isl: int, osl: int,
               power: dict) -> Iterator[dict]:
    if row.get("conc-list"):
        values = list(row["conc-list"])
    else:
        values = geometric(row["conc-start"], row["conc-end"], sel.step_size)
    values = filter_list(values, sel.min_conc, sel.max_conc)
    if values is None or not (values := only(values, sel.concs)):
        return
    prefill, decode = worker_pair(row)
    for runner in ctx.runners:
        out: dict[str, Any] = {
            **ctx.head(runner),
            "isl": isl,
            "osl": osl,
            **power,
            "spec-decoding": row.get("spec-decoding", "none"),
            "prefill": plain_copy(prefill),
            "decode": plain_copy(decode),
            "conc": list(values),
            "max-model-len": isl + osl + MAX_MODEL_LEN_MARGIN_TOKENS,
            "exp-name": fixed_exp_name(ctx.raw["model-prefix"], isl, osl),
            "disagg": ctx.disagg,
            "run-eval": False,
        }
        out.update(ctx.components(row))
        yield ctx.with_node_count(out, row)


def _single_node(ctx: EntryContext, sel: Selection, row: dict, isl: int, osl: int,
                 power: dict) -> Iterator[dict]:
    tp = row["tp"]
    ep = row.get("ep")
    if sel.max_tp is not None and (sel.max_tp <= 0 or tp > sel.max_tp):
        return
    if sel.max_ep is not None:
        if sel.max_ep <= 0:
            return
        if ep is not None and ep > sel.max_ep:
            ep = sel.max_ep
    if row.get("conc-list"):
        values = filter_list(written(row, sel.step_size), sel.min_conc, sel.max_conc)
    else:
        values = filter_range(row["conc-start"], row["conc-end"], sel.step_size,
                              sel.min_conc, sel.max_conc)
    if values is None or not (values := only(values, sel.concs)):
        return
    dp_attn = row.get("dp-attn")
    for conc in values:
        for runner in ctx.runners:
            out: dict[str, Any] = {
                **ctx.head(runner),
                "isl": isl,
                "osl": osl,
                **power,
                "tp": tp,
                "pp": row.get("pp", 1),
                "dcp-size": row.get("dcp-size", 1),
                "pcp-size": row.get("pcp-size", 1),
                "conc": conc,
                "max-model-len": isl + osl + MAX_MODEL_LEN_MARGIN_TOKENS,
                "ep": ep if ep is not None else 1,
                "dp-attn": dp_attn if dp_attn is not None else False,
                "spec-decoding": row.get("spec-decoding", "none"),
                **srt_recipe(row),
                "exp-name": fixed_exp_name(ctx.raw["model-prefix"], isl, osl),
                "disagg": ctx.disagg,
                "run-eval": False,
            }
            out.update(ctx.components(row))
            yield out
