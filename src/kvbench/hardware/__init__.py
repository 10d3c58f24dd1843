"""Accelerator and host profiles (datasheet or measured)."""

from kvbench.hardware.profile import (
    HardwareProfile,
    KvPageCopy,
    LayerTiming,
    LayerTimings,
    Sourced,
    gpu_of_runner,
    hardware_names,
    load_hardware,
)

__all__ = [
    "HardwareProfile",
    "KvPageCopy",
    "LayerTiming",
    "LayerTimings",
    "Sourced",
    "gpu_of_runner",
    "hardware_names",
    "load_hardware",
]
