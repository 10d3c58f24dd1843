"""Runs every calibration microbenchmark in turn and collects the raw points."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvbench.calibrate.bandwidth import (
    LINK_SIZES_BYTES,
    CopyPoint,
    PinPoint,
    time_bidirectional,
    time_device_copy,
    time_link_copy,
    time_pinning,
)
from kvbench.calibrate.layer import LayerPoint, build_layer, time_layer
from kvbench.calibrate.layout import LAYOUTS, KvPageShape, pages_for_bytes
from kvbench.calibrate.matmul import DEFAULT_SHAPES, MatmulPoint, fp8_supported, time_matmul
from kvbench.calibrate.pages import PagePoint, time_page_transfer
from kvbench.calibrate.shape import LayerShape
from kvbench.errors import CalibrateError
from kvbench.units import GiB, MiB

DEFAULT_PREFILL: tuple[tuple[int, int], ...] = ((1, 1024), (1, 4096), (1, 16384), (8, 2048))
DEFAULT_DECODE: tuple[tuple[int, int], ...] = (
    (1, 2048), (16, 2048), (64, 2048), (1, 32768), (16, 32768), (64, 8192),
)


@dataclass(frozen=True, slots=True)
class CalibrationConfig:
    """What to measure. Sizes are chosen so the whole run takes about a minute on an H200."""

    shape: LayerShape | None
    device: str = "cuda:0"
    page_sizes_tokens: tuple[int, ...] = (64,)
    page_transfer_bytes: int = 128 * MiB
    hbm_copy_bytes: int = 2 * GiB
    link_sizes_bytes: tuple[int, ...] = LINK_SIZES_BYTES
    pin_bytes: int = 4 * GiB
    matmul_shapes: tuple[tuple[int, int, int], ...] = DEFAULT_SHAPES
    prefill_points: tuple[tuple[int, int], ...] = DEFAULT_PREFILL
    decode_points: tuple[tuple[int, int], ...] = DEFAULT_DECODE
    layer_dtype: str = "bf16"


@dataclass(slots=True)
class Calibration:
    """Everything one run measured, before it becomes a HardwareProfile."""

    config: CalibrationConfig
    device_name: str = ""
    hbm_total_bytes: int = 0
    torch_version: str = ""
    host: str = ""
    host_link: str | None = None
    hbm_copies: list[CopyPoint] = field(default_factory=list)
    matmuls: list[MatmulPoint] = field(default_factory=list)
    link_copies: list[CopyPoint] = field(default_factory=list)
    pins: list[PinPoint] = field(default_factory=list)
    pages: list[PagePoint] = field(default_factory=list)
    layers: list[LayerPoint] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


Progress = Callable[[str], None]


def run_calibration(config: CalibrationConfig, progress: Progress | None = None) -> Calibration:
    """Run all microbenchmarks on `config.device` (a CUDA device)."""
    import torch

    say = progress or (lambda _msg: None)
    if not torch.cuda.is_available():
        raise CalibrateError(
            "kvbench calibrate needs a CUDA GPU and torch sees none",
            hint="run it on the GPU machine whose profile you want",
        )
    dev = torch.device(config.device)
    props = torch.cuda.get_device_properties(dev)
    cal = Calibration(
        config=config,
        device_name=props.name,
        hbm_total_bytes=int(props.total_memory),
        torch_version=torch.__version__,
        host=platform.node(),
        host_link=nvml_host_link(dev.index or 0),
    )
    say(f"device {props.name}, {props.total_memory / GiB:.1f} GiB, torch {torch.__version__}")
    steps: list[tuple[str, Callable[[], None]]] = [
        ("HBM copy", lambda: measure_memory(cal, dev, say)),
        ("matmul", lambda: measure_matmul(cal, dev, say)),
        ("host link", lambda: measure_link(cal, dev, say)),
    ]
    if config.shape is not None:
        shape = config.shape
        steps.append(("KV pages", lambda: measure_pages(cal, shape, dev, say)))
        steps.append(("layer timings", lambda: measure_layers(cal, shape, dev, say)))
    else:
        cal.skipped.append("KV pages and layer timings: no model shape given")
    for what, step in steps:
        # One broken benchmark must not cost the others: GPU time is scarce, so record the
        # failure in the profile's notes and go on (build_profile refuses missing essentials).
        try:
            step()
        except Exception as e:
            cal.skipped.append(f"{what} failed: {type(e).__name__}: {str(e)[:300]}")
            say(f"{what} failed: {e}")
            _free(dev)
    return cal


def nvml_host_link(index: int) -> str | None:
    """'pcie-gen5-x16' from NVML's maximum link generation and width, or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gen = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
            width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML absent or unsupported in this VM: the link stays unknown
        return None
    return f"pcie-gen{gen}-x{width}"


def measure_memory(cal: Calibration, dev: Any, say: Progress) -> None:
    point = time_device_copy(cal.config.hbm_copy_bytes, device=dev)
    cal.hbm_copies.append(point)
    say(f"HBM copy {point.size_bytes / GiB:.0f} GiB: {point.bytes_per_s / 1e12:.2f} TB/s")


def measure_matmul(cal: Calibration, dev: Any, say: Progress) -> None:
    dtypes = ["bf16"] + (["fp8"] if fp8_supported(dev) else [])
    if "fp8" not in dtypes:
        cal.skipped.append("fp8 matmul: torch._scaled_mm needs compute capability >= 8.9")
    for dtype in dtypes:
        for m, n, k in cal.config.matmul_shapes:
            point = time_matmul(dtype, m, n, k, device=dev)
            cal.matmuls.append(point)
            say(f"{dtype} matmul {m}x{n}x{k}: {point.flops_per_s / 1e12:.0f} TFLOP/s")
    _free(dev)


def measure_link(cal: Calibration, dev: Any, say: Progress) -> None:
    for size in cal.config.link_sizes_bytes:
        for direction in ("h2d", "d2h"):
            point = time_link_copy(direction, size, device=dev)
            cal.link_copies.append(point)
            say(f"{point.what} {size / MiB:.0f} MiB: {point.bytes_per_s / 1e9:.1f} GB/s")
    big = max(cal.config.link_sizes_bytes)
    for direction in ("h2d", "d2h"):
        point = time_link_copy(direction, big, device=dev, pinned=False, repeats=3)
        cal.link_copies.append(point)
        say(f"{point.what} {big / MiB:.0f} MiB: {point.bytes_per_s / 1e9:.1f} GB/s")
    point = time_bidirectional(big, device=dev)
    cal.link_copies.append(point)
    say(f"bidirectional {big / MiB:.0f} MiB: {point.bytes_per_s / 1e9:.1f} GB/s each way")
    cal.pins.extend(time_pinning(cal.config.pin_bytes, device=dev))
    for pin in cal.pins:
        say(f"pin {pin.size_bytes / GiB:.0f} GiB by {pin.method}: {pin.seconds:.2f} s")
    _free(dev)


def measure_pages(cal: Calibration, shape: LayerShape, dev: Any, say: Progress) -> None:
    for page_size in cal.config.page_sizes_tokens:
        page = KvPageShape(shape.num_layers, shape.num_kv_heads, shape.head_dim, page_size)
        num_pages = pages_for_bytes(page, cal.config.page_transfer_bytes)
        for layout in LAYOUTS:
            for direction in ("h2d", "d2h"):
                point = time_page_transfer(layout, direction, page, num_pages, device=dev)
                cal.pages.append(point)
                say(f"{layout} {direction} page {page_size} tok x {num_pages}: "
                    f"{point.bytes_per_s / 1e9:.1f} GB/s")
        _free(dev)


def measure_layers(cal: Calibration, shape: LayerShape, dev: Any, say: Progress) -> None:
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[cal.config.layer_dtype]
    layer = build_layer(shape, device=dev, dtype=dtype)
    for phase, points in (("prefill", cal.config.prefill_points),
                          ("decode", cal.config.decode_points)):
        for batch, ctx in points:
            try:
                point = time_layer(layer, shape, phase, batch, ctx, device=dev, dtype=dtype)
            except torch.OutOfMemoryError:
                cal.skipped.append(f"{phase} batch {batch} ctx {ctx}: out of GPU memory")
                _free(dev)
                continue
            cal.layers.append(point)
            say(f"layer {phase} b={batch} ctx={ctx}: {point.timing.median_s * 1e3:.3f} ms"
                f"{' (graph)' if point.graphed else ''}")
            _free(dev)


def _free(dev: Any) -> None:
    import gc

    import torch

    gc.collect()
    if str(dev).startswith("cuda"):
        torch.cuda.empty_cache()
