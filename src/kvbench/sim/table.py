"""Human tables of simulation results (rich)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.table import Table


def _console() -> Console:
    # piped or redirected: wide enough that no name is cut at rich's default 80 columns
    return Console(width=None if sys.stdout.isatty() else 400)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def print_arms(results: dict[str, dict], trace_names: list[str]) -> None:
    """One column per arm (resident, offload) of one configuration."""
    shown = ", ".join(trace_names[:3]) + (f" (+{len(trace_names) - 3})"
                                          if len(trace_names) > 3 else "")
    table = Table(title=f"simulated: {shown}")
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")

    def row(label: str, get: Callable[[dict], str]) -> None:
        table.add_row(label, *(get(r) for r in results.values()))

    row("requests (errors)", lambda r: f"{r['requests']:,} ({r['errors']})")
    row("rejected: context", lambda r: f"{(r.get('rejected') or {}).get('context', 0):,}")
    row("prompt tokens", lambda r: f"{r['prompt_tokens']:,}")
    for tier in ("device", "host", "total"):
        row(f"hit rate {tier}", lambda r, t=tier: f"{r['hit_rate'][t]:.1%}")
    for key in ("ttft_ms", "e2e_ms"):
        for q in ("p50", "p90", "p99"):
            row(f"{key[:-3]} {q} (ms)", lambda r, k=key, q=q: _ms(r[k][q]))
    row("input tok/s", lambda r: f"{r['throughput']['input_tok_s']:,.0f}")
    row("output tok/s", lambda r: f"{r['throughput']['output_tok_s']:,.0f}")
    row("simulated span (s)", lambda r: f"{r['duration_s']:,.1f}")
    row("wall (s)", lambda r: f"{r['wall_s']:.2f}")
    out = _console()
    out.print(table)
    first = next(iter(results.values()))
    lanes = first["setup"].get("concurrency")
    loop = f"closed loop, {lanes} session lanes" if lanes else (
        f"open loop at trace times x{first['setup'].get('arrival_scale', 1.0):g}")
    out.print(f"[dim]{loop}; {first['setup']['cost_model']}, gpu tier "
              f"{first['setup']['gpu_tokens'] or 'unlimited'} tokens[/]")
    for name, r in results.items():
        for why, n in sorted((r.get("errors_by_reason") or {}).items()):
            out.print(f"[red]{name}: {n} error(s):[/] {why}")
        refused = r.get("rejected") or {}
        if refused.get("context"):
            out.print(f"[yellow]{name}: {refused['context']} prompt(s) refused as longer than "
                      f"the context (400, not counted as errors), e.g.[/] {refused['example']}")
        if (r.get("open_loop") or {}).get("kept_up") is False:
            out.print(f"[red]{name}: the open loop fell behind the trace; latencies are a "
                      "backlog[/]")


def print_jobs(entries: list[dict]) -> None:
    """One row per recipe job, identified by a short id (its fingerprint) beside the config
    key, exp-name and hardware (exp-names repeat across keys and runners); TTFT, ITL,
    throughput and hit rates per arm. A multi-node row also shows its prefill/decode ranks
    and, when disaggregated, the predicted prefill -> decode KV transfer (NIC queue and
    bytes) per arm; the NIC bandwidth each one ran at, and its source, follow the table."""
    table = Table(title="simulated recipe rows (per rank: GPU / host KV tokens)")
    cols = ("id", "config key", "exp-name", "hw", "conc", "gpu / host tok", "arm", "hit total",
            "hit host", "ttft p50 ms", "itl p50 ms", "out tok/s", "p+d ranks",
            "kv xfer p50 / p99 ms")
    for col in cols:
        left = col in ("id", "config key", "exp-name", "hw", "arm")
        table.add_column(col, justify="left" if left else "right")
    for e in entries:
        ident = (e.get("id", "-"), e.get("config-key", "-"), e["exp-name"], e.get("hw", "-"),
                 str(e["conc"]))
        arms = e.get("arms")
        if not arms:
            why = e.get("skipped") or "; ".join(e.get("errors") or []) or "not planned"
            table.add_row(*ident, "-", "[red]not simulated[/]", why, *[""] * 7)
            continue
        ranks = (f"{e['ranks']} + {e['decode-ranks']}" if e.get("decode-ranks")
                 else f"{e['ranks']} agg") if e.get("multinode") else ""
        for i, (name, r) in enumerate(arms.items()):
            xfer = r.get("kv_transfer_ms")
            table.add_row(
                *(ident if i == 0 else ("", "", "", "", "")),
                f"{e['gpu-kv-tokens']:,} / {e['host-kv-tokens']:,}" if i == 0 else "", name,
                f"{r['hit_rate']['total']:.1%}", f"{r['hit_rate']['host']:.1%}",
                _ms(r["ttft_ms"]["p50"]), _ms(r["itl_ms"]["p50"]),
                f"{r['throughput']['output_tok_s']:,.0f}", ranks if i == 0 else "",
                f"{_ms(xfer['p50'])} / {_ms(xfer['p99'])}" if xfer else "")
    _console().print(table)
    nics = {(e["kv-transfer"]["hardware"], e["kv-transfer"]["bytes-per-s"],
             e["kv-transfer"]["line-bytes-per-s"], e["kv-transfer"]["link-fraction"],
             e["kv-transfer"]["source"]) for e in entries if e.get("kv-transfer")}
    for hw, bw, line, frac, source in sorted(nics):
        _console().print(f"kv xfer on {hw}: {bw / 1e9:,.1f} GB/s per GPU per direction "
                         f"({line / 1e9:,.1f} GB/s line rate x {frac:g}); source: {source}",
                         markup=False, highlight=False)
    refused = {name: (r.get("rejected") or {}).get("context", 0)
               for e in entries for name, r in (e.get("arms") or {}).items()}
    total = sum(refused.values())
    if total:
        _console().print(f"[yellow]{total} prompt(s) refused as longer than the context (400, "
                         "not counted as errors; per arm in --format json: rejected.context)[/]")
