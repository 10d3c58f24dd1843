"""Sweeps: per-job orchestration (plan, launch, replay with scraping, result), resume by
fingerprint, and the executors (local, Slurm job arrays, a CI matrix)."""

from __future__ import annotations

from kvbench.sweep.events import PHASES, JobOutcome
from kvbench.sweep.job import run_job
from kvbench.sweep.local import failures_error, run_local
from kvbench.sweep.options import PhaseTimeouts, RunOptions, bundled_traces
from kvbench.sweep.slurm import SlurmExecutor
from kvbench.sweep.spec import JobSpec, build_specs, job_fingerprint

__all__ = ["PHASES", "JobOutcome", "JobSpec", "PhaseTimeouts", "RunOptions", "SlurmExecutor",
           "build_specs", "bundled_traces", "failures_error", "job_fingerprint", "run_job",
           "run_local"]
