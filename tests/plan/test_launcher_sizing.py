"""Launcher sizing (the default) reproduces each InferenceX launcher's host-pool arithmetic on
every recorded row: `kvbench plan --format json` with no sizing flag gives the value the
launcher passed (recorded by benchmarks/launcher_oracle/record.py into
tests/engines/data/launcher_oracle/), and the plan's engine-facing flag, variable or file field
gives the engine exactly those bytes. Beside it the planner's verdict: refused only where the
projected footprint exceeds the row's DRAM budget, unless forced; kvbench's own headroom
warns."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
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


RECORDINGS = load_recordings()


def _offload_rows() -> list[dict[str, Any]]:
    return [r for r in RECORDINGS
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
_SRC = Path(__file__).resolve().parents[2] / "src"
_ENV = {"PYTHONPATH": str(_SRC), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}


def _job(rec: dict[str, Any]) -> Job:
    return Job(rec["config-key"], rec["row"], "agentic-coding")


@pytest.fixture(scope="module")
def default_plans() -> dict[tuple[str, str, int], dict[str, Any]]:
    """`kvbench plan --format json` with no sizing flag on the project's InferenceX configs,
    by (config key, exp-name, occurrence): the generator's order, as the recordings'."""
    out = subprocess.run([sys.executable, "-m", "kvbench", "plan", "--config-files",
                          *map(str, CONFIGS), "--runner-config", str(RUNNERS),
                          "--scenario-type", "agentic-coding", "--format", "json"],
                         capture_output=True, text=True, env=_ENV, check=True)
    seen: Counter = Counter()
    plans = {}
    for plan in json.loads(out.stdout):
        key = (plan["config-key"], plan["exp-name"])
        plans[(*key, seen[key])] = plan
        seen[key] += 1
    return plans


def _plan_of(rec: dict[str, Any], plans: dict) -> dict[str, Any]:
    recs = [r for r in RECORDINGS if r["config-key"] == rec["config-key"]
            and r["row"]["exp-name"] == rec["row"]["exp-name"]]
    index = next(i for i, r in enumerate(recs) if r["row"] == rec["row"])
    return plans[(rec["config-key"], rec["row"]["exp-name"], index)]


def test_every_recorded_offload_row_is_launcher_sized_by_default(default_plans):
    """Every single-node agentic offload row whose launcher exists is sized as its launcher
    sizes it, with no flag; a row no launcher starts (the qwen3.5 H100 rows without MTP) is
    budget-sized and says why."""
    assert len(ROWS) == 170  # at 843c6254f
    missing = [f"{r['config-key']} {row_id(r['row'])}" for r in ROWS
               if _plan_of(r, default_plans)["sizing"] != "launcher"]
    assert not missing, "\n".join(missing)
    launcher_sized = Counter(p["config-key"] for p in default_plans.values()
                             if p["sizing"] == "launcher")
    assert sum(launcher_sized.values()) == len(ROWS)
    unlaunched = [r for r in RECORDINGS if not r["launcher"]
                  and r["row"].get("kv-offloading") == "dram"]
    assert unlaunched  # the qwen3.5 H100 rows without MTP
    for rec in unlaunched:
        plan = _plan_of(rec, default_plans)
        assert plan["sizing"] == "budget"
        assert any(w.startswith("no InferenceX launcher at 843c6254f sizes") for w in
                   plan["warnings"])


@pytest.mark.parametrize("rec", ROWS, ids=lambda r: f"{r['config-key']}[{row_id(r['row'])}]")
def test_launcher_value_and_engine_bytes_match_the_recording(rec, default_plans):
    plan = _plan_of(rec, default_plans)
    knob = plan["launcher"]["knob"]
    value = plan["launcher"]["value"]
    want = recorded(rec, knob)
    assert want is not None, f"the recording has no {knob}"
    # 1. the rule's arithmetic gives what the launcher passed, as it spelled it
    spelled = KNOBS[knob].spelling.format(v=f"{value:g}" if isinstance(value, float) else value)
    if knob == "mooncake-global-segment-gb":
        assert f'"{want}"' in spelled or str(want) in spelled, (spelled, want)
    else:
        assert float(want) == float(value), (knob, want, value)
    assert plan["launcher"]["spelled"] == spelled
    # 2. what kvbench hands the engine gives it exactly those bytes
    args, env, config = plan["engine-args"], plan["engine-env"], plan["engine-config"]
    pool = plan["host-pools"][0]
    row = rec["row"]
    if knob in ("hicache-size", "hicache-ratio"):
        assert float(args[args.index(f"--{knob}") + 1]) == float(want)
    elif knob in ("cpu-bytes-to-use", "cpu-bytes-to-use-per-rank"):
        # SimpleCPUOffloadConnector named in --kv-transfer-config, as the launchers do
        extra = config["kv-transfer-config"]["kv_connector_extra_config"]
        assert "--kv-offloading-size" not in args
        assert extra == {knob.replace("-", "_"): int(want)}, (extra, want)
        assert pool["configured-gb"] * _GB == pytest.approx(
            int(want) // (_world(row) if knob == "cpu-bytes-to-use" else 1), abs=1)
    elif knob == "kv-offloading-size":
        flag = float(args[args.index("--kv-offloading-size") + 1])
        total = int(flag * (1 << 30))  # vllm 0.33 config/vllm.py:1174
        world = _world(row)
        per_rank = int(float(want) * GiB) // world
        assert total // world == per_rank, (total, world, per_rank)
        assert pool["configured-gb"] * _GB == pytest.approx(per_rank, abs=1)
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
        assert any(p["name"] == "weights_cpu_offload"
                   and p["bytes-per-rank"] == float(launched) * GiB
                   for p in plan["host-pools"])
    # 4. refused exactly where the projected footprint exceeds the row's budget, with the
    # arithmetic; kvbench's own headroom is at most a warning
    budget = plan["total-cpu-dram-gb"] * _GB
    over = plan["projected-host-bytes"] > budget
    assert plan["within-budget"] is not over
    assert bool(plan["errors"]) is over, plan["errors"]
    if over:
        assert plan["errors"][0].startswith("launcher sizing oversubscribes: ")
        assert f"> the {plan['total-cpu-dram-gb']:,} GB DRAM budget" in plan["errors"][0]
        assert f"{plan['projected-host-bytes'] / _GB:,.0f} GB" in plan["errors"][0]
    # 5. the other sizing's bytes beside it
    assert plan["budget-sizing"]["projected-host-bytes"] > 0


def test_refusals_are_the_oversubscriptions_only(default_plans):
    """Of the 170 rows, those refused project more than their budget; rows within it but
    inside kvbench's 1 GB/rank headroom run, with a warning."""
    plans = [_plan_of(r, default_plans) for r in ROWS]
    refused = [p for p in plans if p["errors"]]
    assert refused and all(p["projected-host-bytes"] > p["total-cpu-dram-gb"] * _GB
                           for p in refused)
    tight = [p for p in plans if not p["errors"] and any(
        "less than kvbench's host headroom" in w for w in p["warnings"])]
    assert tight  # e.g. DSv4 vLLM: TOTAL x 1e9 / ranks, the budget to the byte
    assert all(p["projected-host-bytes"] <= p["total-cpu-dram-gb"] * _GB for p in tight)
    assert (len(refused), len(tight)) == (64, 18), (len(refused), len(tight))


def test_oversubscribing_launcher_size_is_refused_with_the_arithmetic():
    """GLM-5.2 B300 TP8: --hicache-size 270 is 270 + 61.88 indexer + 3.46 draft = 335.34 GB per
    rank (the launcher's own measurement, glm5.2_fp4_b300_sglang_mtp.sh:65-70), 2,683 GB on
    the node against a 2,399 GB budget."""
    rec = next(r for r in ROWS if r["config-key"] == "glm5.2-fp4-b300-sglang-agentic-mtp")
    refused = plan_job(_job(rec), _RUNNERS)
    assert refused.sizing == "launcher"
    assert refused.is_refused and not refused.accepted
    assert "335.34 GB/rank x 8 rank(s) = 2,683 GB > the 2,399 GB DRAM budget" in \
        refused.errors[0]
    assert "--force" in refused.errors[-1]
    assert any("per rank: 270.00 (kv) + 61.88 (indexer, outside) + 3.46 (draft_kv, outside) = "
               "335.34 GB" in line for line in refused.arithmetic)
    assert any(line.startswith("kvbench budget sizing") for line in refused.arithmetic)
    budget = plan_job(_job(rec), _RUNNERS, sizing="budget")
    assert budget.accepted and budget.sizing == "budget" and budget.launcher is None
    # the budget plan shows the launcher's bytes beside its own
    assert budget.to_json()["launcher-sizing"]["projected-host-bytes"] == \
        refused.projected_host_bytes
    forced = plan_job(_job(rec), _RUNNERS, force=True)
    assert forced.accepted and forced.forced and not forced.within_budget
    assert any(w.startswith("--force: launcher sizing oversubscribes") for w in forced.warnings)
    assert forced.to_json()["budget-sizing"]["projected-host-bytes"] == \
        budget.projected_host_bytes


def test_fitting_launcher_size_is_accepted_without_force():
    """Qwen3.5 B300 TP2: (599 - 2) x 15 / 2 / 31 = 144 GB, which the launcher sized to fit."""
    rec = next(r for r in ROWS if r["config-key"] == "qwen3.5-fp8-b300-sglang-agentic-mtp")
    plan = plan_job(_job(rec), _RUNNERS)
    assert plan.accepted and not plan.forced, plan.errors
    assert plan.launcher["value"] == 144
    assert "with total_cpu_dram_gb=599, tp=2" in plan.arithmetic[2]


def test_a_size_within_the_budget_but_not_kvbench_headroom_runs_with_a_warning():
    """DSv4 B300 vLLM TP8: TOTAL_CPU_DRAM_GB x 1e9 / 8 per rank is the budget to the byte;
    kvbench's 1 GB/rank headroom would refuse it (--sizing budget keeps that headroom)."""
    rec = next(r for r in ROWS if r["config-key"] == "dsv4-fp4-b300-vllm-agentic-mtp"
               and r["row"]["tp"] == 8)
    plan = plan_job(_job(rec), _RUNNERS)
    assert plan.accepted and plan.within_budget and not plan.forced, plan.errors
    assert plan.projected_host_bytes == 2849 * _GB
    assert any(w.startswith("launcher sizing leaves 0.00 GB of the 2,849 GB budget free, less "
                            "than kvbench's host headroom of 8 GB") for w in plan.warnings)
    budget = plan_job(_job(rec), _RUNNERS, sizing="budget")
    assert budget.projected_host_bytes <= (2849 - 8) * _GB


def test_dsv4_ratio_takes_the_launchers_measurement_beside_the_estimate():
    """DSv4 B300 TP4 --hicache-ratio 8: the launcher measured ~1 TB on the node
    (dsv4_fp4_b300_sglang_mtp.sh:71-72), a device pool of 31.25 GB per rank; kvbench's
    estimate (the memory free before the weights x fraction - the weights loaded, the MTP
    draft's own embedding and head among them, less SGLang's MTP draft share) is beside it,
    and the verdict is on the measurement: 1,000 GB of a 1,199 GB budget."""
    rec = next(r for r in ROWS if r["config-key"] == "dsv4-fp4-b300-sglang-agentic-hicache-mtp")
    plan = plan_job(_job(rec), _RUNNERS)
    assert plan.accepted and plan.launcher["value"] == 8, plan.errors
    assert plan.launcher["measured"]["applies"] is True
    assert plan.projected_host_bytes == pytest.approx(1000 * _GB, rel=1e-6)
    text = "\n".join(plan.arithmetic)
    assert "less the MTP draft worker's share (SGLang DSV4PoolConfigurator: x 61/62)" in text
    assert "TP4 ratio=8 near 1 TB" in text and "-> 1,000 GB pinned on the node" in text
    assert "at the device-pool estimate: 8 x the device pools = 369.85 GB per rank" in text


def test_a_measurement_without_a_figure_is_shown_and_the_estimate_judges():
    """DSv4 B200 TP8 --hicache-ratio 8: the launcher says it "stays below the configured
    host-memory capacity" (dsv4_fp4_b200_sglang_mtp.sh:70-71) without a figure; kvbench's
    estimate (8 x 44.08 GB device pools) is 2,821 GB on a 2,399 GB budget: refused, and the
    claim stands beside the arithmetic."""
    rec = next(r for r in ROWS if r["config-key"] == "dsv4-fp4-b200-sglang-agentic-hicache-mtp")
    plan = plan_job(_job(rec), _RUNNERS)
    assert plan.is_refused and "2,821 GB > the 2,399 GB DRAM budget" in plan.errors[0]
    assert any("stays below the configured host-memory capacity" in line
               and "no figure: the verdict keeps the estimate" in line
               for line in plan.arithmetic)


def test_resident_rows_are_unchanged_by_the_sizing():
    rec = next(r for r in RECORDINGS if r["row"].get("kv-offloading") == "none")
    plan = plan_job(_job(rec), _RUNNERS)
    assert plan.sizing is None  # no host pool: no sizing ran
    assert plan.to_json() == plan_job(_job(rec), _RUNNERS, sizing="budget").to_json()


def test_a_row_no_launcher_sizes_is_budget_sized_with_the_reason():
    rec = next(r for r in ROWS if r["config-key"] == "qwen3.5-fp8-b300-sglang-agentic-mtp")
    row = dict(rec["row"], **{"model-prefix": "other"})
    plan = plan_job(Job(rec["config-key"], row, "agentic-coding"), _RUNNERS)
    assert plan.accepted and plan.sizing == "budget" and plan.launcher is None
    assert "no InferenceX launcher at 843c6254f sizes a sglang other b300 hicache row" \
        in plan.warnings[-1]


def test_every_rule_names_its_launcher_line_and_is_checked_by_a_recording():
    """A rule no recorded row exercises says why (an arm the table does not run); a rule that
    says so but is exercised has gone stale."""
    hit = {plan_job(_job(rec), _RUNNERS).launcher["source"] for rec in ROWS}
    for rule in rules():
        assert ".sh:" in rule.source, rule.source
        assert (rule.source in hit) != (rule.unrecorded is not None), rule.source
        if rule.measured is not None:
            assert ".sh:" in rule.measured.source and rule.measured.says


def test_cli_refuses_only_the_oversubscription_and_force_accepts():
    base = [sys.executable, "-m", "kvbench", "plan", "--config-files", *map(str, CONFIGS),
            "--runner-config", str(RUNNERS), "--config-keys",
            "glm5.2-fp4-b300-sglang-agentic-mtp"]
    out = subprocess.run(base, capture_output=True, text=True, env=_ENV)
    assert out.returncode == 2, out.stdout + out.stderr  # every selected plan is refused
    assert "launcher sizing oversubscribes" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    forced = subprocess.run([*base, "--force", "--format", "json"], capture_output=True,
                            text=True, env=_ENV)
    assert forced.returncode == 0, forced.stderr
    plans = [p for p in json.loads(forced.stdout) if p["backend"]]
    assert {p["sizing"] for p in plans} == {"launcher"}
    assert all(p["forced"] and p["launcher"]["value"] == 270 for p in plans)
    bad = subprocess.run([*base, "--sizing", "launchr"], capture_output=True, text=True,
                         env=_ENV)
    assert bad.returncode == 2 and "allowed: launcher, budget" in bad.stderr
    table = subprocess.run([*base, "--force"], capture_output=True, text=True, env=_ENV)
    assert table.returncode == 0, table.stderr
    assert "other sizing GB" in table.stdout and "budget 2,385" in table.stdout
    assert "FORCED" in table.stdout and "--force: launcher sizing oversubscribes" in table.stdout
    budget = subprocess.run([*base, "--sizing", "budget"], capture_output=True, text=True,
                            env=_ENV)
    assert budget.returncode == 0 and "launcher 2,683" in budget.stdout, budget.stderr
    alone = subprocess.run([*base, "--sizing", "budget", "--force"], capture_output=True,
                           text=True, env=_ENV)
    assert alone.returncode == 2 and "--force applies to launcher sizing only" in alone.stderr


def test_launch_dry_run_passes_the_launchers_size():
    """GLM-5.2 B200 at conc 8: the launcher runs --hicache-ratio 0.75
    (glm5.2_fp4_b200_sglang_mtp.sh:133,148,167), the budget sizing a fixed --hicache-size."""
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS),
           "--config-keys", "glm5.2-fp4-b200-sglang-agentic-mtp", "--min-conc", "8",
           "--max-conc", "8"]
    argv = {}
    for mode in ("launcher", "budget"):
        out = subprocess.run([*cmd, "--sizing", mode] if mode == "budget" else cmd,
                             capture_output=True, text=True, env=_ENV)
        assert out.returncode == 0, out.stderr
        argv[mode] = next(s["argv"] for s in json.loads(out.stdout)
                          if "--enable-hierarchical-cache" in s["argv"])
    launcher, budget = argv["launcher"], argv["budget"]
    assert launcher[launcher.index("--hicache-ratio") + 1] == "0.75"
    assert "--hicache-size" not in launcher and "--hicache-ratio" not in budget
    assert budget[budget.index("--hicache-size") + 1] == "240"


def test_run_options_identity_names_the_sizing():
    from kvbench.sweep import RunOptions

    # results measured before launcher sizing existed were budget-sized: their identity stays
    assert "sizing" not in RunOptions(sizing="budget").measurement_identity()
    assert RunOptions().measurement_identity()["sizing"] == "launcher"
    launcher = RunOptions(force=True).measurement_identity()
    assert launcher["sizing"] == "launcher" and launcher["force"] is True


def test_run_plan_phase_takes_the_launcher_size_and_refuses_it_unless_forced(tmp_path):
    """`kvbench run`: the job's plan phase (sweep/job.py) plans with the launcher's size,
    writes it to plan.json, and stops an oversubscribing one unless forced."""
    from kvbench.files import read_json
    from kvbench.sweep import RunOptions, build_specs
    from kvbench.sweep.events import NullEvents
    from kvbench.sweep.job import PhaseFailure, _Run

    rec = next(r for r in ROWS if r["config-key"] == "glm5.2-fp4-b300-sglang-agentic-mtp")
    for force in (False, True):
        options = RunOptions(force=force)
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
    assert plan_job(_job(rec), _RUNNERS, sizing="budget", host_headroom_gb=2390).is_refused
    plan = plan_job(_job(rec), _RUNNERS, host_headroom_gb=2390)
    assert plan.launcher["spelled"] == "--hicache-size 270"
    assert "= 2,683 GB > the 2,399 GB DRAM budget" in plan.errors[0]
    assert plan.budget_sizing["within-budget"] is False
