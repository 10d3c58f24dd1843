"""Dense matrix-product FLOP/s through torch (cuBLAS), bf16 and fp8, at large shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.calibrate.timer import Timing, time_fn

# Large enough to fill an H100/H200 and leave the 50-60 MB L2 far behind.
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = ((8192, 8192, 8192), (16384, 8192, 16384))
NUM_INPUT_SETS = 3  # rotated so repeats never hit operands left in cache


@dataclass(frozen=True, slots=True)
class MatmulPoint:
    dtype: str
    m: int
    n: int
    k: int
    timing: Timing

    @property
    def flops_per_s(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.timing.median_s


def fp8_supported(device: Any) -> bool:
    """torch._scaled_mm needs compute capability 8.9+ (Ada, Hopper and later)."""
    import torch

    if not str(device).startswith("cuda") or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def time_matmul(
    dtype: str,
    m: int,
    n: int,
    k: int,
    *,
    device: Any,
    warmup: int = 3,
    repeats: int = 10,
) -> MatmulPoint:
    """Time `A[m,k] @ B[k,n]` on random operands (zeros run faster and flatter the peak)."""
    import torch

    sets = []
    for _ in range(NUM_INPUT_SETS):
        a = torch.randn(m, k, device=device, dtype=torch.float32)
        b = torch.randn(n, k, device=device, dtype=torch.float32)
        if dtype == "fp8":
            fp8 = torch.float8_e4m3fn
            sets.append((a.to(fp8), b.to(fp8).t()))  # B column-major, as _scaled_mm wants
        else:
            sets.append((a.to(getattr(torch, _TORCH_DTYPES[dtype])),
                         b.to(getattr(torch, _TORCH_DTYPES[dtype])).t()))
        del a, b
    one = torch.ones((), device=device, dtype=torch.float32)
    state = {"i": 0}

    def step() -> Any:
        a, b = sets[state["i"] % NUM_INPUT_SETS]
        state["i"] += 1
        if dtype == "fp8":
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return a @ b

    timing = time_fn(step, device=device, warmup=warmup, repeats=repeats)
    return MatmulPoint(dtype=dtype, m=m, n=n, k=k, timing=timing)


_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
