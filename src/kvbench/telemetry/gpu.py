"""GPU telemetry over the measured window through NVML: power, utilisation, memory, clocks
and energy. A machine without an NVIDIA GPU or driver is reported as absent, never raised."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.errors import MetricsError
from kvbench.files import JsonlWriter
from kvbench.units import NS_PER_S


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any
    name: str
    uuid: str
    mem_total_bytes: int
    energy_start_mj: int | None = None
    energy_end_mj: int | None = None
    samples: list[tuple[int, float, float, float, int, float, float]] = field(
        default_factory=list)  # t_ns, power_w, util_pct, mem_util_pct, mem_used, sm, mem clk


def _stats(values: list[float]) -> dict[str, float] | None:
    return {"mean": sum(values) / len(values), "max": max(values)} if values else None


class GpuSampler:
    """`start()` begins sampling every `interval_s` on a background thread; `stop()` ends it
    and returns `summary()`. With `out_path`, each sample is also appended to a JSONL file."""

    def __init__(self, interval_s: float = 1.0, out_path: Path | None = None,
                 devices: list[int] | None = None) -> None:
        if interval_s <= 0:
            raise MetricsError(f"telemetry interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.out_path = out_path
        self.devices = devices
        self._gpus: list[_Gpu] = []
        self._absent_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer: JsonlWriter | None = None
        self._t_start_ns = 0
        self._t_end_ns = 0
        self._nvml = None

    def _open(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            count = pynvml.nvmlDeviceGetCount()
        except Exception as e:  # no library, no driver, no device: all mean "absent"
            self._absent_reason = f"NVML unavailable: {type(e).__name__}: {e}"
            return
        indices = self.devices if self.devices is not None else list(range(count))
        for i in indices:
            if not 0 <= i < count:
                self._absent_reason = f"GPU index {i} out of range (found {count})"
                continue
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            self._gpus.append(_Gpu(
                index=i, handle=h,
                name=name.decode() if isinstance(name, bytes) else name,
                uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                mem_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total)))
        if not self._gpus and self._absent_reason is None:
            self._absent_reason = "NVML found no GPU"

    def _energy_mj(self, gpu: _Gpu) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
        except Exception:  # older GPUs lack the energy counter; power is integrated instead
            return None

    def _sample(self) -> None:
        nv = self._nvml
        t_ns = time.time_ns()
        for g in self._gpus:
            try:
                power_w = nv.nvmlDeviceGetPowerUsage(g.handle) / 1000.0
                util = nv.nvmlDeviceGetUtilizationRates(g.handle)
                mem = nv.nvmlDeviceGetMemoryInfo(g.handle)
                sm = nv.nvmlDeviceGetClockInfo(g.handle, nv.NVML_CLOCK_SM)
                mclk = nv.nvmlDeviceGetClockInfo(g.handle, nv.NVML_CLOCK_MEM)
            except Exception:
                continue  # a transient NVML error drops one sample, not the run
            row = (t_ns, power_w, float(util.gpu), float(util.memory), int(mem.used),
                   float(sm), float(mclk))
            g.samples.append(row)
            if self._writer is not None:
                self._writer.write({"t_ns": t_ns, "gpu": g.index, "power_w": power_w,
                                    "util_pct": row[2], "mem_util_pct": row[3],
                                    "mem_used_bytes": row[4], "sm_clock_mhz": row[5],
                                    "mem_clock_mhz": row[6]})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self._open()
        self._t_start_ns = time.time_ns()
        if not self._gpus:
            return
        if self.out_path is not None:
            self._writer = JsonlWriter(self.out_path)
        for g in self._gpus:
            g.energy_start_mj = self._energy_mj(g)
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._t_end_ns = time.time_ns()
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5 * self.interval_s + 5)
            self._thread = None
            self._sample()
            for g in self._gpus:
                g.energy_end_mj = self._energy_mj(g)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
        return self.summary()

    def summary(self) -> dict[str, Any]:
        window_s = max(0, self._t_end_ns - self._t_start_ns) / NS_PER_S
        if not self._gpus:
            return {"present": False, "reason": self._absent_reason, "window_s": window_s}
        gpus = [_gpu_summary(g) for g in self._gpus]
        energies = [g["energy_j"] for g in gpus]
        return {
            "present": True,
            "window_s": window_s,
            "num_gpus": len(gpus),
            "energy_j": sum(energies) if all(e is not None for e in energies) else None,
            "power_w_mean_total": sum((g["power_w"] or {}).get("mean", 0.0) for g in gpus),
            "gpus": gpus,
        }

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _gpu_summary(g: _Gpu) -> dict[str, Any]:
    s = g.samples
    energy_j = None
    source = None
    if g.energy_start_mj is not None and g.energy_end_mj is not None:
        energy_j = (g.energy_end_mj - g.energy_start_mj) / 1000.0
        source = "nvml_energy_counter"
    elif len(s) >= 2:
        energy_j = sum((b[0] - a[0]) / NS_PER_S * (a[1] + b[1]) / 2
                       for a, b in itertools.pairwise(s))
        source = "integrated_power"
    return {
        "index": g.index, "name": g.name, "uuid": g.uuid, "samples": len(s),
        "power_w": _stats([r[1] for r in s]),
        "util_pct": _stats([r[2] for r in s]),
        "mem_util_pct": _stats([r[3] for r in s]),
        "mem_used_bytes_max": max((r[4] for r in s), default=None),
        "mem_total_bytes": g.mem_total_bytes,
        "sm_clock_mhz": _stats([r[5] for r in s]),
        "mem_clock_mhz": _stats([r[6] for r in s]),
        "energy_j": energy_j, "energy_source": source,
    }
