"""kvbench: plan, run and explain agentic LLM-inference benchmarks with KV-cache offload."""

__version__ = "0.1.0"

# Bumped whenever a result or plan file changes shape; part of every job fingerprint.
SCHEMA_VERSION = 1
