"""`--sizing launcher` reproduces each InferenceX launcher's host-pool arithmetic on every
recorded row: the value the rule computes is the one the launcher passed (recorded by
benchmarks/launcher_oracle/record.py into tests/engines/data/launcher_oracle/), and the plan's
engine-facing flag, variable or file field gives the engine exactly those bytes. Beside it
the planner's verdict: refused when the launcher's size oversubscribes, unless forced."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.launcher_oracle import load_recordings, row_id

from kvbench.matrix import Job
from kvbench.plan import plan_job
from kvbench.plan.launcher_sizing import KNOBS, rules
from kvbench.recipe import load_runners
from kvbench.units import GiB

_RUNNERS = load_runners(RUNNERS)
_GB = 10**9


def _offload_rows() -> list[dict[str, Any]]:
    return [r for r in load_recordings()
            if r["launcher"] and r["row"].get("kv-offloading") == "dram"]


def _engine_call(rec: dict[str, Any]) -> dict[str, Any]:
    servers = [c for c in rec["calls"] if c["kind"] == "server"]
    for call in servers:
        text = " ".join(call["argv"])
        if any(p in text for p in ("sglang.launch_server", "vllm serve", " serve ",
                                   "trtllm-serve", "atom")):
            return call
    raise AssertionError(f"no engine call in {rec['config-key']} {row_id(rec['row'])}")


def _flag(argv: list[str], *names: str) -> str | None:
    for i, tok in enumerate(argv):
        for name in names:
            if tok == name and i + 1 < len(argv):
                return argv[i + 1]
            if tok.startswith(name + "="):
                return tok.split("=", 1)[1]
    return None


def _transfer_extra(argv: list[str]) -> dict[str, Any]:
    text = _flag(argv, "--kv-transfer-config", "--kv_transfer_config")
    assert text is not None, "no --kv-transfer-config"
    return json.loads(text).get("kv_connector_extra_config", {})


def _file_value(call: dict[str, Any], key: str) -> Any:
    for text in call["files"].values():
        try:
            doc = json.loads(text)
        except ValueError:
            doc = yaml.safe_load(text)
        if isinstance(doc, dict):
            if key in doc:
                return doc[key]
            for value in doc.values():
                if isinstance(value, dict) and key in value:
                    return value[key]
    return None


def recorded(rec: dict[str, Any], knob: str) -> Any:
    """What the launcher passed for `knob`, as it spelled it."""
    call = _engine_call(rec)
    argv = call["argv"]
    if knob in ("hicache-size", "hicache-ratio"):
        return _flag(argv, f"--{knob}")
    if knob in ("cpu-bytes-to-use", "cpu-bytes-to-use-per-rank"):
        return _transfer_extra(argv).get(knob.replace("-", "_"))
    if knob == "kv-offloading-size":
        return _flag(argv, "--kv-offloading-size", "--kv_offloading_size")
    if knob == "lmcache-max-local-cpu-size":
        return call["env-set"].get("LMCACHE_MAX_LOCAL_CPU_SIZE")
    if knob == "lmcache-l1-size-gb":
        sizes = {_flag(c["argv"], "--l1-size-gb") for c in rec["calls"]
                 if c["kind"] == "server" and "--l1-size-gb" in " ".join(c["argv"])}
        assert len(sizes) == 1, sizes
        return sizes.pop()
    if knob == "mooncake-global-segment-gb":
        for c in rec["calls"]:
            if (value := _file_value(c, "global_segment_size")) is not None:
                return value
        return None
    if knob == "host-cache-size":
        return _file_value(call, "host_cache_size")
    raise AssertionError(knob)


def _segment_bytes(value: Any) -> int:
    """mooncake 0.3.11.post1 mooncake_config.py _parse_segment_size, verbatim semantics."""
    if isinstance(value, int):
        return value
    s = str(value).strip().lower()
    return int(s[:-2]) * 1024**3 if s.endswith("gb") else int(s)


def _world(plan_row: dict[str, Any]) -> int:
    return 1 if plan_row.get("dp-attn") else int(plan_row["tp"]) * int(plan_row.get("pp", 1))


ROWS = _offload_rows()


def _job(rec: dict[str, Any]) -> Job:
    return Job(rec["config-key"], rec["row"], "agentic-coding")


def test_every_recorded_offload_row_is_covered():
    """Every single-node agentic offload row whose launcher exists is sized by a rule."""
    assert len(ROWS) >= 140  # 146 at 843c6254f
    missing = []
    for rec in ROWS:
        plan = plan_job(_job(rec), _RUNNERS, sizing="launcher", force=True)
        if plan.launcher is None:
            missing.append(f"{rec['config-key']} {row_id(rec['row'])}: {plan.errors}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("rec", ROWS, ids=lambda r: f"{r['config-key']}[{row_id(r['row'])}]")
def test_launcher_value_and_engine_bytes_match_the_recording(rec):
    plan = plan_job(_job(rec), _RUNNERS, sizing="launcher", force=True)
    assert plan.launcher is not None, plan.errors
    knob = plan.launcher["knob"]
    value = plan.launcher["value"]
    want = recorded(rec, knob)
    assert want is not None, f"the recording has no {knob}"
    # 1. the rule's arithmetic gives what the launcher passed, as it spelled it
    spelled = KNOBS[knob].spelling.format(v=f"{value:g}" if isinstance(value, float) else value)
    if knob == "mooncake-global-segment-gb":
        assert f'"{want}"' in spelled or str(want) in spelled, (spelled, want)
    else:
        assert float(want) == float(value), (knob, want, value)
    assert plan.launcher["spelled"] == spelled
    # 2. what kvbench hands the engine gives it exactly those bytes
    args, env, config = plan.engine_args, plan.engine_env, plan.engine_config
    row = rec["row"]
    if knob in ("hicache-size", "hicache-ratio"):
        assert float(args[args.index(f"--{knob}") + 1]) == float(want)
    elif knob in ("cpu-bytes-to-use", "cpu-bytes-to-use-per-rank"):
        # SimpleCPUOffloadConnector named in --kv-transfer-config, as the launchers do
        extra = config["kv-transfer-config"]["kv_connector_extra_config"]
        assert "--kv-offloading-size" not in args
        assert extra == {knob.replace("-", "_"): int(want)}, (extra, want)
        assert plan.host_pools[0].configured_gb * _GB == pytest.approx(
            int(want) // (_world(row) if knob == "cpu-bytes-to-use" else 1), abs=1)
    elif knob == "kv-offloading-size":
        flag = float(args[args.index("--kv-offloading-size") + 1])
        total = int(flag * (1 << 30))  # vllm 0.33 config/vllm.py:1174
        world = _world(row)
        per_rank = int(float(want) * GiB) // world
        assert total // world == per_rank, (total, world, per_rank)
        assert plan.host_pools[0].configured_gb * _GB == pytest.approx(per_rank, abs=1)
    elif knob == "lmcache-max-local-cpu-size":
        assert float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]) == float(want)
    elif knob == "lmcache-l1-size-gb":
        assert float(config["lmcache-mp"]["l1_size_gb"]) == float(want)
    elif knob == "mooncake-global-segment-gb":
        assert config["mooncake.json"]["global_segment_size"] == _segment_bytes(want)
    elif knob == "host-cache-size":
        assert config["kv_cache_config"]["host_cache_size"] == int(want)
    # 3. weights the launcher keeps in host memory (the MiniMax H100 rows' --cpu-offload-gb,
    # a recipe setting in both sizing modes) are passed and counted
    launched = _flag(_engine_call(rec)["argv"], "--cpu-offload-gb")
    if launched is not None:
        assert args[args.index("--cpu-offload-gb") + 1] == launched
        assert args.count("--cpu-offload-gb") == 1
        assert any(p.name == "weights_cpu_offload" and p.bytes_per_rank == float(launched) * GiB
                   for p in plan.host_pools)


def test_oversubscribing_launcher_size_is_refused_with_the_arithmetic():
    """GLM-5.2 B300 TP8: --hicache-size 270 is 270 + 61.88 indexer + 3.46 draft = 335.34 GB per
    rank (the launcher's own measurement, glm5.2_fp4_b300_sglang_mtp.sh:65-70), 2,683 GB on
    the node against a 2,399 GB budget."""
    rec = next(r for r in ROWS if r["config-key"] == "glm5.2-fp4-b300-sglang-agentic-mtp")
    refused = plan_job(_job(rec), _RUNNERS, sizing="launcher")
    assert refused.is_refused and not refused.accepted
    assert "335.34 GB/rank x 8 rank(s) = 2,683 GB > 2,391 GB usable of the 2,399 GB" in \
        refused.errors[0]
    assert "--force" in refused.errors[-1]
    assert any("per rank: 270.00 (kv) + 61.88 (indexer, outside) + 3.46 (draft_kv, outside) = "
               "335.34 GB" in line for line in refused.arithmetic)
    assert any(line.startswith("kvbench budget sizing") for line in refused.arithmetic)
    budget = plan_job(_job(rec), _RUNNERS)
    assert budget.accepted and budget.sizing == "budget" and budget.launcher is None
    forced = plan_job(_job(rec), _RUNNERS, sizing="launcher", force=True)
    assert forced.accepted and forced.forced and not forced.within_budget
    assert any(w.startswith("--force: launcher sizing oversubscribes") for w in forced.warnings)
    assert forced.to_json()["budget-sizing"]["projected-host-bytes"] == \
        budget.projected_host_bytes


def test_fitting_launcher_size_is_accepted_without_force():
    """Qwen3.5 B300 TP2: (599 - 2) x 15 / 2 / 31 = 144 GB, which the launcher sized to fit."""
    rec = next(r for r in ROWS if r["config-key"] == "qwen3.5-fp8-b300-sglang-agentic-mtp")
    plan = plan_job(_job(rec), _RUNNERS, sizing="launcher")
    assert plan.accepted and not plan.forced, plan.errors
    assert plan.launcher["value"] == 144
    assert "with total_cpu_dram_gb=599, tp=2" in plan.arithmetic[2]


def test_resident_rows_are_unchanged_by_launcher_sizing():
    rec = next(r for r in load_recordings() if r["row"].get("kv-offloading") == "none")
    assert plan_job(_job(rec), _RUNNERS, sizing="launcher").to_json() \
        == plan_job(_job(rec), _RUNNERS).to_json()


def test_a_row_no_launcher_sizes_is_refused_by_name():
    rec = next(r for r in ROWS if r["config-key"] == "qwen3.5-fp8-b300-sglang-agentic-mtp")
    row = dict(rec["row"], **{"model-prefix": "other"})
    plan = plan_job(Job(rec["config-key"], row, "agentic-coding"), _RUNNERS, sizing="launcher")
    assert plan.is_refused
    assert "no InferenceX launcher at 843c6254f sizes a sglang other b300 row with hicache" \
        in plan.errors[0]


def test_every_rule_names_its_launcher_line_and_is_checked_by_a_recording():
    """A rule no recorded row exercises says why (an arm the table does not run); a rule that
    says so but is exercised has gone stale."""
    hit = {plan_job(_job(rec), _RUNNERS, sizing="launcher", force=True).launcher["source"]
           for rec in ROWS}
    for rule in rules():
        assert ".sh:" in rule.source, rule.source
        assert (rule.source in hit) != (rule.unrecorded is not None), rule.source


def test_cli_sizing_launcher_refuses_with_exit_2_and_force_accepts(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    base = [sys.executable, "-m", "kvbench", "plan", "--config-files", *map(str, CONFIGS),
            "--runner-config", str(RUNNERS), "--config-keys",
            "glm5.2-fp4-b300-sglang-agentic-mtp", "--sizing", "launcher"]
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    out = subprocess.run(base, capture_output=True, text=True, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "launcher sizing oversubscribes" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    forced = subprocess.run([*base, "--force", "--format", "json"], capture_output=True,
                            text=True, env=env)
    assert forced.returncode == 0, forced.stderr
    plans = json.loads(forced.stdout)
    assert {p["sizing"] for p in plans} == {"launcher"}
    assert all(p["forced"] and p["launcher"]["value"] == 270 for p in plans)
    bad = subprocess.run([*base[:-1], "launchr"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "allowed: budget, launcher" in bad.stderr
    table = subprocess.run([*base, "--force"], capture_output=True, text=True, env=env)
    assert table.returncode == 0, table.stderr
    assert "budget-sized GB" in table.stdout and "FORCED" in table.stdout
    assert "--force: launcher sizing oversubscribes" in table.stdout
    alone = subprocess.run([*base[:-2], "--force"], capture_output=True, text=True, env=env)
    assert alone.returncode == 2 and "--force applies to --sizing launcher only" in alone.stderr


def test_launcher_ratio_shows_the_device_estimate_beside_the_bound():
    """DSv4 B300 TP4 --hicache-ratio 8: the verdict is on the device-pool bound, as kvbench
    sizes; the estimate is printed beside it (the launcher measured ~1 TB, its comment at
    dsv4_fp4_b300_sglang_mtp.sh:70-73)."""
    rec = next(r for r in ROWS if r["config-key"] == "dsv4-fp4-b300-sglang-agentic-hicache-mtp")
    plan = plan_job(_job(rec), _RUNNERS, sizing="launcher", force=True)
    assert plan.launcher["value"] == 8
    assert any(line.startswith("at the device-pool estimate instead of the bound: 8 x ")
               for line in plan.arithmetic)


def test_launch_dry_run_passes_the_launchers_size():
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS),
           "--config-keys", "qwen3.5-fp8-h100-sglang-agentic-mtp", "--min-conc", "16",
           "--max-conc", "16"]
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}
    sizes = {}
    for mode in ("budget", "launcher"):
        out = subprocess.run([*cmd, "--sizing", mode, "--force"] if mode == "launcher"
                             else cmd, capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        spec = next(s for s in json.loads(out.stdout) if "--hicache-size" in s["argv"])
        sizes[mode] = spec["argv"][spec["argv"].index("--hicache-size") + 1]
    # qwen3.5_fp8_h100_mtp.sh:76: 1731 / 8 / 2 = 108, what the recording holds
    assert sizes["launcher"] == "108" and sizes["budget"] != "108"


def test_run_options_identity_keeps_old_results_and_names_launcher_sizing():
    from kvbench.sweep import RunOptions

    assert "sizing" not in RunOptions().measurement_identity()
    launcher = RunOptions(sizing="launcher", force=True).measurement_identity()
    assert launcher["sizing"] == "launcher" and launcher["force"] is True


def test_run_plan_phase_takes_the_launcher_size_and_refuses_it_unless_forced(tmp_path):
    """`kvbench run --sizing launcher`: the job's plan phase (sweep/job.py) plans with the
    launcher's size, writes it to plan.json, and stops an oversubscribing one unless forced."""
    from kvbench.files import read_json
    from kvbench.sweep import RunOptions, build_specs
    from kvbench.sweep.events import NullEvents
    from kvbench.sweep.job import PhaseFailure, _Run

    rec = next(r for r in ROWS if r["config-key"] == "glm5.2-fp4-b300-sglang-agentic-mtp")
    for force in (False, True):
        options = RunOptions(sizing="launcher", force=force)
        spec = build_specs([_job(rec)], options, runner_config=RUNNERS)[0]
        job_dir = tmp_path / str(force)
        job_dir.mkdir()
        run = _Run(spec, job_dir, NullEvents())
        if not force:
            with pytest.raises(PhaseFailure, match="launcher sizing oversubscribes"):
                run.plan()
        else:
            assert run.plan().forced
        written = read_json(job_dir / "plan.json")
        assert written["sizing"] == "launcher" and written["launcher"]["value"] == 270
        assert written["forced"] is force


def test_launcher_size_stands_beside_a_refused_budget_plan():
    """A budget the planner cannot fit (here: all but 9 GB kept as headroom) still shows what
    the launcher would have run, refused with its own arithmetic."""
    rec = next(r for r in ROWS if r["config-key"] == "glm5.2-fp4-b300-sglang-agentic-mtp")
    assert plan_job(_job(rec), _RUNNERS, host_headroom_gb=2390).is_refused
    plan = plan_job(_job(rec), _RUNNERS, sizing="launcher", host_headroom_gb=2390)
    assert plan.launcher["spelled"] == "--hicache-size 270"
    assert "= 2,683 GB > 9 GB usable of the 2,399 GB DRAM budget" in plan.errors[0]
    assert plan.budget_sizing["within-budget"] is False
