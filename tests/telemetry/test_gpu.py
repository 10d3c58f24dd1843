"""GpuSampler: absent GPUs are reported as absent; a real GPU yields power and energy."""

from __future__ import annotations

import time

import pytest

from kvbench.errors import MetricsError
from kvbench.files import read_jsonl
from kvbench.telemetry import GpuSampler


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def test_missing_device_is_reported_absent_not_raised(tmp_path):
    sampler = GpuSampler(0.05, out_path=tmp_path / "telemetry.jsonl", devices=[4096])
    sampler.start()
    out = sampler.stop()
    assert out["present"] is False
    assert out["reason"]  # says why: no NVML, no driver, or index out of range


def test_bad_interval_is_a_clear_error():
    with pytest.raises(MetricsError, match="interval_s"):
        GpuSampler(0)


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU")
def test_real_gpu_power_and_energy(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    with GpuSampler(0.1, out_path=path) as sampler:
        time.sleep(0.6)
    out = sampler.summary()
    assert out["present"] and out["num_gpus"] >= 1
    g = out["gpus"][0]
    assert g["samples"] >= 3 and g["power_w"]["mean"] > 10
    assert g["energy_j"] > 0 and g["mem_total_bytes"] > 0
    assert len(read_jsonl(path)) >= 3
