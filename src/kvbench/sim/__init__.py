"""The embedded engine: a tiered (GPU + host) radix KV cache with HiCache semantics, a
continuous-batching scheduler and a cost model, in virtual time; served over HTTP by
`kvbench serve-sim` and run offline by `kvbench simulate`."""

from kvbench.sim.cache import WRITE_POLICIES, Admission, TieredCache
from kvbench.sim.costs import CostModel
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.request import SimRequest
from kvbench.sim.simulate import SimSetup, run, summarize
from kvbench.sim.trace import Trace, TraceRequest, load_trace, load_traces

__all__ = [
    "WRITE_POLICIES", "Admission", "CostModel", "Engine", "EngineConfig", "SimRequest",
    "SimSetup", "TieredCache", "Trace", "TraceRequest", "load_trace", "load_traces", "run",
    "summarize",
]
