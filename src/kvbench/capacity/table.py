"""The capacity curve as a terminal table."""

from __future__ import annotations

from kvbench.capacity.curve import CapacityDoc


def print_capacity(doc: CapacityDoc) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    measured = {p.host_gb: p for p in doc.measured}
    table = Table(title=f"{doc.target['label']}: sessions under the SLO ({doc.slo.describe()}; "
                  f"{doc.workload['sessions']} sessions in the workload)")
    for col in ("host GB/rank", "host KV tokens", "GPU KV tokens", "sessions (sim)",
                "first failing", "probes", "measured"):
        table.add_column(col, justify="right")
    for p in doc.predicted:
        m = measured.get(p.host_gb)
        table.add_row(f"{p.host_gb:g}", f"{p.host_kv_tokens:,}", f"{p.gpu_kv_tokens:,}",
                      f">= {p.max_sessions}" if p.max_sessions >= doc.ceiling else
                      str(p.max_sessions),
                      "-" if p.first_failing is None else
                      str(p.first_failing), str(len(p.steps)),
                      "-" if m is None else str(m.max_sessions))
    console.print(table)
    if any(p.max_sessions >= doc.ceiling for p in doc.predicted):
        console.print(f">= {doc.ceiling}: the SLO held at the most sessions the workload offers "
                      "(a censored answer; a larger workload would find the limit)",
                      highlight=False)
    refused = max((s.metrics.get("rejected_context") or 0 for p in doc.predicted
                   for s in p.steps), default=0)
    if refused:
        console.print(f"up to {refused} prompt(s) per probe refused as longer than the "
                      "context (400, rejected: context): excluded from the SLO's failed ratio",
                      style="yellow", highlight=False)
    if doc.knee is not None:
        console.print(f"[bold]{doc.knee.text}[/]", highlight=False)
        if doc.knee.engine_args:
            console.print("flags at that size: " + " ".join(doc.knee.engine_args),
                          highlight=False, markup=False)
    for m in doc.measured:
        steps = ", ".join(f"{s.concurrency}{'' if s.passed else ' x'}" for s in m.steps)
        console.print(f"measured at host {m.host_gb:g} GB: {m.max_sessions} sessions "
                      f"(steps: {steps}; x = SLO broken)", highlight=False)
        for s in m.steps:
            if s.violations:
                console.print(f"  conc {s.concurrency}: {'; '.join(s.violations)}",
                              highlight=False, markup=False)
    console.print(f"{doc.wall_s:.1f} s", style="dim")
