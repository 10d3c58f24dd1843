"""Property: a plan marked within budget never exceeds it, whatever the row."""

from __future__ import annotations

from fixtures.jobs import budget_plan
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.matrix import Job
from kvbench.models import model_names
from kvbench.plan.footprint import per_rank_bytes
from kvbench.units import GB

ENGINES = {
    "sglang": ("lmsysorg/sglang:v0.5.16-cu130", "lmsysorg/sglang:v0.5.12-cu130",
               "lmsysorg/sglang:v0.5.17-cu130", "lmsysorg/sglang:dev-nightly-0820"),
    "vllm": ("vllm/vllm-openai:v0.27.1",),
    "trt": ("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc24",),
    "atom": ("rocm/atom-dev:nightly_202608201032",),
}
BACKENDS = ("hicache", "vllm-native", "vllm-simple", "lmcache", "mooncake", "native")
VALID = {"sglang": ["hicache", "lmcache"], "trt": ["native"], "atom": ["lmcache"],
         "vllm": ["vllm-native", "vllm-simple", "lmcache", "mooncake"]}
RUNNERS = ("cluster:b300-nv", "cluster:b200-dgxc", "cluster:h200-dgxc", "cluster:h100-dgxc",
           "cluster:gb300-nv", "cluster:mi355x-amds")


@st.composite
def rows(draw):
    framework = draw(st.sampled_from(sorted(ENGINES)))
    row = {
        "image": draw(st.sampled_from(ENGINES[framework])),
        "model": draw(st.sampled_from(model_names())),
        "precision": draw(st.sampled_from(["fp4", "fp8", "bf16"])),
        "framework": framework,
        "runner": draw(st.sampled_from(RUNNERS)),
        "tp": draw(st.sampled_from([1, 2, 4, 8])),
        "pp": draw(st.sampled_from([1, 1, 2])),
        "dcp-size": 1, "pcp-size": 1,
        "ep": draw(st.sampled_from([1, 8])),
        "dp-attn": draw(st.booleans()),
        "spec-decoding": draw(st.sampled_from(["mtp", "none"])),
        "conc": draw(st.integers(1, 256)),
        "kv-offloading": "dram",
        "total-cpu-dram-gb": draw(st.integers(0, 4000)),
        "exp-name": "prop",
        # mostly a backend the engine runs, sometimes any (which must be refused cleanly)
        "kv-offload-backend": {"name": draw(st.sampled_from(VALID[framework] * 4 + [*BACKENDS]))},
    }
    if draw(st.booleans()):
        row["kv-offload-backend"]["size-gb-per-rank"] = draw(st.floats(0.5, 600))
    return row


@settings(max_examples=300, deadline=None)
@given(rows())
def test_within_budget_never_exceeds_it(row):
    plan = budget_plan(Job(config_key="prop", row=row, scenario="agentic-coding"))
    if plan.within_budget:
        assert not plan.errors
        assert plan.projected_host_bytes <= row["total-cpu-dram-gb"] * GB
        assert plan.headroom_bytes >= 0
        # the projection is the pools themselves times the ranks (pinning only adds)
        assert plan.projected_host_bytes >= plan.ranks_on_node * per_rank_bytes(
            plan.host_pools, "exact")
    else:
        assert plan.errors, "a plan outside the budget must say why"
    assert all(p.bytes_per_rank >= 0 for p in plan.host_pools)
