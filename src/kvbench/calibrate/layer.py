"""One transformer layer built from a `LayerShape` with plain torch ops, random weights.

Prefill runs causal SDPA over the new tokens; decode runs one new token per sequence against
a filled KV cache. Engines use paged flash kernels and fused norms, so these timings are what
stock torch reaches: an upper bound on the engines' per-layer time at the same shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvbench.calibrate.shape import LayerShape
from kvbench.calibrate.timer import Timing, is_cuda, time_fn

Phase = Literal["prefill", "decode"]


@dataclass(frozen=True, slots=True)
class LayerPoint:
    """One timed step: `batch` sequences, each computing `new_tokens` over `context_tokens`."""

    phase: Phase
    batch: int
    context_tokens: int
    new_tokens: int
    timing: Timing
    flops: float
    hbm_bytes: float
    graphed: bool


def build_layer(shape: LayerShape, *, device: Any, dtype: Any) -> Any:
    """A torch module for the shape, with random weights scaled like an init."""
    import torch
    import torch.nn.functional as F

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = shape.hidden_size
            self.ln1 = torch.nn.RMSNorm(h)
            self.ln2 = torch.nn.RMSNorm(h)
            self.q_norm = torch.nn.RMSNorm(shape.head_dim)
            self.k_norm = torch.nn.RMSNorm(shape.head_dim)
            self.qkv = torch.nn.Linear(h, shape.q_dim + 2 * shape.kv_dim, bias=False)
            self.o = torch.nn.Linear(shape.q_dim, h, bias=False)
            self.gate_up = torch.nn.Linear(h, 2 * shape.intermediate_size, bias=False)
            self.down = torch.nn.Linear(shape.intermediate_size, h, bias=False)

        def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            half = shape.head_dim // 2
            inv = 1.0 / (1e6 ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
            ang = pos[:, None].float() * inv[None, :]
            # [n, 1, half]: broadcast over heads of x [b, n, heads, d]
            cos, sin = ang.cos().to(x.dtype)[:, None], ang.sin().to(x.dtype)[:, None]
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        def forward(
            self,
            x: torch.Tensor,
            pos: torch.Tensor,
            k_cache: torch.Tensor | None = None,
            v_cache: torch.Tensor | None = None,
        ) -> torch.Tensor:
            b, n, _ = x.shape
            hd, nh, nkv = shape.head_dim, shape.num_attention_heads, shape.num_kv_heads
            q, k, v = self.qkv(self.ln1(x)).split([shape.q_dim, shape.kv_dim, shape.kv_dim], -1)
            q = self._rope(self.q_norm(q.view(b, n, nh, hd)), pos).transpose(1, 2)
            k = self._rope(self.k_norm(k.view(b, n, nkv, hd)), pos).transpose(1, 2)
            v = v.view(b, n, nkv, hd).transpose(1, 2)
            if k_cache is None:
                attn = _sdpa(q, k, v, causal=True)
            else:
                # The new token's K/V goes into the last cache slot, then attends to all.
                k_cache[:, :, -n:].copy_(k)
                v_cache[:, :, -n:].copy_(v)
                attn = _sdpa(q, k_cache, v_cache, causal=False)
            x = x + self.o(attn.transpose(1, 2).reshape(b, n, shape.q_dim))
            gate, up = self.gate_up(self.ln2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    layer = Layer().to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
    return layer.eval()


def _sdpa(q: Any, k: Any, v: Any, *, causal: bool) -> Any:
    import torch.nn.functional as F

    if q.shape[1] != k.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def time_layer(
    layer: Any,
    shape: LayerShape,
    phase: Phase,
    batch: int,
    context_tokens: int,
    *,
    device: Any,
    dtype: Any,
    warmup: int = 2,
    repeats: int = 5,
    use_graph: bool = True,
) -> LayerPoint:
    """Time one prefill step (`context_tokens` new tokens per sequence) or one decode step
    (1 new token per sequence over `context_tokens` of context, the new one included)."""
    import torch

    new = context_tokens if phase == "prefill" else 1
    x = torch.randn(batch, new, shape.hidden_size, device=device, dtype=dtype)
    pos = torch.arange(context_tokens - new, context_tokens, device=device)
    k_cache = v_cache = None
    if phase == "decode":
        cache_shape = (batch, shape.num_kv_heads, context_tokens, shape.head_dim)
        k_cache = torch.randn(cache_shape, device=device, dtype=dtype)
        v_cache = torch.randn(cache_shape, device=device, dtype=dtype)

    def step() -> Any:
        return layer(x, pos, k_cache, v_cache)

    graphed = False
    with torch.no_grad():
        fn = step
        # Engines replay decode steps as CUDA graphs; without one, launch gaps dominate at
        # small batch and the timing would measure the Python host instead of the GPU.
        if use_graph and phase == "decode" and is_cuda(device):
            fn, graphed = _graphed(step, device)
        timing = time_fn(fn, device=device, warmup=warmup, repeats=repeats)
    dtype_bytes = torch.finfo(dtype).bits // 8
    kv_read = 0 if phase == "prefill" else batch * context_tokens * shape.kv_bytes_per_token(
        dtype_bytes)
    return LayerPoint(
        phase=phase,
        batch=batch,
        context_tokens=context_tokens,
        new_tokens=new,
        timing=timing,
        flops=shape.linear_flops(batch * new) + shape.attention_flops(batch, new, context_tokens),
        hbm_bytes=float(shape.params * dtype_bytes + kv_read),
        graphed=graphed,
    )


def _graphed(step: Any, device: Any) -> tuple[Any, bool]:
    import torch

    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    except RuntimeError:
        return step, False
    return graph.replay, True
