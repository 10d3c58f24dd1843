"""Writing a measured profile: hand-made points in, a loadable HardwareProfile out."""

from __future__ import annotations

import pytest

from kvbench.calibrate.bandwidth import CopyPoint, PinPoint
from kvbench.calibrate.layer import LayerPoint
from kvbench.calibrate.layout import KvPageShape
from kvbench.calibrate.matmul import MatmulPoint
from kvbench.calibrate.pages import PagePoint
from kvbench.calibrate.profile import build_profile, write_profile
from kvbench.calibrate.runner import Calibration, CalibrationConfig
from kvbench.calibrate.timer import Timing
from kvbench.errors import CalibrateError
from kvbench.hardware import hardware_names, load_hardware
from kvbench.units import GiB, MiB


def _t(seconds: float) -> Timing:
    return Timing(median_s=seconds, min_s=seconds, max_s=seconds, repeats=10)


@pytest.fixture
def calibration(qwen3_8b) -> Calibration:
    page = KvPageShape(36, 8, 128, 64)
    return Calibration(
        config=CalibrationConfig(shape=qwen3_8b),
        device_name="NVIDIA H200",
        hbm_total_bytes=150_000_000_000,
        torch_version="2.11.0",
        host="box",
        host_link="pcie-gen5-x16",
        hbm_copies=[CopyPoint("device_copy", 2 * GiB, 4 * GiB, _t(0.001))],
        matmuls=[
            MatmulPoint("bf16", 8192, 8192, 8192, _t(0.0011)),
            MatmulPoint("bf16", 16384, 8192, 16384, _t(0.0040)),
            MatmulPoint("fp8", 8192, 8192, 8192, _t(0.0006)),
        ],
        link_copies=[
            CopyPoint("h2d_pinned", 1 * MiB, 1 * MiB, _t(1 * MiB / 44e9)),
            CopyPoint("h2d_pinned", 1 * GiB, 1 * GiB, _t(1 * GiB / 55e9)),
            CopyPoint("d2h_pinned", 1 * GiB, 1 * GiB, _t(1 * GiB / 54e9)),
            CopyPoint("h2d_pageable", 1 * GiB, 1 * GiB, _t(1 * GiB / 20e9)),
        ],
        pins=[PinPoint("cudaHostRegister", 4 * GiB, 1.6),
              PinPoint("torch_pin_memory", 4 * GiB, 2.0)],
        pages=[PagePoint("page_first", "h2d", page, 14, _t(0.003))],
        layers=[LayerPoint("decode", 16, 2048, 1, _t(0.0002), 1e9, 5e8, True)],
    )


def test_profile_carries_the_measured_rates(calibration):
    p = build_profile(calibration, name="h200-measured", command="kvbench calibrate -o x.yaml")
    assert p.kind == "measured"
    assert p.hbm_bandwidth_bytes_per_s.value == pytest.approx(4 * GiB / 0.001)
    assert p.flops_per_s["bf16"].value == pytest.approx(2 * 16384 * 8192 * 16384 / 0.004)
    assert p.flops_per_s["fp8"].value == pytest.approx(2 * 8192**3 / 0.0006)
    assert p.host_to_device_bytes_per_s.value == pytest.approx(55e9)  # best size, pinned only
    assert p.device_to_host_bytes_per_s.value == pytest.approx(54e9)
    assert p.pin_seconds_per_gib.value == pytest.approx(0.4)
    assert p.host_link == "pcie-gen5-x16"
    assert (p.achievable_flops_fraction, p.achievable_hbm_fraction,
            p.achievable_link_fraction) == (1.0, 1.0, 1.0)
    assert p.flops("bf16") == p.flops_per_s["bf16"].value
    assert "kvbench calibrate -o x.yaml" in p.hbm_bandwidth_bytes_per_s.source
    [copy] = p.kv_page_copies
    assert (copy.copies_per_page, copy.page_bytes) == (2, 9_437_184)
    assert copy.bytes_per_s == pytest.approx(14 * 9_437_184 / 0.003)
    [timings] = p.layer_timings
    assert timings.shape["num_kv_heads"] == 8
    assert timings.points[0].seconds == 0.0002


def test_profile_round_trips_through_yaml(calibration, tmp_path):
    base = load_hardware("h200")
    p = build_profile(calibration, name="h200-measured", command="c", base=base,
                      host_dram_bytes=128 * GiB)
    path = write_profile(p, tmp_path / "h200-measured.yaml")
    loaded = load_hardware(path)
    assert loaded == p
    assert loaded.gpus_per_node == base.gpus_per_node
    assert loaded.host_dram_bytes_per_node.value == 128 * GiB


def test_datasheet_profiles_stay_valid():
    for name in hardware_names():
        profile = load_hardware(name)
        if profile.kind == "datasheet":
            assert profile.kv_page_copies == [] and profile.layer_timings == []


def test_missing_bf16_is_a_clear_error(calibration):
    calibration.matmuls = [m for m in calibration.matmuls if m.dtype != "bf16"]
    with pytest.raises(CalibrateError, match="no bf16 matmul"):
        build_profile(calibration, name="x", command="c")


def test_layer_efficiency_is_roofline_over_measured(calibration):
    p = build_profile(calibration, name="x", command="c")
    # the one decode point: 1e9 FLOPs, 5e8 bytes in 0.2 ms; bytes dominate at 4 GiB / 1 ms
    roofline_s = max(1e9 / p.flops("bf16"), 5e8 / p.hbm_bandwidth)
    assert p.layer_efficiency("decode") == pytest.approx(roofline_s / 0.0002)
    assert p.layer_efficiency("prefill") is None
    assert load_hardware("h200").layer_efficiency("decode") is None
