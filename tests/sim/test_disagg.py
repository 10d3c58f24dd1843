"""Prefill/decode disaggregation, hand-worked: prefill on its ranks, the prompt's KV over the
prefill rank's NIC (one queue), first token in the decode rank's next step."""

from __future__ import annotations

import math

import pytest

from kvbench.sim.costs import CostModel
from kvbench.sim.simulate import DisaggSetup, SimSetup, run_sessions
from kvbench.workload.bounds import WorkloadBounds
from kvbench.workload.session import Session, Turn

# 1e9 FLOPs per token at 1e12 FLOP/s (1 ms a token), no attention FLOPs; 1 GB of weights
# and 1e5 B of KV per token at 1e12 B/s; no host overheads
COSTS = CostModel(weight_bytes_per_rank=1e9, kv_bytes_per_token_per_rank=1e5,
                  flops_per_token_per_rank=1e9,
                  attention_flops_per_token_per_context_token_per_rank=0.0,
                  flops_per_s=1e12, hbm_bytes_per_s=1e12, h2d_bytes_per_s=1e10,
                  d2h_bytes_per_s=1e10, step_overhead_s=0.0)
PD = DisaggSetup(decode_ranks=1, decode_gpu_tokens=100_000, decode_costs=COSTS,
                 transfer_bytes_per_token=1e5, transfer_bytes_per_s=1e9)
SESSIONS = [Session(name, [Turn(1000, 4, tuple(range(base, base + 16)), 64)], name)
            for name, base in (("A", 0), ("B", 100))]


def _run(prefill_ranks: int) -> list:
    done: list = []
    run_sessions(SESSIONS, COSTS, SimSetup(math.inf, dp=prefill_ranks, disagg=PD),
                 WorkloadBounds(concurrency=2), requests=done)
    return sorted(done, key=lambda r: r.first_s)


def test_two_prefill_ranks_send_in_parallel() -> None:
    """Each 1,000-token prompt prefills on its own rank in 1.0 s (compute-bound), its KV
    (1e8 B) crosses that rank's NIC in 0.1 s; both reach the decode rank at 1.1 s, whose
    next step computes both last tokens: max(2 ms compute, (1e9 + 2,000 x 1e5) / 1e12 =
    1.2 ms) = 2 ms. TTFT 1.102 s each."""
    done = _run(2)
    assert [r.ttft_s for r in done] == pytest.approx([1.102, 1.102])
    assert {r.meta["rank"] for r in done} == {0, 1}
    assert all(r.meta["kv_arrival_s"] == pytest.approx(1.1) for r in done)
    assert all(r.output_tokens == 4 for r in done)


def test_one_prefill_rank_queues_its_transfers() -> None:
    """One prefill rank: both prompts in one 2,000-token step, 2.0 s; the NIC sends A's KV
    by 2.1 s and B's behind it by 2.2 s. The decode rank computes each last token alone:
    max(1 ms, (1e9 + 1,000 x 1e5) / 1e12 = 1.1 ms): TTFT 2.1011 and 2.2011 s. Then three
    decode steps each; B's three read 1,000..1,002 context tokens: 1.1000, 1.1001, 1.1002
    ms, so B ends at 2.2011 + 0.0033003."""
    done = _run(1)
    assert [r.ttft_s for r in done] == pytest.approx([2.1011, 2.2011])
    assert done[1].finish_s == pytest.approx(2.2011 + 3.3003e-3)


def test_summary_counts_the_transfer_and_keeps_prefill_hits() -> None:
    s = run_sessions(SESSIONS, COSTS, SimSetup(math.inf, dp=2, disagg=PD),
                     WorkloadBounds(concurrency=2))
    assert s["kv_transfer_tokens"] == 2000
    assert s["setup"]["disagg"]["decode_ranks"] == 1
    assert s["requests"] == 2 and s["completion_tokens"] == 8
