"""Recipes -> job rows: the reference generator's expansion, DRAM budgets, filters, evals."""

from __future__ import annotations

from kvbench.matrix.budget import MAX_AVAILABLE_CPU_DRAM_MIB, dram_budget_gb
from kvbench.matrix.generate import generate_rows, keyed_rows, runner_config_path
from kvbench.matrix.job import Job, select_jobs
from kvbench.matrix.selection import Selection

__all__ = [
    "MAX_AVAILABLE_CPU_DRAM_MIB",
    "Job",
    "Selection",
    "dram_budget_gb",
    "generate_rows",
    "keyed_rows",
    "runner_config_path",
    "select_jobs",
]
