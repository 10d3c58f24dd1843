"""Which rows also run an accuracy eval, following the reference's eval policy.

Fixed-seq-len: only 8k1k rows; single-node marks the highest and the median concurrency per
(model, runner, framework, precision, isl, osl, spec-decoding, dp-attn) group, ignoring
concurrencies below MIN_EVAL_CONC; multi-node marks, per distinct topology, the row holding
its highest eligible concurrency and records it as `eval-conc`. Agentic evals are opt-in
(`evals_only` / `all_evals`).

The newer generator (InferenceX inferencex-e2e/infx/matrix/generate.py, fabe70b7) also names
the evaluator of each eval row (`eval-framework`, `eval-suite`: lm-eval with no suite unless
the model has a vendor eval) and always evaluates the agentic rows of models that have one
(AUTOMATIC_AGENTIC_VENDOR_EVALS); `e2e=True` follows it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kvbench.matrix.names import SEQ_LENS

MIN_EVAL_CONC = 16
_EVAL_SEQ = SEQ_LENS["8k1k"]
# Fields that vary between rows of one topology; everything else identifies it.
_NOT_TOPOLOGY = {"conc", "run-eval", "eval-only", "eval-conc", "eval-all-concs", "exp-name",
                 "eval-framework", "eval-suite"}
DEFAULT_EVAL_FRAMEWORK = "lm-eval"
# model-prefix -> (eval-framework, eval-suite) of the agentic vendor evals (fabe70b7)
VENDOR_EVALS = {
    "kimik3": ("kimi-vendor", "kimi_tool_call_schema_full"),
    "minimaxm3": ("minimax-vendor", "minimax_m3_full"),
}

Keyed = list[tuple[str, dict[str, Any]]]


def frozen(value: Any) -> Any:
    """A JSON-shaped value as a hashable one (mapping keys sorted)."""
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


def topology_key(row: dict[str, Any]) -> tuple:
    return tuple(sorted((k, frozen(v)) for k, v in row.items() if k not in _NOT_TOPOLOGY))


def _eligible(row: dict[str, Any]) -> list[int]:
    conc = row["conc"]
    return sorted(c for c in (conc if isinstance(conc, list) else [conc]) if c >= MIN_EVAL_CONC)


def _is_8k1k(row: dict[str, Any]) -> bool:
    return (row.get("isl"), row.get("osl")) == _EVAL_SEQ


def vendor_eval(row: dict[str, Any]) -> tuple[str, str] | None:
    """The vendor eval an agentic row always runs (newer generator), or None."""
    if row.get("scenario-type") != "agentic-coding":
        return None
    return VENDOR_EVALS.get(row.get("model-prefix", ""))


def _concs(row: dict[str, Any]) -> list[int]:
    conc = row["conc"]
    return conc if isinstance(conc, list) else [conc]


def mark_evals(rows: Keyed, include_agentic: bool = False, e2e: bool = False) -> Keyed:
    """Set `run-eval` on every row (and `eval-conc` on chosen multi-node rows); `e2e`: the
    newer generator's vendor evals and evaluator names."""
    chosen: set[int] = set()
    eval_conc: dict[int, int] = {}
    vendor: dict[int, tuple[str, str]] = {}
    if e2e:
        for i, (_, row) in enumerate(rows):
            if (spec := vendor_eval(row)) is not None:
                vendor[i] = spec
                chosen.add(i)
                if "prefill" in row:
                    eval_conc[i] = max(_concs(row))
    single: dict[tuple, list[int]] = defaultdict(list)
    multi: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for i, (_, row) in enumerate(rows):
        if not _is_8k1k(row) or not _eligible(row):
            continue
        if "tp" in row:
            single[(row["model"], row["runner"], row["framework"], row["precision"],
                    row["isl"], row["osl"], row["spec-decoding"], row["dp-attn"])].append(i)
        elif "prefill" in row:
            multi[topology_key(row)].append((i, _eligible(row)[-1]))
    for members in single.values():
        concs = sorted({rows[i][1]["conc"] for i in members})
        targets = {concs[-1], concs[len(concs) // 2]}
        chosen.update(i for i in members if rows[i][1]["conc"] in targets)
    if include_agentic:
        agentic_single: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for i, (_, row) in enumerate(rows):
            if row.get("scenario-type") != "agentic-coding" or i in vendor:
                continue
            if "prefill" in row:
                if _eligible(row):
                    multi[topology_key(row)].append((i, _eligible(row)[-1]))
                continue
            conc = row["conc"]
            agentic_single[(row["model"], row["runner"], row["framework"],
                            row["precision"])].append((i, max(conc) if isinstance(conc, list)
                                                       else conc))
        for members in agentic_single.values():
            chosen.add(max(members, key=lambda m: m[1])[0])
    for members in multi.values():
        best, conc = max(members, key=lambda m: m[1])
        chosen.add(best)
        eval_conc[best] = conc
    for i, (_, row) in enumerate(rows):
        row["run-eval"] = i in chosen
        if e2e and i in chosen:
            row["eval-framework"], row["eval-suite"] = vendor.get(i, (DEFAULT_EVAL_FRAMEWORK,
                                                                      ""))
        if i in eval_conc:
            row["eval-conc"] = eval_conc[i]
    return rows


def mark_all_evals(rows: Keyed, e2e: bool = False) -> Keyed:
    """Every 8k1k fixed row and every agentic row becomes an eval row; multi-node rows of
    one topology merge into one row with the union of their concurrencies."""
    out: Keyed = []
    merged_at: dict[tuple, int] = {}
    for key, row in rows:
        if e2e and (spec := vendor_eval(row)) is not None:
            row = {**row, "run-eval": True, "eval-framework": spec[0], "eval-suite": spec[1]}
            if "prefill" in row:
                row["conc"] = sorted(set(_concs(row)))
                row["eval-conc"] = max(row["conc"])
            out.append((key, row))
            continue
        agentic = row.get("scenario-type") == "agentic-coding"
        if not agentic and not _is_8k1k(row):
            out.append((key, row))
            continue
        if "prefill" not in row:
            row["run-eval"] = True
            out.append((key, row))
            continue
        conc = row["conc"] if isinstance(row["conc"], list) else [row["conc"]]
        topo = (agentic, topology_key(row))
        if topo in merged_at:
            existing = out[merged_at[topo]][1]
            existing["conc"] = sorted(set(existing["conc"] + conc))
            if agentic:
                existing["eval-conc"] = max(existing["conc"])
            continue
        merged = {**row, "conc": sorted(set(conc)), "run-eval": True}
        if agentic:
            merged["eval-conc"] = max(conc)
        else:
            merged["eval-all-concs"] = True
            merged.pop("eval-conc", None)
        merged_at[topo] = len(out)
        out.append((key, merged))
    if e2e:
        for _, row in out:
            if row.get("run-eval"):
                if not row.get("eval-framework"):
                    row["eval-framework"] = DEFAULT_EVAL_FRAMEWORK
                if row.get("eval-suite") is None:
                    row["eval-suite"] = ""
    return out
