"""`kvbench calibrate`: measure one GPU with torch and write a hardware profile.

In: a CUDA device and, optionally, a model shape. Out: a `HardwareProfile` (kind: measured)
YAML that `kvbench.hardware.load_hardware(path)` reads like a datasheet profile."""

from kvbench.calibrate.layout import KvPageShape, copies_per_page, copy_bytes, host_pool_shape
from kvbench.calibrate.profile import build_profile, profile_yaml, write_profile
from kvbench.calibrate.runner import Calibration, CalibrationConfig, run_calibration
from kvbench.calibrate.shape import LayerShape, shape_from_model
from kvbench.calibrate.timer import Timing, time_fn

__all__ = [
    "Calibration",
    "CalibrationConfig",
    "KvPageShape",
    "LayerShape",
    "Timing",
    "build_profile",
    "copies_per_page",
    "copy_bytes",
    "host_pool_shape",
    "profile_yaml",
    "run_calibration",
    "shape_from_model",
    "time_fn",
    "write_profile",
]
