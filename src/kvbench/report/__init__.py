"""The offline HTML dashboard built from result.json files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_dashboard(paths: Sequence[Path], out: Path) -> Path:
    """Load results under `paths` and write one self-contained HTML file to `out`."""
    from kvbench.files import write_atomic
    from kvbench.report.page import render
    from kvbench.results import load_results

    return write_atomic(Path(out), render(load_results(paths)))


__all__ = ["write_dashboard"]
