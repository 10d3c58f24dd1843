"""Accelerator and host profiles (datasheet or measured)."""

from kvbench.hardware.profile import (
    HardwareProfile,
    Sourced,
    gpu_of_runner,
    hardware_names,
    load_hardware,
)

__all__ = ["HardwareProfile", "Sourced", "gpu_of_runner", "hardware_names", "load_hardware"]
