"""Engine adapters by name. Recipe framework names map onto adapters (`trt` -> trtllm)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.errors import EngineError
from kvbench.registry import Registry

if TYPE_CHECKING:
    from kvbench.engines.base import EngineAdapter

ENGINES: Registry[type[EngineAdapter]] = Registry("engine")
ENGINES.add("sglang", "kvbench.engines.sglang:SGLangAdapter")
ENGINES.add("vllm", "kvbench.engines.vllm:VLLMAdapter")
ENGINES.add("trtllm", "kvbench.engines.trtllm:TRTLLMAdapter")
ENGINES.add("sim", "kvbench.engines.sim:SimAdapter")
ENGINES.add("atom", "kvbench.engines.atom:ATOMAdapter")
ENGINES.add("sglang-disagg", "kvbench.engines.disaggregation:SGLangDisaggAdapter")

# InferenceX's `framework` values that name one of our engines under another spelling.
ALIASES = {"trt": "trtllm", "trt-llm": "trtllm", "tensorrt-llm": "trtllm"}


def get_adapter(framework: str) -> EngineAdapter:
    """The adapter for a recipe framework or engine name; unknown names list the known."""
    name = ALIASES.get(framework, framework)
    if name not in ENGINES:
        known = ", ".join(ENGINES.names() + sorted(ALIASES))
        raise EngineError(f"no engine adapter for framework {framework!r}; known: {known}",
                          hint="multi-node and dynamo-* frameworks run through their cluster "
                          "recipes; use --engine sim to run any row on the embedded engine")
    return ENGINES.get(name)()


def engine_names() -> list[str]:
    return ENGINES.names()
