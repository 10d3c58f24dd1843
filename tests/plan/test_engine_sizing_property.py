"""Property: over all 746 real agentic rows with mutated sizes and budgets, no plan marked
within budget has a footprint above the budget when the footprint is computed by the engine's
own sizing code (where that code imports on CPU).

- SGLang HiCache (fixed --hicache-size): every host pool's token (or request-slot) count comes
  from SGLang's `HostKVCache.__init__` (mem_cache/pool_host/base.py: `host_size * 1e9 //
  size_per_token`, one padding page; a sidecar takes the KV pool's capacity), fed with the
  plan's per-pool configured GB and bytes per unit. The Mamba pool uses the same constructor with
  page 1, which is the arithmetic of `MambaPoolHost.__init__` (pool_host/mamba.py).
- vLLM native / simple offload: `cpu_bytes_to_use` comes from vLLM's
  `VllmConfig._post_init_kv_transfer_config` for the plan's --kv-offloading-size.
- Ratio-mode HiCache, LMCache, Mooncake and TRT-LLM have no CPU-importable sizing code here;
  test_budget_property.py covers their own projection.

The engines' code runs in one worker subprocess (importing sglang sets process-wide state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.jobs import budget_plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.matrix import Job, Selection, select_jobs
from kvbench.plan.topology import topology_of
from kvbench.units import GB

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"

WORKER = textwrap.dedent("""
    import json, sys, types
    import sglang.srt.mem_cache as mem_cache
    # pool_host/__init__ pulls the device pools and every model config (multimodal ones
    # need torchvision, absent on CPU); the sizing lives in pool_host/base.py alone.
    package = types.ModuleType("sglang.srt.mem_cache.pool_host")
    package.__path__ = [mem_cache.__path__[0] + "/pool_host"]
    sys.modules[package.__name__] = package
    from sglang.srt.mem_cache.pool_host.base import HostKVCache
    from vllm.config.vllm import VllmConfig

    class Sized(HostKVCache):
        # only the constructor's sizing runs: no buffers, no free lists
        def clear(self): pass
        def get_size_per_token(self): return self.size_per_token
        def init_kv_buffer(self): pass
        def load_to_device_per_layer(self, *a, **k): pass
        def backup_from_device_all_layer(self, *a, **k): pass
        def get_data_page(self, *a, **k): pass
        def get_dummy_flat_data_page(self, *a, **k): pass
        def set_from_flat_data_page(self, *a, **k): pass

    def host_units(p):
        return Sized(dtype=None, device_capacity_tokens=p.get("device") or 0,
                     size_per_token=p["unit_bytes"],
                     start_layer=0, end_layer=1, host_to_device_ratio=p.get("ratio") or 0.0,
                     host_size=p.get("host_size") or 0, page_size=p["page"],
                     layout="page_first", pin_memory=False, device="cpu", is_dummy=True,
                     host_token_capacity=p.get("capacity")).size

    def cpu_bytes(size_gib):
        ns = types.SimpleNamespace(
            cache_config=types.SimpleNamespace(kv_offloading_size=size_gib,
                                               kv_offloading_backend="native"),
            kv_transfer_config=None)
        VllmConfig._post_init_kv_transfer_config(ns)
        return ns.kv_transfer_config.kv_connector_extra_config["cpu_bytes_to_use"]

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req["kind"] == "hicache":
            out = [host_units(p) for p in req["pools"]]
        else:
            out = cpu_bytes(req["size_gib"])
        print(json.dumps(out), flush=True)
""")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(SRC),
           "SGLANG_CACHE_DIR": str(tmp_path_factory.mktemp("sglang")),
           "VLLM_CACHE_ROOT": str(tmp_path_factory.mktemp("vllm"))}
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    ready = proc.stdout.readline()
    if not ready:
        proc.kill()
        pytest.fail("the sglang/vllm sizing worker did not start (.ci/install installs both)")

    def ask(request: dict):
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    yield ask
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # an interpreter holding sglang, vllm and torch can take
        proc.kill()  # that long to exit on a loaded machine: its answers are in
        proc.wait()


ROWS = [j.row for j in select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS))]
OFFLOAD_ROWS = [r for r in ROWS if r.get("kv-offload-backend")]


def _flag(plan, name):
    args = plan.engine_args
    return args[args.index(name) + 1] if name in args else None


def engine_footprint(plan, job, ask) -> int | None:
    """Node bytes by the engine's own arithmetic, or None where no such code runs on CPU."""
    if plan.backend == "hicache" and _flag(plan, "--hicache-size") is not None:
        kv = next(p for p in plan.host_pools if p.name == "kv")
        requests = []
        for p in plan.host_pools:
            page = 1 if p.name == "mamba" else plan.page_size_tokens
            if p.name == "draft_kv":
                # the MTP draft's sidecar (up to 0.5.17): the KV host pool's slots as a ratio
                # of the device pool, host size 0 (sglang 0.5.17 kv_cache_builder.py:104-118)
                requests.append({"unit_bytes": p.unit_bytes, "page": page,
                                 "device": plan.gpu_kv_tokens,
                                 "ratio": kv.units / plan.gpu_kv_tokens})
            elif p.configured_gb is None:  # a sidecar mirrors the KV pool's capacity
                requests.append({"unit_bytes": p.unit_bytes, "page": page,
                                 "capacity": kv.units})
            else:
                requests.append({"unit_bytes": p.unit_bytes, "page": page,
                                 "host_size": p.configured_gb})
        units = ask({"kind": "hicache", "pools": requests})
        for p, n in zip(plan.host_pools, units, strict=True):
            assert n == p.units, f"{plan.exp_name} {p.name}: engine {n:,} vs plan {p.units:,}"
        return plan.ranks_on_node * sum(
            n * p.unit_bytes for p, n in zip(plan.host_pools, units, strict=True))
    if plan.backend in ("vllm-native", "vllm-simple"):
        if plan.backend == "vllm-simple":  # what SimpleCPUOffloadConnector reads
            connector = plan.engine_config["kv-transfer-config"]
            total = int(connector["kv_connector_extra_config"]["cpu_bytes_to_use"])
        else:
            total = ask({"kind": "vllm",
                         "size_gib": float(_flag(plan, "--kv-offloading-size"))})
        topo = topology_of(job)
        # one engine per DP rank (world 1), else one engine over its TP x PP ranks
        world = 1 if topo.dp_attention else topo.tp * topo.pp
        engines_on_node = max(1, plan.ranks_on_node // world)
        return total * engines_on_node
    return None


@st.composite
def mutated(draw):
    row = dict(draw(st.sampled_from(OFFLOAD_ROWS)))
    backend = dict(row["kv-offload-backend"])
    if draw(st.booleans()):
        backend["size-gb-per-rank"] = draw(st.floats(0.5, 400))
    row["kv-offload-backend"] = backend
    budget = int(row.get("total-cpu-dram-gb") or 100)
    row["total-cpu-dram-gb"] = draw(st.integers(max(1, budget // 20), budget * 3 // 2))
    return row


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_engine_sized_footprint_never_exceeds_a_within_budget_plan(engine, row):
    job = Job(config_key="prop", row=row, scenario="agentic-coding")
    plan = budget_plan(job)
    if not plan.within_budget:
        assert plan.errors
        return
    footprint = engine_footprint(plan, job, engine)
    if footprint is not None:
        assert footprint <= row["total-cpu-dram-gb"] * GB, (
            f"{plan.exp_name}: the engine allocates {footprint / GB:,.2f} GB > "
            f"{row['total-cpu-dram-gb']:,} GB")
        assert footprint <= plan.projected_host_bytes


def test_the_real_rows_are_all_there():
    assert len(ROWS) == 746
    # 168 hicache, 52 vllm-simple, 50 mooncake, 34 native, 9 lmcache
    assert len(OFFLOAD_ROWS) == 313


def test_every_real_offload_row_fits_by_the_engines_arithmetic(engine):
    """The unmutated rows: each within-budget plan re-sized by the engines' own code."""
    checked = {"hicache": 0, "vllm-native": 0, "vllm-simple": 0}
    for row in OFFLOAD_ROWS:
        job = Job(config_key="real", row=row, scenario="agentic-coding")
        plan = budget_plan(job)
        if not plan.within_budget:
            continue
        footprint = engine_footprint(plan, job, engine)
        if footprint is None:
            continue
        checked[plan.backend] += 1
        assert footprint <= row["total-cpu-dram-gb"] * GB, plan.exp_name
    # fixed-size HiCache rows (Qwen3.5, GLM-5.2; DeepSeek-V4 is ratio-only) and every
    # single- and multi-node vllm-simple row
    assert checked == {"hicache": 122, "vllm-native": 0, "vllm-simple": 52}
