# A stand-in for the CPU checks only (../qwen3.5/cpu_check.sh, ../qwen3.5-vllm/cpu_check.sh): the
# GPU image has torchvision for its torch, this machine's torch has no CPU build of it. It answers
# the imports of the engines' image processors; nothing calls it.
import sys
import types

__version__ = "0.26.0"


class _Any(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(f"{self.__name__}.{name}")

    def __call__(self, *a, **k):
        return None


for sub in ("io", "transforms", "transforms.v2", "transforms.functional", "ops", "models",
            "datasets", "utils", "transforms.v2.functional"):
    sys.modules[f"torchvision.{sub}"] = _Any(f"torchvision.{sub}")
io, transforms = sys.modules["torchvision.io"], sys.modules["torchvision.transforms"]
ops, models = sys.modules["torchvision.ops"], sys.modules["torchvision.models"]
