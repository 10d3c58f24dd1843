"""LMCache 0.5 rows run LMCache as multiprocess servers, one per rank, as the InferenceX
launchers do (minimaxm3_fp8_mi300x_mtp.sh): kvbench starts them as services of the job and
points vLLM's LMCacheMPConnector at them. LMCache's CUDA ops do not load on a CPU machine, so
the server's flags and the connector's config keys are checked against the installed
package's source (.ci/offload-requirements.txt)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.engines import get_adapter
from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job
from kvbench.units import GiB

_SPEC = importlib.util.find_spec("lmcache")
LMCACHE = Path(_SPEC.origin).parent if _SPEC is not None else None
pytestmark = pytest.mark.skipif(LMCACHE is None, reason=".ci/install installs lmcache")


def _declared_flags() -> set[str]:
    """Every `--flag` the `lmcache server` parser declares (its argument-group modules)."""
    flags: set[str] = set()
    for module in ("v1/multiprocess/config.py", "v1/distributed/config.py",
                   "v1/mp_observability/config.py"):
        tree = ast.parse((LMCACHE / module).read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                flags |= {a.value for a in node.args
                          if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def _lmcache_jobs():
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                 frameworks=("vllm",), single_node=True))
    return [j for j in jobs if (j.row.get("kv-offload-backend") or {}).get("name") == "lmcache"]


def test_real_lmcache_rows_start_one_server_per_rank():
    declared = _declared_flags()
    assert {"--l1-size-gb", "--http-port", "--supported-transfer-mode"} <= declared
    jobs = _lmcache_jobs()
    assert len(jobs) == 3  # minimaxm3 on MI300X (TP8) and MI355X (TP4), LMCache 0.5.3
    for job in jobs:
        plan = plan_job(job)
        spec = get_adapter("vllm").build(job, plan, port=30000)
        assert len(spec.services) == job.row["tp"]
        for i, service in enumerate(spec.services):
            flags = {a for a in service.argv[2:] if a.startswith("--")}
            assert service.argv[:2] == ["lmcache", "server"]
            assert flags <= declared, sorted(flags - declared)
            assert service.ready_url == f"http://127.0.0.1:{44000 + i}/healthcheck"
        l1_gib = float(spec.services[0].argv[spec.services[0].argv.index("--l1-size-gb") + 1])
        # each server pins l1 x 2^30 bytes (lmcache/v1/distributed/config.py): the launcher's
        # TOTAL / TP read as GiB oversubscribes these budgets, which the plan refuses
        # (tests/plan/test_launcher_sizing.py); all of them fit where the plan accepts
        fits = job.row["tp"] * int(l1_gib * GiB) <= job.row["total-cpu-dram-gb"] * 10**9
        assert fits == plan.accepted, (job.exp_name, plan.errors)
        connector = json.loads(spec.argv[spec.argv.index("--kv-transfer-config") + 1])
        assert connector["kv_connector"] == "LMCacheMPConnector"
        urls = connector["kv_connector_extra_config"]["lmcache.mp.server_urls"].split(",")
        assert urls == [f"tcp://127.0.0.1:{43000 + i}" for i in range(job.row["tp"])]


def test_the_connector_module_and_keys_exist_in_lmcache():
    source = (LMCACHE / "integration/vllm/lmcache_mp_connector.py").read_text()
    assert "class LMCacheMPConnector" in source
    assert '"lmcache.mp.server_urls"' in source and "lmcache.mp.mq_timeout" in source
