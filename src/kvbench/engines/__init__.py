"""Engine adapters: from a planned job to an exact server command line, environment and
config files, every value traced to its source."""

from kvbench.engines.base import EngineAdapter
from kvbench.engines.registry import ENGINES, engine_names, get_adapter
from kvbench.engines.spec import ArgSource, LaunchSpec

__all__ = ["ENGINES", "ArgSource", "EngineAdapter", "LaunchSpec", "engine_names",
           "get_adapter"]
