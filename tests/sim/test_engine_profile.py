"""Engine profiles in the cost model: attention modes and host overheads with round numbers
(see conftest.plain_costs), and the shipped YAML profiles."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim.conftest import plain_costs

from kvbench.errors import SimError
from kvbench.hardware import load_hardware
from kvbench.sim.costs import CostModel
from kvbench.sim.engine_profile import engine_profile_names, load_engine_profile
from kvbench.sim.sizing import resolve_costs

PACKED = plain_costs(attention="packed_dense")


def test_one_request_prefill_per_request_is_causal_packed_is_the_full_square():
    # 1000 new tokens, no context: dense 1000 x 1e10 FLOPs = 10 ms at 1e15 FLOP/s;
    # causal pairs 1000 x 1001 / 2 = 500,500, dense-mask pairs 1000 x 1000 = 1e6, x 1e5 FLOPs.
    assert plain_costs().step_s([(1000, 0)], 0, 0) == pytest.approx(0.01 + 5.005e-5)
    assert PACKED.step_s([(1000, 0)], 0, 0) == pytest.approx(0.01 + 1e-4)


def test_packed_prefill_attends_to_every_request_in_the_step():
    chunks = [(1000, 0), (1000, 3000)]
    # per request: 500,500 + (1000 x 3000 + 500,500) pairs = 4,001,000
    assert plain_costs().step_s(chunks, 0, 0) == pytest.approx(0.02 + 4.001e-4)
    # packed: 2000 queries x 5000 keys (1000 + 4000 read) = 1e7 pairs
    assert PACKED.step_s(chunks, 0, 0) == pytest.approx(0.02 + 1e-3)


def test_packed_mixed_step_scores_the_chunk_against_the_decoders_context():
    # 1000-token chunk + 4 decoders holding 40,000 tokens in all.
    # per request: 0.01 + 5.005e-5 (chunk) + 4e-5 (4 dense tokens) + 4e-6 (40,000 pairs)
    assert plain_costs().step_s([(1000, 0)], 4, 40_000) == pytest.approx(0.01009405)
    # packed: 1004 queries x 41,000 keys = 41,164,000 pairs -> 4.1164e-3 s, dense 1.004e-2 s;
    # memory (1e9 + 41,000 x 1e5 B) / 1e12 = 5.1e-3 s stays below compute
    assert PACKED.step_s([(1000, 0)], 4, 40_000) == pytest.approx(0.0141564)


def test_packed_decode_multiplies_attention_by_the_batch():
    # Compute-bound at 1e12 FLOP/s: 4 x 1e10 dense = 0.04 s; attention 40,000 context pairs
    # per request (4e-3 s) or 4 queries x 40,000 keys packed (1.6e-2 s).
    slow = {"flops_per_s": 1e12}
    assert plain_costs(**slow).decode_step_s(4, 40_000) == pytest.approx(0.044)
    assert plain_costs(attention="packed_dense", **slow).decode_step_s(4, 40_000) == (
        pytest.approx(0.056))


@pytest.mark.parametrize("batch,context0,growth,steps", [
    (1, 1000, 1, 10), (64, 5e5, 64, 300), (4000, 0, 4000, 50), (8, 0, 8, 0)])
def test_packed_decode_stretch_closed_form_equals_step_by_step(batch, context0, growth, steps):
    costs = plain_costs(attention="packed_dense", flops_per_token_per_rank=3e11,
                        step_overhead_s=1e-4, per_sequence_overhead_s=1e-5)
    by_step = sum(costs.decode_step_s(batch, context0 + growth * i) for i in range(steps))
    assert costs.decode_steps_s(batch, context0, growth, steps) == pytest.approx(by_step)


def test_overheads_fixed_per_prefill_step_and_per_sequence():
    costs = plain_costs(step_overhead_s=0.05, prefill_overhead_s=0.03,
                        per_sequence_overhead_s=0.02)
    # decode of 4 at no context: 50 ms + 4 x 20 ms + 1 ms of weights (1e9 B at 1e12 B/s)
    assert costs.decode_step_s(4, 0) == pytest.approx(0.131)
    assert costs.decode_steps_s(4, 0, 0, 10) == pytest.approx(1.31)
    # a chunk and 3 decoders: 50 + 30 + 4 x 20 ms, body 0.01 + 5.005e-5 + 3e-5 s
    assert costs.step_s([(1000, 0)], 3, 0) == pytest.approx(0.16 + 0.01008005)


def test_decode_kv_read_efficiency_slows_only_the_kv_reads():
    full = plain_costs()
    half = replace(full, decode_kv_read_efficiency=0.5)
    kv = full.decode_step_s(1, 10_000) - full.decode_step_s(1, 0)
    assert kv > 0
    assert half.decode_step_s(1, 0) == pytest.approx(full.decode_step_s(1, 0))  # weights
    assert half.decode_step_s(1, 10_000) - half.decode_step_s(1, 0) == pytest.approx(2 * kv)
    assert half.load_s(10_000) == pytest.approx(full.load_s(10_000))  # host loads: unchanged


def test_profile_schema_allows_exactly_the_cost_model_attention_modes():
    from typing import get_args

    from kvbench.sim.costs import ATTENTION_MODES
    from kvbench.sim.engine_profile import EngineProfile

    assert get_args(EngineProfile.model_fields["attention"].annotation) == ATTENTION_MODES


def test_bad_attention_mode_names_the_allowed_ones():
    with pytest.raises(SimError, match="per_request, packed_dense"):
        plain_costs(attention="dense")


def test_default_engine_is_sglang_and_keeps_the_built_in_costs():
    assert {"sglang", "vllm", "transformers"} <= set(engine_profile_names())
    h200 = load_hardware("h200")
    # the costs are the built-in ones; the profile adds SGLang's load-back threshold
    for costs in (resolve_costs("reference-8b", "h200"),
                  resolve_costs("reference-8b", "h200", engine="sglang")):
        assert costs.load_back_min_tokens == 10
        assert replace(costs, load_back_min_tokens=0) == CostModel.reference(h200)
    sglang = load_engine_profile(None)
    assert sglang.name == "sglang" and sglang.attention == "per_request"
    assert sglang.step_overhead_s.value == CostModel.reference(h200).step_overhead_s


def test_transformers_profile_applies_measured_layer_efficiency():
    hw = load_hardware("h200-measured")
    base = resolve_costs("Qwen/Qwen3-8B", hw)
    tf = resolve_costs("Qwen/Qwen3-8B", hw, engine="transformers")
    assert tf.attention == "packed_dense" and tf.engine == "transformers"
    assert tf.flops_per_s == pytest.approx(base.flops_per_s * hw.layer_efficiency("prefill"))
    assert tf.hbm_bytes_per_s == pytest.approx(base.hbm_bytes_per_s * hw.layer_efficiency("decode"))
    assert 0.5 < hw.layer_efficiency("decode") < hw.layer_efficiency("prefill") < 0.8
    # a datasheet profile has no layer timings: its achievable fractions stay
    datasheet = resolve_costs("Qwen/Qwen3-8B", "h200", engine="transformers")
    assert datasheet.flops_per_s == resolve_costs("Qwen/Qwen3-8B", "h200").flops_per_s


def test_unknown_or_bad_engine_profile_is_a_clear_error(tmp_path):
    with pytest.raises(SimError, match="known: sglang, transformers, vllm"):
        load_engine_profile("tgi")
    with pytest.raises(SimError, match="does not exist"):
        load_engine_profile(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    text = (load_engine_profile("sglang").model_dump_json())
    bad.write_text(text.replace('"per_request"', '"flash"'))
    with pytest.raises(SimError, match="attention"):
        load_engine_profile(bad)


def test_engine_profile_from_a_yaml_path(tmp_path):
    import yaml

    doc = load_engine_profile("sglang").model_dump()
    doc["name"] = "mine"
    doc["step_overhead_s"]["value"] = 0.004
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    costs = resolve_costs("reference-8b", "h200", engine=str(path))
    assert costs.engine == "mine" and costs.step_overhead_s == 0.004
    assert replace(costs, step_overhead_s=1e-3, engine="sglang") == resolve_costs(
        "reference-8b", "h200")
