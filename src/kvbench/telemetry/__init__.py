"""GPU telemetry sampled over a run's window (NVML)."""

from kvbench.telemetry.gpu import GpuSampler

__all__ = ["GpuSampler"]
