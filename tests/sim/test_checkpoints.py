"""A hybrid model's prefix hit ends at a saved GDN state (SGLang's mamba radix cache,
sim/checkpoints.py): the rule that issue 37's Qwen3.5 runs show, e.g. trace_0373 turn 1 of
hicache-c8-b resuming 24,576 of the 27,520 tokens it shared with turn 0 (27,593 tokens,
prefilled in chunks of 8,192)."""

from __future__ import annotations

import math

from kvbench.sim.cache import TieredCache
from kvbench.sim.engine import Engine
from kvbench.sim.engine_config import EngineConfig
from kvbench.sim.request import SimRequest
from kvbench.sim.sizing import resolve_costs

PAGE = 64


def _run(model: str, turns: list[tuple[int, list[str]]]) -> list[SimRequest]:
    """Each turn (prompt tokens, page keys) sent once the one before has finished."""
    costs = resolve_costs(model, "h200", 1)
    eng = Engine(TieredCache(math.inf), costs, EngineConfig(chunked_prefill_tokens=8192))
    done = []
    for rid, (tokens, keys) in enumerate(turns):
        req = SimRequest(rid=rid, arrival_s=eng.now_s, input_tokens=tokens, output_tokens=8,
                         keys=keys, page_tokens=PAGE)
        eng.submit(req)
        eng.run_until()
        done.append(req)
    return done


def _keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_a_hit_resumes_at_the_deepest_saved_state_then_at_its_branching_point() -> None:
    a = _keys("a", 432)  # 27,593 tokens: 431 full pages and a partial one
    b = a[:430] + _keys("b", 20)  # shares 27,520 tokens, 28,800 in all
    c = b[:440] + _keys("c", 10)  # shares 28,160 tokens with b
    ra, rb, rc = _run("kvbench/qwen3.5-397b-a17b-scaled",
                      [(27_593, a), (28_800, b), (28_800, c)])
    assert ra.device_hit_tokens == 0
    # a saved states at 8,192, 16,384, 24,576 (chunk ends) and 27,584 (its prefill's end,
    # aligned to 64): b's 27,520 shared tokens resume at 24,576
    assert rb.device_hit_tokens == 24_576 and rb.context_tokens == 28_800
    # b's prefill saved its branching point (27,520) instead of the end of the chunk it
    # fell in: c resumes there, not at the 28,160 tokens it shares
    assert rc.device_hit_tokens == 27_520


def test_a_hit_on_a_saved_state_is_whole_and_dense_models_have_no_rule() -> None:
    a = _keys("a", 259)  # 16,558 tokens: chunks 8,192 + 8,366, state saved at 16,512
    b = a[:258] + _keys("b", 53)  # shares 16,512 tokens (issue 37's trace_0108 turn 1)
    _, rb = _run("kvbench/qwen3.5-397b-a17b-scaled", [(16_558, a), (19_864, b)])
    assert rb.device_hit_tokens == 16_512
    c = a[:200] + _keys("c", 100)  # shares 12,800 tokens: no state there
    _, dense = _run("Qwen/Qwen3-8B", [(16_558, a), (19_200, c)])
    _, hybrid = _run("kvbench/qwen3.5-397b-a17b-scaled", [(16_558, a), (19_200, c)])
    assert dense.device_hit_tokens == 12_800 and hybrid.device_hit_tokens == 8_192
