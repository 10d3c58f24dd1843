"""The sizer instances the registry hands out."""

from __future__ import annotations

from kvbench.plan.sizers.hicache import HiCacheSizer
from kvbench.plan.sizers.lmcache import LmCacheSizer
from kvbench.plan.sizers.mooncake import MooncakeSizer
from kvbench.plan.sizers.trtllm import TrtllmHostCacheSizer
from kvbench.plan.sizers.vllm import VllmOffloadSizer

HICACHE = HiCacheSizer()
VLLM_NATIVE = VllmOffloadSizer("vllm-native", simple=False)
VLLM_SIMPLE = VllmOffloadSizer("vllm-simple", simple=True)
LMCACHE = LmCacheSizer()
MOONCAKE = MooncakeSizer()
TRTLLM_NATIVE = TrtllmHostCacheSizer()
