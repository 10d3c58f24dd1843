"""Turns a Calibration into a HardwareProfile (kind: measured) and writes it as YAML, in the
same format as the datasheet profiles so planner and simulator read either."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvbench.calibrate.runner import Calibration
from kvbench.errors import CalibrateError
from kvbench.files import write_output
from kvbench.hardware import (
    HardwareProfile,
    KvPageCopy,
    LayerTiming,
    LayerTimings,
    Sourced,
)
from kvbench.units import GiB, MiB


def build_profile(
    cal: Calibration,
    *,
    name: str,
    command: str,
    base: HardwareProfile | None = None,
    host_link: str | None = None,
    host_dram_bytes: int | None = None,
) -> HardwareProfile:
    """The measured profile. `base` (a datasheet profile) supplies only what a single machine
    cannot measure (GPUs per node, link name when NVML cannot tell) and says so in notes."""
    src = f"measured: {command}"
    hbm = _best(cal.hbm_copies, "HBM copy")
    h2d = _best([c for c in cal.link_copies if c.what == "h2d_pinned"], "pinned H2D")
    d2h = _best([c for c in cal.link_copies if c.what == "d2h_pinned"], "pinned D2H")
    flops: dict[str, Sourced] = {}
    for dtype in dict.fromkeys(m.dtype for m in cal.matmuls):
        best = max((m for m in cal.matmuls if m.dtype == dtype), key=lambda m: m.flops_per_s)
        flops[dtype] = Sourced(
            value=best.flops_per_s,
            source=f"{src} ({dtype} {best.m}x{best.n}x{best.k} torch matmul, random operands,"
            f" median of {best.timing.repeats})",
        )
    if "bf16" not in flops:
        raise CalibrateError("calibration has no bf16 matmul point; cannot write a profile")
    register = next((p for p in cal.pins if p.method == "cudaHostRegister"), None)
    dram = host_dram_bytes if host_dram_bytes is not None else _host_dram_bytes()
    notes = [
        f"device: {cal.device_name} ({cal.hbm_total_bytes / GiB:.1f} GiB), torch "
        f"{cal.torch_version}, host {cal.host}",
        f"hbm_bandwidth: device-to-device copy of {hbm.size_bytes / GiB:.0f} GiB, bytes read + "
        f"written over the median of {hbm.timing.repeats} CUDA-event-timed copies",
        f"host links: pinned copy_(non_blocking=True), best of "
        f"{', '.join(_mib(s) for s in sorted({c.size_bytes for c in cal.link_copies}))}; "
        + "; ".join(f"{c.what} {_mib(c.size_bytes)} {c.bytes_per_s / 1e9:.1f} GB/s"
                    for c in cal.link_copies),
        "achievable fractions are 1.0: every figure here is already an achieved rate",
        *cal.skipped,
    ]
    if base is not None:
        notes.append(f"gpus_per_node (and host_link if NVML gave none) from datasheet {base.name}")
    if register is not None:
        torch_pin = next((p for p in cal.pins if p.method == "torch_pin_memory"), None)
        notes.append(
            f"pinning: cudaHostRegister of {register.size_bytes / GiB:.0f} GiB fresh pageable "
            f"memory {register.seconds:.2f} s"
            + (f"; torch.empty(pin_memory=True) {torch_pin.seconds:.2f} s" if torch_pin else "")
        )
    return HardwareProfile(
        name=name,
        vendor=_vendor(cal.device_name),
        kind="measured",
        device_name=cal.device_name,
        hbm_bytes=Sourced(value=float(cal.hbm_total_bytes),
                          source=f"{src} (cudaDeviceProp.totalGlobalMem)"),
        hbm_bandwidth_bytes_per_s=Sourced(value=hbm.bytes_per_s, source=src),
        flops_per_s=flops,
        host_to_device_bytes_per_s=Sourced(value=h2d.bytes_per_s,
                                           source=f"{src} (pinned, {_mib(h2d.size_bytes)})"),
        device_to_host_bytes_per_s=Sourced(value=d2h.bytes_per_s,
                                           source=f"{src} (pinned, {_mib(d2h.size_bytes)})"),
        host_link=host_link or cal.host_link or (base.host_link if base else "unknown"),
        gpus_per_node=base.gpus_per_node if base else 1,
        host_dram_bytes_per_node=Sourced(value=float(dram),
                                         source=f"{src} (this host's physical memory)"),
        achievable_flops_fraction=1.0,
        achievable_hbm_fraction=1.0,
        achievable_link_fraction=1.0,
        notes=notes,
        pin_seconds_per_gib=(
            Sourced(value=register.seconds_per_gib, source=f"{src} (cudaHostRegister)")
            if register else None
        ),
        kv_page_copies=[_page_copy(p) for p in cal.pages],
        layer_timings=[_layer_timings(cal)] if cal.layers else [],
    )


def _page_copy(p: Any) -> KvPageCopy:
    return KvPageCopy(
        layout=p.layout,
        direction=p.direction,
        page_size_tokens=p.shape.page_size_tokens,
        page_bytes=p.shape.page_bytes,
        num_pages=p.num_pages,
        copies_per_page=p.copies_per_page,
        seconds=p.timing.median_s,
        bytes_per_s=p.bytes_per_s,
    )


def _layer_timings(cal: Calibration) -> LayerTimings:
    shape = cal.config.shape
    assert shape is not None  # layers are only measured with a shape
    return LayerTimings(
        model=shape.name,
        shape=shape.as_dict(),
        dtype=cal.config.layer_dtype,
        method="one random-weight layer in torch (RMSNorm, fused QKV, RoPE, SDPA with GQA, "
        "SwiGLU); prefill causal over the new tokens, decode one token over a full KV cache, "
        "replayed as a CUDA graph; median of 5 CUDA-event timings",
        points=[
            LayerTiming(
                phase=p.phase,
                batch_size=p.batch,
                context_tokens=p.context_tokens,
                new_tokens=p.new_tokens,
                seconds=p.timing.median_s,
                flops=p.flops,
                hbm_bytes=p.hbm_bytes,
            )
            for p in cal.layers
        ],
    )


def _best(points: list[Any], what: str) -> Any:
    if not points:
        raise CalibrateError(f"calibration has no {what} measurement; cannot write a profile")
    return max(points, key=lambda p: p.bytes_per_s)


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / GiB:g} GiB" if n_bytes >= GiB else f"{n_bytes / MiB:g} MiB"


def _vendor(device_name: str) -> str:
    lowered = device_name.lower()
    if "nvidia" in lowered or lowered.startswith(("h1", "h2", "b2", "a1")):
        return "nvidia"
    if "amd" in lowered or "instinct" in lowered or "mi3" in lowered:
        return "amd"
    return "unknown"


def _host_dram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def profile_yaml(profile: HardwareProfile) -> str:
    import yaml

    return yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, width=100)


def write_profile(profile: HardwareProfile, path: str | Path) -> Path:
    """Write atomically; the file loads back with `kvbench.hardware.load_hardware(path)`."""
    write_output(path, profile_yaml(profile))
    return Path(path)
