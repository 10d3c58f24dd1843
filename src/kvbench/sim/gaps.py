"""Inter-token latency as the replay measures it: the gap before each streamed token, pooled
over every token of every request (replay/stats.py `_itl_samples`). A per-request mean,
(finish - first token) / (tokens - 1), is TPOT, a different number: one 400 ms prefill chunk
in a request's decode raises its TPOT for all of its tokens but is one gap among hundreds.
On the H200 vLLM runs the two differ by up to 30% (resident conc 4: ITL p50 6.3 ms, TPOT p50
8.1 ms), which a comparison of one against the other once reported as a model error of +47%.

The engine logs one (gap, tokens) pair per applied step (engine.py `_apply`): every decoder
gets accept_length tokens per step; a fast-forwarded stretch of k decode steps counts at its
mean step time. Warm-up requests' tokens are in the log too (it is per engine, not per
request)."""

from __future__ import annotations

import math
from array import array
from typing import Any


class GapLog:
    """Token-weighted inter-token gaps of one engine, one entry per applied decode step."""

    __slots__ = ("gap_s", "tokens")

    def __init__(self) -> None:
        self.gap_s = array("d")
        self.tokens = array("d")

    def record(self, step_s: float, decode_steps: int, batch: int, accept_length: float
               ) -> None:
        """A step of `step_s` that ran `decode_steps` decode steps for `batch` decoders:
        each decoder got accept_length tokens per decode step, each a step / accept_length
        after the last; a fast-forwarded stretch counts at its mean step time."""
        tokens = batch * decode_steps * accept_length
        if tokens > 0:
            self.gap_s.append(step_s / decode_steps / accept_length)
            self.tokens.append(tokens)


def engine_gaps(engine: Any) -> tuple[array, array]:
    """(gap seconds, token weights) of an engine and every engine under it (DP ranks,
    prefill and decode workers)."""
    subs = getattr(engine, "engines", None)
    if subs is None:
        return engine.gaps.gap_s, engine.gaps.tokens
    gaps, weights = array("d"), array("d")
    for sub in subs:
        g, w = engine_gaps(sub)
        gaps += g
        weights += w
    return gaps, weights


def itl_percentiles(gaps, weights, scale: float = 1e3) -> dict[str, float | None]:
    """Token-weighted mean and nearest-rank percentiles of the gaps, times `scale`. Sorted
    in numpy (an hour at conc 512 logs ~10^6 steps: sorting Python pairs took 23x the time at
    8x the steps), in the order a sort of (gap, weight) pairs gives, summed left to right, so
    the answer is the same to the last bit."""
    import numpy as np

    g = np.asarray(gaps, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if len(g) != len(w):
        raise ValueError("gaps and weights differ in length")
    total = sum(w.tolist())
    if not len(g) or total <= 0:
        return {k: None for k in ("mean", "p50", "p90", "p95", "p99", "max")}
    order = np.lexsort((w, g))
    g, w = g[order], w[order]
    # the running token counts, added in the order of the gaps (non-decreasing: weights > 0)
    cum = np.cumsum(w)

    def q(p: float) -> float:
        # the first gap that reaches p
        i = int(np.searchsorted(cum, p * total - 1e-9 * total, side="left"))
        return float(g[min(i, len(g) - 1)]) * scale

    mean = math.fsum((g * w).tolist()) / total
    return {"mean": mean * scale, "p50": q(0.50), "p90": q(0.90), "p95": q(0.95),
            "p99": q(0.99), "max": float(g[-1]) * scale}
