"""Host-memory plans for offload jobs: budget, one sizer per backend, footprint, refusal."""

from kvbench.plan.plan import HostPool, Plan
from kvbench.plan.planner import plan_job

__all__ = ["HostPool", "Plan", "plan_job"]
