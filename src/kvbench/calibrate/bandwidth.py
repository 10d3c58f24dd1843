"""Memory and host-link bandwidths: HBM copy, pinned and pageable host<->device copies, and
the one-time cost of pinning host memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvbench.calibrate.timer import Timing, time_fn, time_once
from kvbench.units import GiB, MiB

Direction = Literal["h2d", "d2h"]
LINK_SIZES_BYTES: tuple[int, ...] = (1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB)


@dataclass(frozen=True, slots=True)
class CopyPoint:
    """A timed copy of `size_bytes`; `bytes_moved` counts what crossed the bus or memory."""

    what: str
    size_bytes: int
    bytes_moved: int
    timing: Timing

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.timing.median_s


def time_device_copy(size_bytes: int, *, device: Any, repeats: int = 10) -> CopyPoint:
    """Device-to-device copy; counts bytes read plus bytes written (2 x size), the way HBM
    bandwidth is specified."""
    import torch

    bufs = [torch.empty(size_bytes, dtype=torch.uint8, device=device) for _ in range(3)]
    for b in bufs:
        b.random_(0, 255)
    state = {"i": 0}

    def step() -> None:
        i = state["i"]
        state["i"] += 1
        bufs[(i + 1) % 3].copy_(bufs[i % 3])

    timing = time_fn(step, device=device, warmup=3, repeats=repeats)
    return CopyPoint("device_copy", size_bytes, 2 * size_bytes, timing)


def time_link_copy(
    direction: Direction,
    size_bytes: int,
    *,
    device: Any,
    pinned: bool = True,
    repeats: int = 10,
) -> CopyPoint:
    """One host<->device copy of `size_bytes` (non_blocking from pinned memory)."""
    import torch

    host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=pinned)
    host.random_(0, 255)
    dev = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    if direction == "h2d":
        def step() -> None:
            dev.copy_(host, non_blocking=pinned)
    else:
        def step() -> None:
            host.copy_(dev, non_blocking=pinned)

    timing = time_fn(step, device=device, warmup=2, repeats=repeats)
    kind = "pinned" if pinned else "pageable"
    return CopyPoint(f"{direction}_{kind}", size_bytes, size_bytes, timing)


def time_bidirectional(size_bytes: int, *, device: Any, repeats: int = 5) -> CopyPoint:
    """H2D and D2H at once on two streams; bytes_moved counts one direction, so the rate is
    per direction (the figure write-through backups meet while loads run)."""
    import torch

    h_in = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    h_out = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    d_in = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    d_out = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    s1, s2 = torch.cuda.Stream(device), torch.cuda.Stream(device)
    main = torch.cuda.current_stream(device)

    def step() -> None:
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            d_in.copy_(h_in, non_blocking=True)
        with torch.cuda.stream(s2):
            h_out.copy_(d_out, non_blocking=True)
        main.wait_stream(s1)
        main.wait_stream(s2)

    timing = time_fn(step, device=device, warmup=1, repeats=repeats)
    return CopyPoint("bidirectional", size_bytes, size_bytes, timing)


@dataclass(frozen=True, slots=True)
class PinPoint:
    """Seconds to pin `size_bytes` of host memory by one method."""

    method: str
    size_bytes: int
    seconds: float

    @property
    def seconds_per_gib(self) -> float:
        return self.seconds / (self.size_bytes / GiB)


def time_pinning(size_bytes: int, *, device: Any) -> list[PinPoint]:
    """Pin once by cudaHostRegister on fresh pageable memory (SGLang HiCache's path) and once
    by torch.empty(pin_memory=True) (cudaHostAlloc through torch's caching allocator; a
    power-of-two size keeps its rounding out of the figure)."""
    import torch

    cudart = torch.cuda.cudart()
    points = []
    pageable = torch.empty(size_bytes, dtype=torch.uint8)
    ptr = pageable.data_ptr()

    def register() -> None:
        err = cudart.cudaHostRegister(ptr, size_bytes, 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister failed: {err}")

    points.append(PinPoint("cudaHostRegister", size_bytes, time_once(register, device=device)))
    cudart.cudaHostUnregister(ptr)
    del pageable

    def alloc() -> None:
        torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)

    points.append(PinPoint("torch_pin_memory", size_bytes, time_once(alloc, device=device)))
    return points
