"""Workloads: trace loaders (kv-cache-tester/weka sessions, Mooncake rows), a synthetic agentic
generator, and prompt synthesis from hash ids. Output: `Session`s of `Turn`s."""

from __future__ import annotations

from kvbench.workload.bounds import SessionPool, WorkloadBounds
from kvbench.workload.loader import load_trace, trace_files
from kvbench.workload.prompt import Prompt, PromptBuilder, Vocabulary
from kvbench.workload.session import Session, Turn
from kvbench.workload.synthetic import SyntheticSpec, generate_sessions

__all__ = [
    "Prompt",
    "PromptBuilder",
    "Session",
    "SessionPool",
    "SyntheticSpec",
    "Turn",
    "Vocabulary",
    "WorkloadBounds",
    "generate_sessions",
    "load_trace",
    "trace_files",
]
