"""One sizer per offload backend, looked up by the recipe's `kv-offload-backend.name`."""

from __future__ import annotations

from kvbench.plan.sizers.base import Sizer, Sizing, SizingContext
from kvbench.registry import Registry

SIZERS: Registry[Sizer] = Registry("offload backend")
SIZERS.add("hicache", "kvbench.plan.sizers.registered:HICACHE")
SIZERS.add("vllm-native", "kvbench.plan.sizers.registered:VLLM_NATIVE")
SIZERS.add("vllm-simple", "kvbench.plan.sizers.registered:VLLM_SIMPLE")
SIZERS.add("lmcache", "kvbench.plan.sizers.registered:LMCACHE")
SIZERS.add("mooncake", "kvbench.plan.sizers.registered:MOONCAKE")
SIZERS.add("native", "kvbench.plan.sizers.registered:TRTLLM_NATIVE")

__all__ = ["SIZERS", "Sizer", "Sizing", "SizingContext"]
