"""Human tables of simulation results (rich)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table


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
    Console().print(table)
    first = next(iter(results.values()))
    Console().print(f"[dim]{first['setup']['cost_model']}, gpu tier "
                    f"{first['setup']['gpu_tokens'] or 'unlimited'} tokens[/]")


def print_jobs(entries: list[dict]) -> None:
    """One row per recipe job: hit rates and TTFT of the resident and offload arms."""
    table = Table(title="simulated recipe rows (per rank: GPU / host KV tokens)")
    for col in ("exp-name", "conc", "gpu / host tok", "hit res", "hit off (host)",
                "ttft p50 res ms", "ttft p50 off ms"):
        table.add_column(col, justify="left" if col == "exp-name" else "right")
    for e in entries:
        arms = e.get("arms")
        if not arms:
            why = e.get("skipped") or "not planned"
            table.add_row(e["exp-name"], str(e["conc"]), "-", f"[red]{why}[/]", "", "", "")
            continue
        res, off = arms["resident"], arms.get("offload")
        table.add_row(
            e["exp-name"], str(e["conc"]), f"{e['gpu-kv-tokens']:,} / {e['host-kv-tokens']:,}",
            f"{res['hit_rate']['total']:.1%}",
            f"{off['hit_rate']['total']:.1%} ({off['hit_rate']['host']:.1%})" if off else "-",
            _ms(res["ttft_ms"]["p50"]), _ms(off["ttft_ms"]["p50"]) if off else "-")
    Console().print(table)
