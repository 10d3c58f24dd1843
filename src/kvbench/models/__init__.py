"""Model architecture profiles: the config.json fields that set KV memory, with sources."""

from kvbench.models.loader import load_model, model_names
from kvbench.models.pool import DTYPE_BYTES, KvPool
from kvbench.models.profile import ModelProfile

__all__ = ["DTYPE_BYTES", "KvPool", "ModelProfile", "load_model", "model_names"]
