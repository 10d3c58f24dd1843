"""--trim-conc and --smoke: fewer points per curve, as the newer generator cuts them.

InferenceX inferencex-e2e/infx/matrix/generate.py @fabe70b7 (`trim_conc`, `smoke_entries`,
`select_matrix_evals`). A curve is a row without its concurrency, name and eval fields
(evals.topology_key); trimming keeps each curve's row of lowest concurrency (a multi-node
row's list cut to its lowest first) and carries over the eval marks of the rows it drops.
Smoke runs each curve once as a benchmark (evals off) and each eval row once, trimmed."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kvbench.matrix.evals import Keyed, topology_key


def _lowest(row: dict[str, Any]) -> int:
    conc = row["conc"]
    return min(conc) if isinstance(conc, list) else conc


def trim_conc(rows: Keyed) -> Keyed:
    out: Keyed = []
    groups: dict[tuple, list[int]] = defaultdict(list)
    for key, row in rows:
        conc = row.get("conc")
        if row.get("prefill") is not None and isinstance(conc, list) and conc:
            low = min(conc)
            if len(conc) > 1 or row.get("eval-conc") != low:
                row = {**row, "conc": [low]}
                if "eval-conc" in row:
                    row["eval-conc"] = low
        groups[topology_key(row)].append(len(out))
        out.append((key, row))
    drop: set[int] = set()
    for members in groups.values():
        keep = min(members, key=lambda i: _lowest(out[i][1]))
        key, kept = out[keep]
        if any(out[i][1].get("run-eval") is True for i in members):
            kept = {**kept, "run-eval": True}
            if kept.get("prefill") is not None:
                kept["eval-conc"] = _lowest(kept)
            if any(out[i][1].get("eval-all-concs") is True for i in members):
                kept["eval-all-concs"] = True
            out[keep] = (key, kept)
        drop.update(i for i in members if i != keep)
    return [pair for i, pair in enumerate(out) if i not in drop]


def smoke(rows: Keyed) -> Keyed:
    """Rows already marked for evals (agentic included) -> one benchmark and one eval row
    per curve."""
    benchmarks = trim_conc([(key, {**row, "run-eval": False}) for key, row in rows])
    evals: Keyed = []
    for key, row in rows:
        if not row.get("run-eval"):
            continue
        row = {**row, "eval-only": True}
        row.pop("require-power", None)  # an eval measures accuracy, never power
        if row.get("prefill") is not None:
            row["conc"] = [row["eval-conc"]]
            row["eval-all-concs"] = False
        evals.append((key, row))
    return benchmarks + trim_conc(evals)
