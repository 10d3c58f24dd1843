"""`kvbench run` replays a row with an InferenceX exp-name as AgentX by default (issue 34 item
3): the same rows launcher sizing is the default for (plan/topology.py `inferencex_row`), so a
kvbench run of such a row is the published experiment; kvbench's own rows (the embedded
engine's: the quickstart, examples/) keep kvbench's own replay; `--profile none` opts out. The
profile travels in every job's file (Slurm, CI matrix, run-job), is part of its identity, and
a result of one profile never resumes a job of another."""

from __future__ import annotations

import json

import orjson
import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.cli import main
from kvbench.matrix import Selection, select_jobs
from kvbench.plan import plan_job
from kvbench.recipe import load_runners
from kvbench.sweep import JobSpec, RunOptions, build_specs, job_fingerprint, layout
from kvbench.sweep.quickstart import RECIPE

KEY = "dsv4-fp4-b200-vllm-agentic-mtp"


@pytest.fixture(scope="module")
def jobs():
    """One InferenceX row (resident and offload arms at its lowest concurrency) and the
    quickstart's two arms at its lowest concurrency."""
    ix = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS, config_keys=(KEY,),
                               max_conc=4))
    own = select_jobs(Selection(config_files=(RECIPE,), runner_config=RECIPE.parent /
                                "runners.yaml", max_conc=3))
    assert ix and own
    return ix, own


def test_inferencex_rows_replay_agentx_by_default_as_they_are_launcher_sized(jobs):
    ix, own = jobs
    specs = build_specs([*ix, *own], RunOptions(bundled_traces=True), runner_config=RUNNERS)
    by_name = {s.exp_name: s.options for s in specs}
    assert {by_name[j.exp_name].profile for j in ix} == {"agentx-v1"}
    assert {by_name[j.exp_name].profile for j in own} == {"none"}
    # one notion: the rows launcher sizing is the default for are the rows AgentX is
    runners = load_runners(RUNNERS)
    offload = next(j for j in ix if j.kv_offloading == "dram")
    assert plan_job(offload, runners).sizing == "launcher"
    quick = next(j for j in own if j.kv_offloading == "dram")
    assert "no InferenceX launcher" in " ".join(plan_job(quick).warnings)
    # the replay each job sends: AgentX's warm-up, start, seed and caps for the InferenceX row
    # (the profiling phase is the row's duration, as InferenceX passes it)
    work = by_name[offload.exp_name].replay_workload(offload.conc, offload.row["duration"])
    assert work["warmup_per_lane"] == 10 and work["seed"] == 42 and work["start"] == "sampled"
    assert work["duration_s"] == offload.row["duration"] == 3600
    assert work["profile"] == "agentx-v1"
    assert "profile" not in by_name[quick.exp_name].replay_workload(3, 3600.0)
    # --profile none opts every row out; --profile agentx puts every row under it
    assert {s.options.profile for s in build_specs(
        [*ix, *own], RunOptions(profile="none"))} == {"none"}
    assert {s.options.profile for s in build_specs(
        [*ix, *own], RunOptions(profile="agentx"))} == {"agentx-v1"}


def test_the_profile_is_part_of_the_jobs_identity(jobs):
    ix, _ = jobs
    row = ix[0].row
    default, none = RunOptions(), RunOptions(profile="none")
    # no profile: the identity results measured before the profile counted have
    assert "profile" not in none.measurement_identity()
    assert none.options_id() == default.options_id()
    # AgentX under either name is one identity, another than kvbench's own replay
    assert RunOptions(profile="agentx").options_id() == \
        RunOptions(profile="agentx-v1").options_id() != none.options_id()
    assert job_fingerprint(row, default.for_row(row)) != job_fingerprint(row, none)
    assert job_fingerprint(row, default.for_row(row)) == job_fingerprint(
        row, RunOptions(profile="agentx").for_row(row))


def _result(job_dir, fingerprint: str, profile: str | None = None) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    result = {"fingerprint": fingerprint, "status": "ok",
              "validity": {"valid": True, **({"submission": {"profile": profile}}
                                             if profile else {})}}
    (job_dir / layout.RESULT_FILE).write_bytes(orjson.dumps(result))


def test_a_result_of_another_profile_never_resumes_a_job(jobs, tmp_path):
    """Results written before the profile was part of the fingerprint: a default run of an
    InferenceX row (no profile) and a `--profile agentx` run both had the fingerprint a run
    without a profile has now."""
    ix, _ = jobs
    job = ix[0]
    [agentx] = build_specs([job], RunOptions())
    [none] = build_specs([job], RunOptions(profile="none"))
    before = job_fingerprint(job.row, RunOptions(), job.config_key)  # no profile in it then
    assert none.fingerprint == before != agentx.fingerprint

    def done(spec) -> bool:
        return layout.is_done(tmp_path / "d", spec.fingerprint,
                              profile=spec.options.profile_name)

    _result(tmp_path / "d", before)  # the old default: the same as --profile none
    assert done(none) and not done(agentx)
    _result(tmp_path / "d", before, profile="agentx-v1")  # an old --profile agentx run
    assert not done(none) and not done(agentx)
    _result(tmp_path / "d", agentx.fingerprint, profile="agentx-v1")
    assert done(agentx) and not done(none)


def test_run_says_the_default_once_and_runs_a_short_duration(capsys):
    """The CI-matrix executor's input: every entry carries its job's profile (run-job runs
    what the entry says); the default is said once a sweep, and a --duration below AgentX's
    minimum is run (its results say they are no submission), said in one line."""
    args = ["run", str(CONFIGS[1]), "--runner-config", str(RUNNERS), "--config-keys", KEY,
            "--max-conc", "4", "--emit", "github-matrix", "--repeat", "2"]
    main([*args, "--duration", "60"])
    out = capsys.readouterr()
    entries = json.loads(out.out)["include"]
    assert len(entries) == 4
    for entry in entries:
        spec = JobSpec.model_validate_json(json.dumps(entry["job"]))
        assert spec.options.profile == "agentx-v1" and spec.options.duration_s == 60
        work = spec.options.replay_workload(spec.job().conc, 3600.0)
        assert work["duration_s"] == 60 and work["warmup_per_lane"] == 10
    lines = out.err.splitlines()
    said = [ln for ln in lines if "carry an InferenceX exp-name" in ln]
    assert said == ["2 of 2 jobs carry an InferenceX exp-name and replay the AgentX workload "
                    "as InferenceX publishes it (agentx-v1: the harness's warm-up, then the "
                    "row's profiling phase, subagents alongside their parent, seed 42); "
                    "--profile none replays them without it"]
    short = [ln for ln in lines if ln.startswith("agentx-v1: ")]
    assert len(short) == 1 and "--duration 60 s is below AgentX's 900 s minimum" in short[0]
    assert "bundled Claude Code sessions are no AgentX corpus" in short[0]
    main([*args, "--profile", "none"])
    out = capsys.readouterr()
    assert {e["job"]["options"]["profile"] for e in json.loads(out.out)["include"]} == {"none"}
    assert "agentx" not in out.err.lower()


def test_an_unknown_profile_is_refused_before_any_job(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", str(RECIPE), "--profile", "agentx-v2", "--emit", "github-matrix"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--profile 'agentx-v2' is not a validity profile (allowed: agentx, agentx-v1, none)" \
        in err and "Traceback" not in err


def test_a_job_file_from_before_keeps_running_as_it_was_written(jobs):
    """A job.json (Slurm task, CI matrix entry) written before profiles were resolved per row
    has `profile: null`: it ran kvbench's own replay, and still does."""
    ix, _ = jobs
    [spec] = build_specs([ix[0]], RunOptions(profile="none"))
    old = json.loads(spec.model_dump_json())
    old["options"]["profile"] = None
    again = JobSpec.model_validate(old)
    assert again.options.profile_name is None
    assert "profile" not in again.options.replay_workload(4, 3600.0)
    assert again.options.options_id() == spec.options.options_id()


def test_the_replay_timeout_leaves_room_for_the_profiles_warm_up(jobs):
    """AgentX gives the warm-up up to 1800 s before the profiling phase: a default timeout
    of duration + grace + 5 min would end an hour's GPU run whose warm-up took six minutes."""
    from kvbench.replay import ReplayConfig
    from kvbench.sweep.job import REPLAY_MARGIN_S, replay_timeout_s

    ix, _ = jobs
    job = ix[0]
    for profile, warmup_grace in (("agentx", 1800.0), ("none", 0.0)):
        work = RunOptions(profile=profile).replay_workload(job.conc, job.row["duration"])
        cfg = ReplayConfig(url="http://x", model="m", output_dir=".", **work)
        assert replay_timeout_s(cfg) == warmup_grace + 3600 + cfg.grace_s + REPLAY_MARGIN_S


def test_the_harness_marker_is_part_of_the_identity_and_old_agentx_results_keep_theirs(jobs):
    """Under agentx a chat replay opens each session tree with the harness's `[rid:...]`
    marker (replay/lanes.py `tree_markers`): other prompts than the per-run marker that
    agentx jobs ran with before, so the job says which (`cache_bust`), and a result of the
    other marker neither pools with it in compare nor resumes it. A job file written before
    the key existed reads as the per-run marker with the identity it had."""
    ix, _ = jobs
    (spec,) = build_specs(ix[:1], RunOptions(bundled_traces=True), runner_config=RUNNERS)
    assert (spec.options.profile, spec.options.cache_bust) == ("agentx-v1", "tree")
    before = spec.options.model_copy(update={"cache_bust": None})
    assert "cache_bust" not in before.measurement_identity()
    assert spec.options.measurement_identity()["cache_bust"] == "tree"
    assert spec.options.options_id() != before.options_id()
    old = json.loads(spec.options.model_dump_json(exclude={"cache_bust"}))
    assert RunOptions.model_validate(old).options_id() == before.options_id()
    # the completions endpoint and --profile none keep kvbench's per-run marker
    for options in (RunOptions(bundled_traces=True, endpoint="completions"),
                    RunOptions(bundled_traces=True, profile="none")):
        (s,) = build_specs(ix[:1], options, runner_config=RUNNERS)
        assert s.options.cache_bust is None
