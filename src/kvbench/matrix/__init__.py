"""Recipes -> job rows: the reference generator's expansion, DRAM budgets, filters, evals.

Exports resolve lazily so that the CLI can import `kvbench.matrix.selection` at start-up
without pulling in pydantic and the recipe schema."""

from __future__ import annotations

from kvbench.registry import lazy_exports

_EXPORTS = {
    "MAX_AVAILABLE_CPU_DRAM_MIB": "kvbench.matrix.budget",
    "dram_budget_gb": "kvbench.matrix.budget",
    "generate_rows": "kvbench.matrix.generate",
    "keyed_rows": "kvbench.matrix.generate",
    "runner_config_path": "kvbench.matrix.generate",
    "Job": "kvbench.matrix.job",
    "select_jobs": "kvbench.matrix.job",
    "Selection": "kvbench.matrix.selection",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
