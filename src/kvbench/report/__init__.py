"""The offline HTML dashboard built from result.json files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_dashboard(paths: Sequence[Path], out: Path) -> Path:
    """Load results under `paths` and write one self-contained HTML file to `out`."""
    from kvbench.files import write_atomic
    from kvbench.report.capacity import CAPACITY_FILE, capacity_panel, find_capacity_docs
    from kvbench.report.page import render
    from kvbench.results import load_results

    # capacity.json beside the results (kvbench capacity --url --output DIR) adds its panel;
    # a capacity.json named on its own adds only the panel, not its measured steps' results
    # (another workload than the runs beside it: they would pool as repeats of one arm)
    docs = find_capacity_docs(paths)
    extra = [capacity_panel(docs)] if docs else []
    results = [p for p in map(Path, paths) if not (p.is_file() and p.name == CAPACITY_FILE)]
    return write_atomic(Path(out), render(load_results(results) if results else [], extra))


__all__ = ["write_dashboard"]
