"""The runs table: one escaped row per result, with its plan and warnings."""

from __future__ import annotations

import json
from typing import Any

from kvbench.report.figures import esc
from kvbench.results import Result


def _fmt(v: Any, spec: str = ".1f", scale: float = 1.0) -> str:
    if v is None:
        return "–"
    try:
        return format(float(v) * scale, spec)
    except (TypeError, ValueError):
        return esc(v)


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


COLUMNS = ["status", "run / arm", "conc", "TTFT p50 ms", "E2E p50 ms", "tok/s/user",
           "tok/s/GPU", "hit % d/h/x", "InferenceX HBM/host/unreused %", "host GB", "J/tok",
           "errors", "warnings"]


def _sizing_note(sizing: dict | None) -> str:
    """Which sizing ran (launcher: the InferenceX launcher's arithmetic; budget: kvbench's)
    and the other's node GB beside it."""
    if not sizing:
        return ""
    other = sizing.get("other")
    beside = (f", {other['sizing']} {_fmt(other.get('projected-host-bytes'), ',.0f', 1e-9)}"
              if other else "")
    title = esc(sizing.get("source") or "")
    return (f"<div class='muted' title='{title}'>{esc(sizing['sizing'])} sizing"
            f"{esc(beside)}</div>")


def _plan_cell(plan: dict | None, sizing: dict | None = None) -> str:
    if not plan:
        return "–"
    gb = plan.get("projected-host-gb", plan.get("projected_host_gb"))
    budget = plan.get("total-cpu-dram-gb", plan.get("budget_gb"))
    ok = plan.get("within-budget", plan.get("within_budget"))
    args = list(plan.get("engine-args", plan.get("engine_args")) or [])
    connector = (plan.get("engine-config", plan.get("engine_config")) or {}).get(
        "kv-transfer-config")  # vllm-simple: the connector JSON (plan/sizers/vllm.py)
    if connector:
        args += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
    summary = f"{_fmt(gb, '.0f')} / {_fmt(budget, '.0f')}"
    mark = "" if ok in (None, True) else " <span class='bad'>over budget</span>"
    detail = esc(" ".join(map(str, args))) or "no offload flags"
    return f"<span title='{detail}'>{summary}</span>{mark}{_sizing_note(sizing)}"


def _inferencex_cell(r: Result) -> str:
    """The point as InferenceX's cache-reuse chart draws it (results/reuse.py), marked where
    it differs from kvbench's per-prompt-token shares; its source on hover."""
    from kvbench.results.compare import result_reuse
    from kvbench.results.reuse import shares_differ

    ix = r.inferencex_cache or {}
    share = ix.get("share")
    if not ix:
        return "–"
    if share is None:
        return f"<span class='muted' title='{esc(ix.get('source'))}'>no tier</span>"
    parts = [share["hbm"], share["host"], share["unreused"]]
    text = ("combined " if share["combined"] else "") + "/".join(
        _fmt(p, ".0f", 100) for p in parts)
    differs = shares_differ(result_reuse(r), share)
    mark = " <span class='muted'>≠ kvbench</span>" if differs else ""
    return f"<span title='{esc(ix.get('source'))}'>{text}</span>{mark}"


def _status_cell(r: Result) -> str:
    """One verdict per run: `failed`, or for a run that ended its validity stamp (`valid` /
    `not valid`, the reasons on hover); `ok` only for a result older than the stamp, with ⚑
    where its validation flagged something. (`ok ⚑` beside `not valid` read as two verdicts
    that disagree, issue 39.)"""
    if r.status != "ok" or r.valid is None:
        flagged = r.status == "ok" and bool(r.validation.get("flags"))
        return f"<span class='st st-{esc(r.status)}'>{esc(r.status)}{' ⚑' * flagged}</span>"
    if r.valid:
        return "<span class='vd vd-yes'>valid</span>"
    why = "; ".join((r.validity or {}).get("reasons") or [])
    return f"<span class='vd vd-no' title='{esc(why)}'>not valid</span>"


def _submission_badge(r: Result) -> str:
    """A validity profile's verdict (AgentX), when the run was judged by one."""
    s = (r.validity or {}).get("submission")
    if not s:
        return ""
    if s["submission_valid"]:
        return f"<span class='vd vd-yes'>{esc(s['profile'])} submission</span>"
    why = "; ".join(s["reasons"])
    return (f"<span class='vd vd-no' title='{esc(why)}'>not a submission "
            f"({esc(s['profile'])})</span>")


def _warnings_cell(r: Result) -> str:
    items = [f"not valid: {why}" for why in (r.validity or {}).get("reasons") or []
             if r.status == "ok"]
    submission = (r.validity or {}).get("submission") or {}
    items += [f"not a submission ({submission['profile']}): {why}"
              for why in submission.get("reasons") or []]
    items += list(r.warnings)
    if r.failure:
        items.insert(0, f"FAILED at {r.failure.get('stage', '?')}: "
                        f"{r.failure.get('reason', '')}")
    if not items:
        return "<span class='muted'>none</span>"
    lis = "".join(f"<li>{esc(w)}</li>" for w in items)
    return f"<details><summary>{len(items)}</summary><ul>{lis}</ul></details>"


def run_rows(results: list[Result]) -> str:
    rows = []
    for r in sorted(results, key=lambda r: (r.arm, r.conc, r.repeat)):
        rm = r.request_metrics or {}
        tiers = [_get(r.server_metrics, "cache", k) for k in
                 ("gpu_cache_hit_rate", "cpu_cache_hit_rate", "external_cache_hit_rate")]
        hits = "/".join(_fmt(t, ".0f", 100) for t in tiers)
        errors = r.request_accounting.get("records_error_dropped", 0)
        cells = [
            _status_cell(r) + _submission_badge(r),
            esc(r.exp_name) + (f" <span class='muted'>r{r.repeat}</span>" if r.repeat else "")
            + f"<div class='arm'>{esc(r.arm)}</div>",
            str(r.conc),
            _fmt(_get(rm, "latency", "ttft_ms", "p50"), ".0f"),
            _fmt(_get(rm, "latency", "e2e_ms", "p50"), ".0f"),
            _fmt(_get(rm, "latency", "interactivity_tok_s", "p50")),
            _fmt(_get(rm, "throughput", "output_tok_s_per_gpu")),
            hits, _inferencex_cell(r), _plan_cell(r.plan, r.host_sizing),
            _fmt(_get(r.energy, "j_per_output_token"), ".2f"),
            str(errors), _warnings_cell(r),
        ]
        tds = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(f"<tr data-status='{esc(r.status)}'>{tds}</tr>")
    return "\n".join(rows)


def header_row() -> str:
    return "".join(f"<th data-col='{i}'>{esc(c)}</th>" for i, c in enumerate(COLUMNS))
