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
# rows InferenceX runs through an srt-slurm recipe (srtctl): the Dynamo frameworks, and the
# multi-node rows of single-engine frameworks (engines/dynamo.py)
ENGINES.add("dynamo", "kvbench.engines.dynamo:DynamoAdapter")

# InferenceX's `framework` values that name one of our engines under another spelling.
ALIASES = {"trt": "trtllm", "trt-llm": "trtllm", "tensorrt-llm": "trtllm",
           "dynamo-vllm": "dynamo", "dynamo-sglang": "dynamo", "dynamo-trt": "dynamo"}
# frameworks whose multi-node rows are srt-slurm recipes (nvidia-master.yaml's multinode vllm)
MULTINODE = {"vllm": "dynamo"}


def get_adapter(framework: str, multinode: bool = False) -> EngineAdapter:
    """The adapter for a recipe framework or engine name (of a multi-node row when
    `multinode`); unknown names list the known."""
    name = ALIASES.get(framework, framework)
    if multinode:
        name = MULTINODE.get(name, name)
    if name not in ENGINES:
        known = ", ".join(ENGINES.names() + sorted(ALIASES))
        raise EngineError(f"no engine adapter for framework {framework!r}; known: {known}",
                          hint="multi-node and dynamo-* frameworks run through their cluster "
                          "recipes; use --engine sim to run any row on the embedded engine")
    return ENGINES.get(name)()


def engine_names() -> list[str]:
    return ENGINES.names()
