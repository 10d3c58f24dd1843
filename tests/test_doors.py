"""Every door checks the bounds model (issue 40): recipe fields, job files, trace fields,
result files read back, server responses, and the files kvbench edits. Each example the
issue found is refused in one line naming the field, the value and the range (exit 2), or
is a failed request with its reason; never a traceback, a hang, or nonsense accepted."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvbench.cli import main
from kvbench.errors import KvbenchError, WorkloadError

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
RUNNERS = REPO / "examples" / "runners.yaml"
INFERENCEX = REPO / "tests" / "data" / "inferencex"


def run(capsys, argv) -> tuple[int, str]:
    """The exit status and stderr of one in-process command (its stdout: `_last_out`)."""
    global _last_out
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    captured = capsys.readouterr()
    _last_out = captured.out
    assert "Traceback" not in captured.err
    return code, captured.err


_last_out = ""


def first_error(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("error: "))


# ---- recipe fields ------------------------------------------------------------------------

def _recipe(tmp_path: Path, old: str, new: str) -> Path:
    text = QUICKSTART.read_text()
    assert old in text
    path = tmp_path / "recipe.yaml"
    path.write_text(text.replace(old, new, 1))
    shutil.copyfile(RUNNERS, tmp_path / "runners.yaml")
    return path


BACKEND = "kv-offload-backend: { name: hicache }"


@pytest.mark.parametrize("old, new, field, problem", [
    (BACKEND, "kv-offload-backend: { name: hicache, size-gb-per-rank: 1e+300 }",
     "size-gb-per-rank: 1e+300", "out of range (allowed: a number 0 to 65,536 GB per rank"),
    (BACKEND, "kv-offload-backend: { name: hicache, size-gb-per-rank: 1000000.0 }",
     "size-gb-per-rank: 1000000.0", "out of range"),
    ("{ tp: 1,", "{ tp: 2048,", "tp: 2048", "an integer 1 to 1,024 GPUs"),
    ("conc-list: [3, 6, 12] }", "conc-list: [0xfffffffffffffffff] }", "0xfffffffffffffffff",
     "out of range (at most 64 bits)"),
    ("image: kvbench-serve-sim", "image: " + "x" * 70_000, "image",
     "a string of 70,000 characters is too long (allowed: at most 65,536)"),
])
def test_recipe_fields_are_held_to_their_range(tmp_path, capsys, old, new, field, problem):
    recipe = _recipe(tmp_path, old, new)
    for argv in (["validate", recipe], ["plan", "--config-files", recipe, "--runner-config",
                                        tmp_path / "runners.yaml"]):
        code, err = run(capsys, argv)
        line = first_error(err)
        assert code == 2 and field.split(":")[0] in line and problem in line, line
        assert len(line) < 600


def test_runners_facts_are_held_to_their_range(tmp_path, capsys):
    (tmp_path / "runners.yaml").write_text(RUNNERS.read_text().replace(
        "gpus-per-node: 8", "gpus-per-node: 100000"))
    code, err = run(capsys, ["validate", tmp_path / "runners.yaml"])
    assert code == 2 and "gpus-per-node: 100000: out of range" in first_error(err)


def test_tp_must_divide_the_attention_heads(tmp_path, capsys):
    """vLLM and SGLang refuse to start when TP does not divide the heads: every `tp: 3` row
    on an 8-GPU node was planned ok."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(QUICKSTART.read_text().replace("{ tp: 1,", "{ tp: 3,"))
    code, err = run(capsys, ["plan", "--config-files", recipe, "--runner-config", RUNNERS,
                             "--format", "json"])
    assert code == 2 and "every one of the 6 selected plans is refused" in err
    plans = json.loads(_last_out)
    assert all("tp 3 does not divide Qwen3-32B's 64 attention heads" in p["errors"][0]
               for p in plans)


def test_a_single_node_row_with_no_kv_room_is_refused(tmp_path, capsys):
    doc = yaml.safe_load((INFERENCEX / "nvidia-master.yaml").read_text())
    entry = doc["dsv4-fp4-b200-sglang-agentic-hicache-mtp"]
    entry["scenarios"]["agentic-coding"][0]["search-space"] = [
        {"tp": 1, "ep": 1, "conc-list": [4], "kv-offloading": "none", "spec-decoding": "mtp"}]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"dsv4": entry}))
    code, _ = run(capsys, ["plan", "--config-files", tmp_path / "m.yaml", "--runner-config",
                           INFERENCEX / "runners.yaml", "--format", "json"])
    assert code == 2 and "no KV cache fits on the GPU" in json.loads(_last_out)[0]["errors"][0]


SRT = ("benchmarks/multi_node/srt-slurm-recipes/vllm/deepseek-v4/agentic/"
       "agg-gb200-tp8-c4-mtp2-agentic.yaml")


@pytest.mark.parametrize("edit, problem", [
    (lambda r: r["backend"].update(type=685230), "backend.type 685230 must be a string"),
    (lambda r: r["backend"].update(vllm_config=7), "backend.vllm_config 7 must be a mapping"),
    (lambda r: r["frontend"].update(args=7), "frontend.args 7 must be a mapping"),
    (lambda r: r["resources"].update(agg_nodes=10**8), "out of range"),
])
def test_srt_recipe_shapes_and_counts(tmp_path, edit, problem):
    """What kvbench reads from an srt-slurm recipe: a sexagesimal `backend.type` once raised
    KeyError, a huge node count looped for minutes."""
    from kvbench.engines.srt_recipe import load_recipe

    raw = yaml.safe_load((INFERENCEX / SRT).read_text())
    edit(raw)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(KvbenchError, match=re.escape(problem)):
        load_recipe(path, None, "r")


def test_srt_backend_type_must_be_one_srtctl_renders(tmp_path):
    from kvbench.engines.dynamo import worker_program
    from kvbench.engines.srt_recipe import load_recipe

    text = (INFERENCEX / SRT).read_text().replace("type: vllm", "type: 'tape'", 1)
    (tmp_path / "r.yaml").write_text(text)
    with pytest.raises(KvbenchError, match=re.escape("backend.type 'tape' is not a backend")):
        worker_program(load_recipe(tmp_path / "r.yaml", None, "r"))


# ---- job files ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def job_spec() -> dict:
    out = subprocess.run([sys.executable, "-m", "kvbench", "run", str(QUICKSTART), "--emit",
                          "github-matrix", "--max-conc", "3"], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    return json.loads(out.stdout)["include"][1]["job"]


@pytest.mark.parametrize("path, value, problem", [
    ("repeat", 2**63, "out of range (allowed: an integer 0 to 999: repeats are numbered"),
    ("row.tp", 2048, "tp 2048: out of range"),
    ("row.kv-offloading", "tape", "kv-offloading 'tape' is not allowed (allowed: none, dram)"),
    ("row.kv-offload-backend.name", "tape", "kv-offload-backend.name 'tape' is not allowed"),
    ("row.conc", float("nan"), "conc nan: not a finite number"),
    ("options.warmup_requests", 2147483648, "options.warmup_requests: out of range"),
    ("row.image", "x" * 70_000, "a string of 70,000 characters is too long"),
])
def test_job_files_are_held_to_their_range(job_spec, tmp_path, capsys, path, value, problem):
    spec = json.loads(json.dumps(job_spec))
    *parents, last = path.split(".")
    node = spec
    for p in parents:
        node = node[p]
    node[last] = value
    code, err = run(capsys, ["run-job", "--job-json", json.dumps(spec), "--results", tmp_path])
    assert code == 2 and problem in first_error(err), err


def test_a_job_wider_than_its_node_is_refused_at_plan(job_spec):
    from kvbench.plan import plan_job
    from kvbench.recipe import load_runners
    from kvbench.sweep import JobSpec

    # 16 divides Qwen3-32B's 64 heads: the node's 8 GPUs are what refuses it
    spec = JobSpec.model_validate({**job_spec, "row": {**job_spec["row"], "tp": 16}})
    plan = plan_job(spec.job(), load_runners(RUNNERS))
    assert plan.is_refused and any("more than the node's 8" in e for e in plan.errors)


def test_a_fifo_job_file_is_refused_at_once(tmp_path, capsys):
    os.mkfifo(tmp_path / "job.json")
    code, err = run(capsys, ["run-job", "--job-file", tmp_path / "job.json", "--results",
                             tmp_path / "r"])
    assert code == 2 and "not a regular file" in err


# ---- traces -------------------------------------------------------------------------------

@pytest.mark.parametrize("doc, problem", [
    ({"timestamp": 0, "input_length": 10**13, "output_length": 4, "hash_ids": [1]},
     "field input_length 10000000000000: out of range"),
    ({"timestamp": 0, "input_length": 600, "output_length": 10**15, "hash_ids": [1]},
     "field output_length 1000000000000000: out of range"),
    ({"timestamp": 1e300, "input_length": 600, "output_length": 4, "hash_ids": [1]},
     "field timestamp (in seconds)"),
    ({"id": "s", "requests": [{"in": 2**62, "out": 4, "hash_ids": []}]},
     "field requests[0].in 4611686018427387904: out of range"),
    ({"id": "s", "requests": [{"in": 10**9, "out": 4, "hash_ids": []}]},
     "field requests[0].in 1000000000: out of range"),
    ({"id": "s", "requests": [{"in": 9, "out": 4, "hash_ids": [], "think_time": 1e300}]},
     "field requests[0].think_time 1e+300: out of range"),
])
def test_trace_fields_are_held_to_their_range(tmp_path, doc, problem):
    from kvbench.sim import load_trace as sim_load
    from kvbench.workload import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    for load in (load_trace, sim_load):
        with pytest.raises(WorkloadError, match=re.escape(problem)):
            load(path)


def test_rescaled_turns_are_bounded_before_any_prompt_is_built(capsys):
    code, err = run(capsys, ["simulate", "--trace", REPO / "tests/data/traces/claude-code",
                             "--block-tokens", "65536", "--max-requests", "4"])
    assert code == 2 and "longer than any model's context" in first_error(err)


def test_two_files_sharing_a_session_id_keep_their_own_cache(tmp_path):
    """A second file reusing a session id once hit the first file's blocks: the hit rate
    of two unrelated sessions doubled (66.6% vs 33.3%)."""
    from kvbench.workload import load_trace

    doc = {"id": "session-1", "requests": [{"in": 200, "out": 4, "hash_ids": [1, 2, 3]}]}
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(doc))
    a, b = load_trace([tmp_path / "a.json", tmp_path / "b.json"])
    assert a.namespace != b.namespace and a.session_id != b.session_id
    assert a.turns == b.turns


def test_the_prompt_cache_is_bounded_by_tokens():
    from kvbench.workload.prompt import PromptBuilder, PromptStream, Vocabulary
    from kvbench.workload.session import Turn

    builder = PromptBuilder(Vocabulary(), "m", shared_tokens=4096)
    first = PromptStream()  # alive: every later stream of "ns" shares it (a lone one would not)
    builder.json(Turn(1024, 1, (0,), 1024), "ns", 0, first)
    for h in range(64):
        builder.json(Turn(1024, 1, (h,), 1024), "ns", h)
    assert 0 < sum(bs for _ns, _h, bs in builder._shared) <= 4096


# ---- results read back --------------------------------------------------------------------

@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    from fixtures.results_data import make_pair

    return make_pair(tmp_path_factory.mktemp("results"))


@pytest.mark.parametrize("path, value, problem", [
    ("request_metrics.time_scale", -123, "request_metrics.time_scale is -123"),
    ("request_metrics.time_scale", 1e300, "out of range (allowed: a number 0.001 to 10,000 x"),
    ("request_metrics.window_s", 1e300, "request_metrics.window_s is 1e+300: out of range"),
    ("request_metrics.cache.cached_tokens", -5, "cached_tokens is -5"),
    ("cache_reuse.source", None, "cache_reuse: lacks source"),
    ("request_metrics.latency.interactivity_tok_s.p50", 11111111111111111111,
     "interactivity_tok_s.p50 is 11111111111111111111: out of range"),
    ("conc", 10**9, "conc: out of range"),
])
def test_results_read_back_are_held_to_their_range(results_dir, tmp_path, capsys, path, value,
                                                   problem):
    root = tmp_path / "r"
    shutil.copytree(results_dir, root)
    target = sorted(root.rglob("result.json"))[1]
    doc = json.loads(target.read_text())
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    if value is None:
        del node[last]
    else:
        node[last] = value
    target.write_text(json.dumps(doc))
    for argv in (["compare", root], ["report", root, "-o", tmp_path / "d.html"]):
        code, err = run(capsys, argv)
        assert code == 2 and problem in first_error(err), err


# ---- server responses ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_url():
    from fixtures.bad_server import bad_server

    with bad_server() as url:
        yield url


def _replay(capsys, url, tmp_path, model="ok", *extra):
    return run(capsys, ["replay", "--url", url, "--model", model, "--trace", "synthetic",
                        "--sessions", "1", "--output", tmp_path, "--max-requests", "2",
                        "--duration", "2", "--grace", "0.5", *extra])


@pytest.mark.parametrize("mode, kind, reason", [
    ("after-done", "bad_event", "an event after [DONE]"),
    ("second-choice", "bad_event", "has index 1: one choice was asked"),
    ("json-under-sse", "not_a_stream", "a JSON body"),
    ("usage-below-streamed", "bad_usage", "completion_tokens 1 < the 3 tokens streamed"),
    ("usage-prompt-zero", "bad_usage", "prompt_tokens 0"),
    ("usage-prompt-null", "bad_usage", "no prompt_tokens"),
    ("many-headers", "bad_response", "(at most 100 headers"),
])
def test_contradicting_responses_are_failed_requests(bad_url, tmp_path, capsys, mode, kind,
                                                     reason):
    code, _ = _replay(capsys, bad_url, tmp_path, mode)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert code == 3 and records
    for r in records:
        assert r["status"] == "error" and r["error_kind"] == kind and reason in r["error"], r


def test_keepalive_only_streams_stall_and_stop_the_run(bad_url, tmp_path, capsys, monkeypatch):
    from fixtures.bad_server import KEEPALIVE_ONLY

    from kvbench.replay import http

    monkeypatch.setattr(http, "KEEPALIVE_ONLY_S", 0.3)
    code, err = run(capsys, ["replay", "--url", bad_url, "--model", KEEPALIVE_ONLY, "--trace",
                             "synthetic", "--sessions", "4", "--concurrency", "4", "--output",
                             tmp_path, "--grace", "0.5"])
    assert code == 3 and "keep-alives and no token to 3 requests in a row" in err
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and all(r["error_kind"] in ("stalled", "cancelled") or r["status"] ==
                           "cancelled" for r in records)


@pytest.mark.parametrize("url, problem", [
    ("http://[::1", "Invalid IPv6 URL"), ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:0", "port 0: out of range")])
def test_bad_urls_are_one_line(tmp_path, capsys, url, problem):
    code, err = run(capsys, ["replay", "--url", url, "--model", "m", "--trace", "synthetic",
                             "--output", tmp_path])
    assert code == 2 and problem in first_error(err)


def test_a_huge_models_answer_and_a_tiny_clock_end_at_once(bad_url, tmp_path, capsys):
    code, err = run(capsys, ["replay", "--url", bad_url + "/huge", "--trace", "synthetic",
                             "--output", tmp_path])
    assert code == 3 and "cannot read the served model" in err and "past 1 MiB" in err
    code, err = _replay(capsys, bad_url + "/tinyclock", tmp_path)
    assert code == 3 and "the server's clock (X-Kvbench-Time-Scale) 1e-300: out of range" in err


def test_a_huge_metrics_page_is_a_failed_snapshot(bad_url, tmp_path):
    from kvbench.metrics import Scraper

    async def one():
        scraper = Scraper(bad_url + "/hugemetrics/metrics", "vllm", tmp_path / "s.jsonl")
        await scraper.start()
        await scraper.stop()
        return scraper

    scraper = asyncio.run(one())
    assert scraper.num_ok == 0 and scraper.num_failed == 2
    snap = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert "lines (at most 10,000)" in snap["error"]


def test_a_full_disk_stops_the_replay_at_once(bad_url, tmp_path, capsys, monkeypatch):
    """A 48 KB disk filling up once left a sweep in replay past 150 s."""
    from kvbench import files

    real = files.JsonlWriter.write
    count = {"n": 0}

    def write(self, obj):
        count["n"] += 1
        if count["n"] > 1 and self.path.name.startswith("records"):
            raise OSError(28, "No space left on device")
        return real(self, obj)

    monkeypatch.setattr(files.JsonlWriter, "write", write)
    code, err = run(capsys, ["replay", "--url", bad_url, "--model", "ok", "--trace", "synthetic",
                             "--sessions", "2", "--output", tmp_path, "--duration", "30",
                             "--think-time-scale", "0"])
    assert code == 3 and "No space left on device" in first_error(err)


def test_simulate_with_no_completed_request_is_an_error(capsys):
    code, err = run(capsys, ["simulate", "--trace", REPO / "tests/data/traces/claude-code",
                             "--duration", "0.001"])
    assert code == 2 and "completed no request" in first_error(err)


# ---- the changelog and the files recipe mirror edits --------------------------------------

LINK = "https://github.com/SemiAnalysisAI/InferenceX/pull/"


@pytest.mark.parametrize("field, value", [
    ("pr-link", "javascript:alert(1)"), ("pr-link", ""), ("pr-link", LINK + "1\n- x: y"),
    ("pr-link", LINK + "1" * 25), ("pr-link", LINK + "\uff11\uff12"),
    ("pr-link", LINK + "\u0661\u0662"), ("description", ["\x1b[31mred\x1b[0m"]),
    ("evals-only", "true"),
])
def test_changelog_entries_refuse_nonsense(field, value):
    from pydantic import ValidationError

    from kvbench.changelog.entry import ChangelogEntry

    entry = {"config-keys": ["k"], "description": ["d"], "pr-link": LINK + "1", field: value}
    with pytest.raises(ValidationError):
        ChangelogEntry.model_validate(entry)
    ChangelogEntry.model_validate({**entry, field: {"pr-link": LINK + "2/changes",
                                                    "description": ["ok\tfine"],
                                                    "evals-only": True}[field]})


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    (tmp_path / "configs").mkdir()
    for name in ("amd-master.yaml", "runners.yaml"):
        shutil.copyfile(INFERENCEX / name, tmp_path / "configs" / name)
    shutil.copyfile(INFERENCEX / "perf-changelog.yaml", tmp_path / "perf-changelog.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


AMD_KEY = "qwen3.5-fp8-mi325x-sglang-agentic-mtp"


def test_mirror_refuses_a_bad_pr_link(repo, capsys):
    code, err = run(capsys, ["recipe", "mirror", "--config-keys", AMD_KEY, "--pr-link",
                             "javascript:alert(1)"])
    assert code == 2 and "--pr-link: pr-link: pr-link 'javascript:alert(1)'" in err


def test_mirror_refuses_rows_shared_by_anchors(repo, capsys):
    master = repo / "configs" / "amd-master.yaml"
    text = master.read_text()
    start = text.index(f"{AMD_KEY}:")
    row = text.index("      - { tp: 2", start)
    text = text[:row] + text[row:].replace("      - { tp: 2", "      - &shared { tp: 2", 1)
    # used again as a merge key's source in the same search space
    end = text.index("\n", text.index("&shared", start))
    master.write_text(text[:end] + "\n      - { <<: *shared, conc-list: [2] }" + text[end:])
    code, err = run(capsys, ["recipe", "mirror", "--config-keys", AMD_KEY, "--config-files",
                             master, "--no-changelog"])
    assert code == 2 and "is the YAML anchor &shared" in err
    assert "<<: *shared" in master.read_text()


def test_mirror_edits_a_symlinked_master_and_changelog_at_their_target(repo, capsys):
    for name in ("configs/amd-master.yaml", "perf-changelog.yaml"):
        real = repo / "real" / name
        real.parent.mkdir(parents=True, exist_ok=True)
        (repo / name).rename(real)
        (repo / name).symlink_to(real)
    code, err = run(capsys, ["recipe", "mirror", "--config-keys", AMD_KEY])
    assert code == 0, err
    for name in ("configs/amd-master.yaml", "perf-changelog.yaml"):
        assert (repo / name).is_symlink()
    assert "kv-offloading: dram" in (repo / "real/configs/amd-master.yaml").read_text()
    assert AMD_KEY in (repo / "real/perf-changelog.yaml").read_text()[-2000:]


def test_two_mirrors_at_once_keep_both_edits(repo):
    """Two runs on one master file (different keys) and one changelog: each waits for the
    other's lock, so neither edit is written away (about 10 s: two CLI processes)."""
    keys = [AMD_KEY, "qwen3.5-fp4-mi355x-sglang-agentic-mtp"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [subprocess.Popen([sys.executable, "-m", "kvbench", "recipe", "mirror",
                               "--config-keys", key, "--config-files",
                               "configs/amd-master.yaml"], cwd=repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for key in keys]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    doc = yaml.safe_load((repo / "configs" / "amd-master.yaml").read_text())
    log = yaml.safe_load((repo / "perf-changelog.yaml").read_text())
    for key in keys:
        rows = doc[key]["scenarios"]["agentic-coding"][0]["search-space"]
        assert any(r.get("kv-offloading") == "dram" for r in rows), key
        assert any(e["config-keys"] == [key] for e in log[-2:]), key
