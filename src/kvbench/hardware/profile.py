"""Hardware profiles: what one GPU and its host link can do, with the source of every number.

Datasheet profiles ship in `profiles/`; `kvbench calibrate` writes measured ones in the same
format. The planner reads HBM and host DRAM; the simulator's cost model reads the rest."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvbench import yamldoc
from kvbench.errors import KvbenchError, validation_message

PROFILE_DIR = Path(__file__).parent / "profiles"


class Sourced(BaseModel):
    """A number and where it came from ('datasheet: ...', 'measured: kvbench calibrate ...')."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    source: str


class KvPageCopy(BaseModel):
    """Measured host<->device rate for moving KV pages in one host layout (calibrate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    layout: Literal["layer_first", "page_first"]
    direction: Literal["h2d", "d2h"]
    page_size_tokens: int
    page_bytes: int = Field(description="one page across all layers, K and V")
    num_pages: int
    copies_per_page: int = Field(description="cudaMemcpyAsync calls one page needs")
    seconds: float = Field(description="median time to move num_pages pages")
    bytes_per_s: float


class LayerTiming(BaseModel):
    """Median time of one transformer layer at one batch shape (calibrate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    phase: Literal["prefill", "decode"]
    batch_size: int
    context_tokens: int = Field(description="tokens each sequence attends to (incl. new ones)")
    new_tokens: int = Field(description="tokens each sequence computes in this step")
    seconds: float
    flops: float
    hbm_bytes: float = Field(description="weights + KV read, the floor of bytes moved")


class LayerTimings(BaseModel):
    """Per-layer timings of one model shape on this GPU, built from torch ops."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str
    shape: dict[str, int]
    dtype: str
    method: str
    points: list[LayerTiming]


class HardwareProfile(BaseModel):
    """One accelerator. FLOP/s are dense (no sparsity); bandwidths are per direction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    vendor: str
    kind: str = Field(description="'datasheet' or 'measured'")
    hbm_bytes: Sourced
    # What CUDA reports as the device's memory (cudaDeviceProp.totalGlobalMem), which engines
    # size their pools from; the datasheet's figure (hbm_bytes) where nobody measured it.
    device_memory_bytes: Sourced | None = None
    hbm_bandwidth_bytes_per_s: Sourced
    flops_per_s: dict[str, Sourced] = Field(description="dense FLOP/s by dtype: bf16, fp8, fp4")
    host_to_device_bytes_per_s: Sourced
    device_to_host_bytes_per_s: Sourced
    host_link: str
    # Scale-out network per GPU and direction (the RDMA NIC each GPU sends through): what
    # disaggregated prefill moves KV over to the decode workers. None: not stated.
    kv_transfer_bytes_per_s: Sourced | None = None
    gpus_per_node: int
    host_dram_bytes_per_node: Sourced
    # Fractions of the peak that real kernels reach; measured profiles set them to 1.0
    # because their peaks are already achieved figures.
    achievable_flops_fraction: float = 0.6
    achievable_hbm_fraction: float = 0.8
    achievable_link_fraction: float = 0.8
    notes: list[str] = Field(default_factory=list)
    # Measured profiles only (kvbench calibrate); datasheet profiles leave them empty.
    device_name: str | None = None
    pin_seconds_per_gib: Sourced | None = None
    kv_page_copies: list[KvPageCopy] = Field(default_factory=list)
    layer_timings: list[LayerTimings] = Field(default_factory=list)

    @field_validator("hbm_bytes", "device_memory_bytes", "hbm_bandwidth_bytes_per_s",
                     "host_to_device_bytes_per_s",
                     "device_to_host_bytes_per_s", "kv_transfer_bytes_per_s",
                     "host_dram_bytes_per_node", "pin_seconds_per_gib")
    @classmethod
    def _positive(cls, v: Sourced | None) -> Sourced | None:
        # a zero, negative, NaN or infinite rate or size would divide by zero or make every
        # simulated step free or endless (`not x > 0` also catches NaN)
        if v is not None and not (math.isfinite(v.value) and v.value > 0):
            raise ValueError(f"value must be a finite number > 0, got {v.value}")
        return v

    @field_validator("flops_per_s")
    @classmethod
    def _flops(cls, v: dict[str, Sourced]) -> dict[str, Sourced]:
        if "bf16" not in v:
            raise ValueError("needs a bf16 entry (other dtypes fall back to it)")
        for dtype, rate in v.items():
            if not (math.isfinite(rate.value) and rate.value > 0):
                raise ValueError(f"{dtype}: value must be a finite number > 0, got {rate.value}")
        return v

    @field_validator("gpus_per_node")
    @classmethod
    def _gpus(cls, v: int) -> int:
        if not 1 <= v <= 1024:
            raise ValueError(f"must be within 1..1024, got {v}")
        return v

    @field_validator("achievable_flops_fraction", "achievable_hbm_fraction",
                     "achievable_link_fraction")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not 0 < v <= 1:
            raise ValueError(f"must be within (0, 1], got {v}")
        return v

    def flops(self, dtype: str) -> float:
        """Effective dense FLOP/s for a compute dtype, falling back to bf16."""
        peak = self.flops_per_s.get(dtype) or self.flops_per_s["bf16"]
        return peak.value * self.achievable_flops_fraction

    def layer_efficiency(self, phase: str) -> float | None:
        """Median over the measured layer timings of one phase of roofline time / measured
        time, the roofline being max(FLOPs / bf16 rate, bytes / HBM rate) at this profile's
        effective rates. A cost model that multiplies its roofline times by 1 / this number
        reproduces what real kernels reach at that phase; None without timings."""
        ratios = sorted(
            max(p.flops / self.flops("bf16"), p.hbm_bytes / self.hbm_bandwidth) / p.seconds
            for t in self.layer_timings
            for p in t.points
            if p.phase == phase and p.seconds > 0
        )
        if not ratios:
            return None
        mid = len(ratios) // 2
        return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth_bytes_per_s.value * self.achievable_hbm_fraction

    @property
    def kv_transfer_bandwidth(self) -> float | None:
        """Effective prefill -> decode KV bandwidth per GPU (the link fraction applies)."""
        v = self.kv_transfer_bytes_per_s
        return None if v is None else v.value * self.achievable_link_fraction

    @property
    def h2d_bandwidth(self) -> float:
        return self.host_to_device_bytes_per_s.value * self.achievable_link_fraction

    @property
    def d2h_bandwidth(self) -> float:
        return self.device_to_host_bytes_per_s.value * self.achievable_link_fraction


# Runner labels (runners.yaml) name clusters; their GPU is the token after "cluster:" up to "-".
_ALIASES = {"gb200": "gb200", "gb300": "gb300"}


def gpu_of_runner(runner: str) -> str:
    """'cluster:b300-nv' -> 'b300'; 'mi355x-disagg' -> 'mi355x'."""
    base = runner.removeprefix("cluster:").split("-")[0].split("_")[0]
    return _ALIASES.get(base, base)


def hardware_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


@cache
def _load_file(path: Path) -> HardwareProfile:
    raw = yamldoc.load_file(path, "hardware profile")
    try:
        return HardwareProfile.model_validate(raw)
    except ValidationError as e:
        raise KvbenchError(validation_message(e, f"{path}: invalid hardware profile")) from None


def load_hardware(name_or_path: str | Path) -> HardwareProfile:
    """A shipped profile by name (case-insensitive, or a runner label) or a YAML file path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return _load_file(path.resolve())
    name = str(name_or_path).lower()
    if name not in hardware_names():
        name = gpu_of_runner(name)
    candidate = PROFILE_DIR / f"{name}.yaml"
    if not candidate.exists():
        raise KvbenchError(
            f"unknown hardware {str(name_or_path)!r}; known: {', '.join(hardware_names())}",
            hint="pass a profile YAML path (kvbench calibrate writes one) or add one to "
            f"{PROFILE_DIR}",
        )
    return _load_file(candidate)
