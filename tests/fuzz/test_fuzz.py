"""Fuzzing the error boundary (hypothesis): recipes, runners files, traces and CLI argv,
mutated as a hostile user would. Every input ends in success or in one clean error (exit 2
through the CLI, or a KvbenchError from the loader) that names the file, the field and the
bad value; never a traceback. The suite counts what it tried and prints the figures at the
end (recorded in docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from fixtures.alarm import CASE_LIMIT_S, bounded
from fixtures.mutation import leaf_paths, mutate
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvbench.cli import main
from kvbench.errors import KvbenchError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
RUNNERS = yaml.safe_load((REPO / "examples" / "runners.yaml").read_text())
SESSION = {"id": "s1", "block_size": 64, "hash_id_scope": "local", "requests": [
    {"t": 0.0, "type": "n", "in": 130, "out": 10, "hash_ids": [1, 2], "think_time": 0.5},
    {"t": 3.0, "type": "n", "in": 200, "out": 5, "hash_ids": [1, 2, 3], "think_time": 1.0},
    {"t": 9.0, "type": "subagent", "agent_id": "a1", "think_time": 0.2, "requests": [
        {"t": 9.0, "type": "n", "in": 70, "out": 4, "hash_ids": [9, 10]}]},
]}
MOONCAKE_ROW = {"timestamp": 1000, "input_length": 600, "output_length": 20,
                "hash_ids": [1, 2]}

FIGURES: Counter = Counter()
# derandomized (the same inputs every run, CI-stable) and no shrinking (a failure is
# reported as found, quickly).
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

def dump_yaml(doc) -> str:
    """YAML text of `doc`; integers past Python's 4,300-digit str limit are written too (the
    limit is lifted only while the test writes the file, never while kvbench reads it)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    finally:
        sys.set_int_max_str_digits(limit)


def run_cli(capsys, argv: list[str]):
    """The CLI's exit status and captured (out, err); any exception other than SystemExit
    is a traceback (re-raised, failing the test)."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr()


def check_clean(kind: str, code: int, err: str, *, names: tuple[str, ...] = ()) -> None:
    FIGURES[f"{kind} inputs"] += 1
    assert "Traceback" not in err
    if code == 0:
        FIGURES[f"{kind} accepted"] += 1
        return
    assert code == 2, err
    # warnings (a runner label missing from runners.yaml) may come first
    first = next((line for line in err.splitlines() if line.startswith("error: ")), None)
    assert first is not None, err
    assert len(err) < 20_000  # no huge value printed whole
    FIGURES[f"{kind} clean errors"] += 1
    if names:
        # a value the YAML reader refuses (an integer past 19 digits) is named by its line
        named = any(str(n) in err for n in names) or "out of range" in first
        FIGURES[f"{kind} errors naming the field"] += named
        assert named, (names, err)


def _field_names(path: tuple) -> tuple[str, ...]:
    """How an error may name the mutated spot: its key, or its parent's key for list items
    and dropped/added keys."""
    keys = [str(p) for p in path if isinstance(p, str)]
    return tuple(keys[-2:]) if keys else ()


@SETTINGS
@given(data=st.data())
def test_mutated_recipes(data, tmp_path, capsys):
    doc, path, _how = mutate(QUICKSTART, data)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(dump_yaml(doc))
    (tmp_path / "runners.yaml").write_text(dump_yaml(RUNNERS))
    code, out = run_cli(capsys, ["validate", str(recipe)])
    err = out.err
    check_clean("recipe", code, err, names=_field_names(path) if code else ())
    if code:
        assert f"error: {recipe}" in err


@settings(SETTINGS, max_examples=100)
@given(data=st.data())
def test_mutated_runners_files(data, tmp_path, capsys):
    doc, path, _how = mutate(RUNNERS, data)
    runners = tmp_path / "runners.yaml"
    runners.write_text(dump_yaml(doc))
    code, out = run_cli(capsys, ["validate", str(runners)])
    err = out.err
    check_clean("runners", code, err, names=_field_names(path) if code else ())


@settings(SETTINGS, max_examples=200)
@given(data=st.data(), mooncake=st.booleans())
def test_mutated_traces(data, mooncake, tmp_path):
    """Both views of the one loader (replay's sessions, the simulator's trace)."""
    from kvbench.sim import load_trace as sim_load
    from kvbench.workload import load_trace

    base = MOONCAKE_ROW if mooncake else SESSION
    doc, path, how = mutate(base, data)
    trace = tmp_path / ("t.jsonl" if mooncake else "t.json")
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        text = json.dumps(doc, allow_nan=True)
    finally:
        sys.set_int_max_str_digits(limit)
    trace.write_text(text + "\n")
    FIGURES["trace inputs"] += 1
    outcomes = []
    for load in (load_trace, sim_load):
        try:
            load(trace)
            outcomes.append(None)
        except KvbenchError as e:
            outcomes.append(e.message)
    assert outcomes[0] == outcomes[1]  # one loader: the same verdict and message
    if outcomes[0] is None:
        FIGURES["trace accepted"] += 1
        return
    message = outcomes[0]
    assert message.startswith(str(trace)) and len(message) < 1000, message
    FIGURES["trace clean errors"] += 1
    names = [str(p) for p in path if isinstance(p, str)]
    if how == "replace" and names and "invalid JSON" not in message:
        named = names[-1] in message or "unrecognised trace record" in message
        FIGURES["trace errors naming the field"] += named
        assert named, (path, message)


COMMANDS = {
    "validate": ["FILE"],
    "matrix": ["--config-files", "--runner-config", "--config-keys", "--precision",
               "--framework", "--min-conc", "--max-conc", "--step-size", "--single-node",
               "--multi-node", "--scenario-type", "--seq-lens", "--format"],
    "plan": ["--config-files", "--runner-config", "--config-keys", "--format", "--details",
             "--max-conc"],
    "launch": ["--dry-run", "--config-files", "--config-keys", "--engine-arg", "--port"],
    "compare": ["DIR", "--by", "--a", "--b"],
    "report": ["DIR", "-o"],
    "changelog": ["check", "--base-file", "--head-file"],
    "replay": ["--url", "--trace", "--output", "--concurrency", "--duration", "--model"],
}
ARG_VALUES = st.one_of(
    st.sampled_from([str(REPO / "examples" / "quickstart.yaml"),
                     str(REPO / "examples" / "runners.yaml"), "/nonexistent", "/", "-1", "0",
                     "1e999", "nan", "abc", "", "--", "qwen3*", "fp9", "json", "yaml",
                     "x" * 5000, "--help-me", "http://127.0.0.1:9", "synthetic"]),
    st.integers(-5, 10**6).map(str), st.text(max_size=12),
)


@settings(SETTINGS, max_examples=150)
@given(data=st.data())
def test_random_argv(data, tmp_path, capsys):
    command = data.draw(st.sampled_from(sorted(COMMANDS)))
    argv = [command]
    for _ in range(data.draw(st.integers(0, 5))):
        opt = data.draw(st.sampled_from([*COMMANDS[command], "--bogus", "-x"]))
        if opt in ("FILE", "DIR"):
            argv.append(data.draw(ARG_VALUES))
        elif opt == "--output" or opt == "-o":
            argv += [opt, str(tmp_path / "out")]
        else:
            argv.append(opt)
            if data.draw(st.booleans()):
                argv.append(data.draw(ARG_VALUES))
    if command == "launch" and "--dry-run" not in argv:
        argv.append("--dry-run")  # never start a server here
    if command == "replay":
        argv += ["--duration", "0.5", "--url", "http://127.0.0.1:9", "--model", "m"]
    code, out = run_cli(capsys, argv)
    FIGURES["argv inputs"] += 1
    assert "Traceback" not in out.err
    assert code in (0, 2, 3), (argv, code, out.err)
    if code and "Usage:" in out.out and not out.err.strip():
        FIGURES["argv help shown"] += 1  # a command group with no subcommand
    elif code:
        assert "error: " in out.err, (argv, out.err)
        FIGURES["argv clean errors"] += 1



# ---- through the stages (issue 27): profiles, results directories, special files, option
# values, serve-sim bodies and misbehaving servers; each case bounded by an alarm --------

def run_bounded(capsys, argv):
    with bounded(argv):
        return run_cli(capsys, argv)


def check_one_line(kind: str, code: int, err: str, argv) -> None:
    """0, or one clean `error:` line (exit 2, or 3 for a run or server that failed)."""
    FIGURES[f"{kind} inputs"] += 1
    assert "Traceback" not in err, (argv, err)
    assert code in (0, 2, 3), (argv, code, err)
    if code == 0:
        FIGURES[f"{kind} accepted"] += 1
        return
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors, (argv, err)
    assert len(err) < 20_000, argv
    FIGURES[f"{kind} clean errors"] += 1


def finite_numbers(obj, path=()) -> list:
    """Paths of NaN/infinite numbers in a JSON-shaped value (an accepted result's nonsense)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in finite_numbers(v, (*path, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in finite_numbers(v, (*path, i))]
    return []


STAGE_TRACE = "\n".join(json.dumps({"timestamp": i * 500, "input_length": 600 * (i + 1),
                                    "output_length": 4, "hash_ids": list(range(i + 1))})
                        for i in range(6)) + "\n"


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages")
    (root / "trace.jsonl").write_text(STAGE_TRACE)
    (root / "runners.yaml").write_text(dump_yaml(RUNNERS))
    return root


@settings(SETTINGS, max_examples=120)
@given(data=st.data())
def test_mutated_recipes_through_matrix_and_plan(data, stage_dir, tmp_path, capsys):
    """A mutated recipe that validates must also expand and plan (or be refused cleanly), and
    what is accepted makes sense: integer concurrencies within bounds, a node's GPUs."""
    doc, _path, _how = mutate(QUICKSTART, data)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(dump_yaml(doc))
    verdicts = []
    for command in ("validate", "matrix", "plan"):
        argv = ([command, str(recipe), str(stage_dir / "runners.yaml")] if command == "validate"
                else [command, "--config-files", str(recipe), "--runner-config",
                      str(stage_dir / "runners.yaml"), "--format", "json"])
        code, out = run_bounded(capsys, argv)
        check_one_line(f"stages:{command}", code, out.err, argv)
        verdicts.append(code)
        if code == 0 and command == "matrix":
            for row in json.loads(out.out):
                assert type(row["conc"]) is int and 1 <= row["conc"] <= 65_536, row
                gpus = row["tp"] * row.get("pp", 1) * row.get("pcp-size", 1)
                assert gpus <= 8 and (row.get("ep") or 1) <= 8, row  # the runner's node
                FIGURES["stages rows checked"] += 1
        if code == 0 and command == "plan":
            for row in json.loads(out.out):
                assert 1 <= row["gpus"] <= 8, row
                assert not finite_numbers(row), row
    # validate and the planner read the same file the same way
    if verdicts[0] == 0:
        assert verdicts[1] == 0, "validate accepted what matrix refused"
    else:
        assert verdicts[1] != 0 or verdicts[2] != 0 or verdicts[0] == 2


HW_PROFILE = yaml.safe_load((REPO / "src/kvbench/hardware/profiles/h100.yaml").read_text())
ENGINE_PROFILE = yaml.safe_load((REPO / "src/kvbench/sim/engines/vllm.yaml").read_text())


@settings(SETTINGS, max_examples=160)
@given(data=st.data(), engine=st.booleans())
def test_mutated_profiles(data, engine, stage_dir, tmp_path, capsys):
    """Hardware and engine profiles mutated like recipes: refused at load with the field, or
    a simulation whose every number is finite."""
    doc, path, how = mutate(ENGINE_PROFILE if engine else HW_PROFILE, data)
    profile = tmp_path / "profile.yaml"
    profile.write_text(dump_yaml(doc))
    flag = "--engine-profile" if engine else "--hardware"
    argv = ["simulate", "--trace", str(stage_dir / "trace.jsonl"), flag, str(profile),
            "--format", "json", "--concurrency", "2", "--max-requests", "6"]
    code, out = run_bounded(capsys, argv)
    check_one_line("profile", code, out.err, argv)
    if code == 0:
        assert not finite_numbers(json.loads(out.out)), (path, how)
    else:
        names = [str(p) for p in path if isinstance(p, str)]
        first = next(line for line in out.err.splitlines() if line.startswith("error: "))
        named = not names or any(n in first for n in names[-2:]) or "YAML" in first or (
            "out of range" in first)
        FIGURES["profile errors naming the field"] += named
        assert named, (path, first)


HOSTILE_WORDS = ["nan", "NaN", "inf", "-inf", "+inf", "infinity", "-1", "0", "-0", "0.5",
                 "1e309", "-1e309", "9223372036854775807", "9" * 30, "", "abc", "1,5",
                 "0x10", " 3", "fp3", "nope", "--", "-", "1e3", "2.5"]
OPTION_TABLE = {
    "plan": (["--config-files", "QUICKSTART", "--runner-config", "RUNNERS", "--format", "json"],
             ["--max-tp", "--max-ep", "--min-conc", "--max-conc", "--step-size",
              "--host-headroom-gb", "--precision", "--framework", "--format"]),
    "matrix": (["--config-files", "QUICKSTART", "--runner-config", "RUNNERS", "--format",
                "json"], ["--max-tp", "--min-conc", "--max-conc", "--step-size", "--seq-lens"]),
    "simulate": (["--trace", "TRACE", "--format", "json", "--max-requests", "4"],
                 ["--concurrency", "--duration", "--max-requests", "--warmup-requests",
                  "--max-tokens-cap", "--think-time-cap", "--think-time-scale", "--tp",
                  "--precision", "--router", "--dp", "--spec-verify-tokens",
                  "--spec-accept-length", "--gpu-tokens", "--host-tokens", "--host-cache-gb",
                  "--block-tokens", "--max-input-tokens", "--arrival-scale", "--seed",
                  "--write-policy", "--start", "--max-running-requests"]),
    "run": (["QUICKSTART", "--emit", "github-matrix", "--results", "RESULTS"],
            ["--duration", "--max-requests", "--warmup-requests", "--think-time-scale",
             "--max-input-tokens", "--max-tokens-cap", "--time-scale", "--ready-timeout",
             "--replay-timeout", "--repeat", "--max-parallel", "--seed", "--executor",
             "--load-format", "--format", "--max-conc", "--replay-workers"]),
    # --port 0 ends an accepted command line with a clean error, before it listens
    "serve-sim": (["--port", "0"], ["--time-scale", "--tp", "--host-cache-gb", "--page-size",
                                   "--chars-per-token", "--precision", "--spec-verify-tokens",
                                   "--spec-accept-length", "--max-running-requests",
                                   "--gpu-tokens", "--write-policy"]),
    "replay": (["--url", "http://127.0.0.1:9", "--model", "m", "--trace", "TRACE", "--output",
                "RESULTS", "--duration", "0.5", "--grace", "0.2"],
               ["--concurrency", "--duration", "--max-requests", "--warmup-requests",
                "--think-time-cap", "--think-time-scale", "--max-tokens-cap", "--block-tokens",
                "--request-timeout", "--grace", "--max-failed-ratio", "--num-gpus",
                "--time-scale", "--start", "--endpoint", "--format", "--workers"]),
}


@settings(SETTINGS, max_examples=300)
@given(data=st.data())
def test_option_values(data, stage_dir, tmp_path, capsys):
    """Hostile values for the numeric and word options of six commands: accepted, or one
    clean line; never a traceback, never a hang."""
    command = data.draw(st.sampled_from(sorted(OPTION_TABLE)))
    base, options = OPTION_TABLE[command]
    subst = {"QUICKSTART": str(REPO / "examples" / "quickstart.yaml"),
             "RUNNERS": str(REPO / "examples" / "runners.yaml"),
             "TRACE": str(stage_dir / "trace.jsonl"), "RESULTS": str(tmp_path / "out")}
    argv = [command, *(subst.get(a, a) for a in base)]
    for _ in range(data.draw(st.integers(1, 3))):
        argv += [data.draw(st.sampled_from(options)),
                 data.draw(st.one_of(st.sampled_from(HOSTILE_WORDS),
                                     st.integers(-10, 10**6).map(str)))]
    code, out = run_bounded(capsys, argv)
    check_one_line(f"option:{command}", code, out.err, argv)
    last: dict[str, str] = {}  # click keeps the last value of a repeated option
    for i, a in enumerate(argv[:-1]):
        if a in options:
            last[a] = argv[i + 1]
    values = list(last.values())
    if code == 0 and command in ("plan", "matrix", "simulate"):
        assert not finite_numbers(json.loads(out.out)), argv
    if code == 0:
        # no NaN or infinity gets through as a number
        assert not any(v.strip().lower().lstrip("+-") in ("nan", "inf", "infinity", "1e309")
                       for v in values), argv


@pytest.fixture(scope="module")
def results_root(tmp_path_factory):
    from fixtures.results_data import make_pair

    return make_pair(tmp_path_factory.mktemp("results"))


def _json_leaves(doc) -> list[tuple]:
    return [p for p in leaf_paths(doc) if p]


# 60 cases: the costliest generator of the suite (a third of its CPU), each class still drawn
@settings(SETTINGS, max_examples=60)
@given(data=st.data(), which=st.sampled_from(["result.json", "summary.json", "plan.json",
                                               "job.json", "records.jsonl", "special"]))
def test_mutated_results_directories(data, which, results_root, tmp_path, capsys):
    """A results directory with one file mutated (a value, a dropped key, garbage bytes) or
    replaced by a directory, FIFO, symlink loop or nothing: compare, report and rescore
    accept it or name the file; a NaN or negative metric is never drawn."""
    import shutil
    import tempfile

    # tmp_path is one directory for every example of a hypothesis test
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    root = tmp_path / "r"
    shutil.copytree(results_root, root, symlinks=True)
    job = sorted(p.parent for p in root.rglob("result.json"))[data.draw(st.integers(0, 1))]
    target = job / ("result.json" if which == "special" else which)
    planted_nan = False
    if which == "special":
        target.unlink()
        kind = data.draw(st.sampled_from(["dir", "fifo", "loop", "missing", "empty",
                                          "garbage", "devnull"]))
        if kind == "dir":
            target.mkdir()
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "loop":
            target.symlink_to(target)
        elif kind == "empty":
            target.write_bytes(b"")
        elif kind == "garbage":
            target.write_bytes(b"\x00\xff{" * 100)
        elif kind == "devnull":
            target.symlink_to("/dev/null")
    elif which == "records.jsonl" or not target.exists():
        if target.exists():
            lines = target.read_bytes().splitlines()
            i = data.draw(st.integers(0, len(lines) - 1))
            lines[i] = data.draw(st.sampled_from([b"{", b"[1,2]", b"null", b'{"status": 5}',
                                                  b"\xff\xfe", b""]))
            target.write_bytes(b"\n".join(lines) + b"\n")
    else:
        doc = json.loads(target.read_text())
        doc, path, how = mutate(doc, data)
        planted_nan = how == "replace" and path and path[0] in (
            "request_metrics", "server_metrics") and isinstance(
            _get(doc, path), float | int) and not isinstance(_get(doc, path), bool) and (
            not math.isfinite(_get(doc, path)) or _get(doc, path) < 0)
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            target.write_text(json.dumps(doc, allow_nan=True))
        finally:
            sys.set_int_max_str_digits(limit)
    for argv in (["compare", str(root)], ["report", str(root), "-o", str(tmp_path / "d.html")],
                 ["rescore", str(root), "--dry-run", "--format", "json"]):
        code, out = run_bounded(capsys, argv)
        check_one_line(f"results:{argv[0]}", code, out.err, argv)
        if planted_nan and which == "result.json" and argv[0] != "rescore":
            assert code != 0, (argv, "a NaN/negative metric was accepted")
            FIGURES["results impossible metrics refused"] += 1


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


SPECIAL = ["/dev/zero", "/dev/null", "/dev/urandom", "/dev/full", "FIFO", "DIR", "LOOP",
           "DANGLING", "EMPTY", "HUGE_SPARSE"]
SPECIAL_INPUTS = {
    "validate": lambda p: ["validate", p],
    "plan": lambda p: ["plan", "--config-files", p],
    "matrix --runner-config": lambda p: ["matrix", "--config-files",
                                         str(REPO / "examples" / "quickstart.yaml"),
                                         "--runner-config", p, "--format", "json"],
    "simulate --trace": lambda p: ["simulate", "--trace", p],
    "simulate --hardware": lambda p: ["simulate", "--trace", "TRACE", "--hardware", p + ".yaml"
                                      if not p.endswith(".yaml") else p],
    "simulate --engine-profile": lambda p: ["simulate", "--trace", "TRACE", "--engine-profile",
                                            p],
    "compare": lambda p: ["compare", p],
    "report": lambda p: ["report", p, "-o", "OUT"],
    "rescore": lambda p: ["rescore", p, "--dry-run"],
    "run": lambda p: ["run", p, "--emit", "github-matrix"],
    "replay --trace": lambda p: ["replay", "--url", "http://127.0.0.1:9", "--model", "m",
                                 "--trace", p, "--output", "OUT", "--duration", "0.5"],
    "report -o": lambda p: ["report", "RESULTS", "-o", p],
    "simulate --output": lambda p: ["simulate", "--trace", "TRACE", "--output", p],
    "matrix --output": lambda p: ["matrix", "--config-files",
                                  str(REPO / "examples" / "quickstart.yaml"), "--format",
                                  "json", "--output", p],
}


def _special(kind: str, tmp_path: Path) -> str:
    link = tmp_path / "special.yaml"
    if kind.startswith("/dev/"):
        link.symlink_to(kind)  # a .yaml name: profiles are recognised by their suffix
        return str(link)
    if kind == "FIFO":
        os.mkfifo(link)
    elif kind == "DIR":
        link.mkdir()
    elif kind == "LOOP":
        link.symlink_to(link)
    elif kind == "DANGLING":
        link.symlink_to(tmp_path / "nowhere" / "x.yaml")
    elif kind == "EMPTY":
        link.write_bytes(b"")
    elif kind == "HUGE_SPARSE":
        with open(link, "wb") as f:
            f.truncate(2 * 2**30)  # 2 GiB of zeros, no disk used
    return str(link)


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("where", sorted(SPECIAL_INPUTS))
def test_special_files_everywhere(where, kind, stage_dir, results_root, tmp_path, capsys):
    """Devices, FIFOs, directories, symlink loops, dangling links, empty and 2 GiB sparse
    files as every input and output path: each ends at once, cleanly; a device or FIFO given
    as an output stays what it was."""
    import stat

    path = _special(kind, tmp_path)
    before = os.lstat(path).st_mode if os.path.lexists(path) else None
    subst = {"TRACE": str(stage_dir / "trace.jsonl"), "OUT": str(tmp_path / "out.html"),
             "RESULTS": str(results_root)}
    argv = [subst.get(a, a) for a in SPECIAL_INPUTS[where](path)]
    code, out = run_bounded(capsys, argv)
    check_one_line("special", code, out.err, argv)
    if before is not None and not stat.S_ISREG(before):
        assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(before), (argv, "replaced")
    if where.endswith(("--output", "-o")) and kind == "/dev/full":
        assert code == 2 and "No space left on device" in out.err


BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory):
    from fixtures.sim_server import serve_sim

    log = tmp_path_factory.mktemp("sim") / "server.log"
    with serve_sim(log, "--time-scale", "1000") as base:
        yield base


@settings(SETTINGS, max_examples=150)
@given(data=st.data(), chat=st.booleans())
def test_serve_sim_bodies(data, chat, sim_url):
    """Mutated chat and completions bodies: a 200 or a 400, never a 500, never a hang."""
    import urllib.error
    import urllib.request

    base = BODY if chat else {**{k: v for k, v in BODY.items() if k != "messages"},
                              "prompt": "hello there"}
    doc, _path, _how = mutate(base, data)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        raw = json.dumps(doc, allow_nan=True).encode()
    finally:
        sys.set_int_max_str_digits(limit)
    route = "/v1/chat/completions" if chat else "/v1/completions"
    req = urllib.request.Request(sim_url + route, data=raw,
                                 headers={"Content-Type": "application/json"})
    with bounded(doc):
        try:
            with urllib.request.urlopen(req, timeout=CASE_LIMIT_S) as r:
                status = r.status
                r.read()
        except urllib.error.HTTPError as e:
            status = e.code
    FIGURES["serve-sim inputs"] += 1
    assert status in (200, 400), (doc, status)
    FIGURES["serve-sim accepted" if status == 200 else "serve-sim clean errors"] += 1


@pytest.fixture(scope="module")
def bad_url():
    from fixtures.bad_server import bad_server

    with bad_server() as url:
        yield url


def _bad_modes():
    from fixtures.bad_server import MODES

    return sorted(MODES)


@pytest.mark.parametrize("mode", _bad_modes())
def test_misbehaving_servers(mode, bad_url, tmp_path, capsys):
    """replay against a real server that misbehaves (impossible usage, malformed events,
    wrong shapes, HTTP errors, a cut stream): a summary and records, each failed request with
    its reason, exit 0 or 3, bounded; impossible usage is never counted as a success."""
    argv = ["replay", "--url", bad_url, "--model", mode, "--trace", "synthetic", "--sessions",
            "1", "--output", str(tmp_path), "--max-requests", "2", "--duration", "1",
            "--grace", "0.5", "--format", "json", "--max-tokens-cap", "64"]
    code, out = run_bounded(capsys, argv)
    check_one_line("server", code, out.err, argv)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()
               if line.strip()]
    assert records, mode
    for r in records:
        assert r["status"] in ("ok", "error", "cancelled"), r
        assert r["status"] != "error" or r["error"], r
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
            assert r[key] is None or (type(r[key]) is int and r[key] >= 0), (mode, r)
        if mode.startswith("usage-") and r["status"] == "ok":
            assert r["completion_tokens"] <= r["max_tokens"], r
    if mode.startswith("usage-"):
        assert any(r["error_kind"] == "bad_usage" for r in records), mode


# ---- the bounds model at every door (issue 40): values drawn around each quantity's physical
# range (kvbench/bounds.py), never the issue's own cases. What a door accepts must lie in the
# range; what it refuses is one line. Every case is in-process and cheap. -----------------

from kvbench import bounds as B  # noqa: E402


def near(rng: B.Range) -> st.SearchStrategy:
    """Values at, just inside and just past a range's ends, far past them, and of the wrong
    kind (NaN, infinities, booleans, fractions of integer ranges)."""
    lo, hi = rng.lo, rng.hi
    edges = [lo, hi, lo - 1, hi + 1, hi * 2, -1, 0, hi * 1000, 2**31, 2**63 - 1, True]
    if rng.integer:
        inside = st.integers(int(lo), int(min(hi, 2**62)))
        edges += [int(hi) + 1, 2.5, float(hi)]
    else:
        inside = st.floats(lo, hi, allow_nan=False)
        edges += [math.nextafter(hi, math.inf), math.nextafter(lo, -math.inf), 1e300, 1e-300,
                  math.nan, math.inf, -math.inf, -0.0]
    return st.one_of(st.sampled_from(edges), inside)


def within(rng: B.Range, value) -> bool:
    return rng.problem(value) is None


def nonsense(kind: str, what) -> None:
    """An accepted value outside its physical range: counted, and the test fails on it."""
    FIGURES[f"{kind} nonsense accepted"] += 1
    raise AssertionError(f"{kind}: accepted {what}")


# recipe and runners fields: (document, key, range)
RECIPE_FIELDS = [("recipe", "tp", B.PARALLELISM), ("recipe", "pp", B.PARALLELISM),
                 ("recipe", "ep", B.PARALLELISM), ("recipe", "conc-list", B.LANES),
                 ("recipe", "size-gb-per-rank", B.HOST_GB_PER_RANK),
                 ("recipe", "dram-utilization", B.RATIO),
                 ("runners", "gpus-per-node", B.GPUS_PER_NODE),
                 ("runners", "available-cpu-dram-mib", B.HOST_MIB)]
# spellings YAML reads as integers: short to write, long in value
SPELLINGS = ["0x{:x}", "0o{:o}", "0b{:b}", "{:_d}", "+{:d}"]


def _set_first(doc, key, value) -> bool:
    """Set the first `key` under `doc` (depth first; `pp` and `ep` go beside the first `tp`);
    whether a place was found."""
    if isinstance(doc, dict):
        if key in ("pp", "ep") and "tp" in doc:
            doc[key] = value
            return True
        for k, v in doc.items():
            if k == key:
                doc[k] = [value] if key == "conc-list" else value
                return True
            if _set_first(v, key, value):
                return True
    elif isinstance(doc, list):
        return any(_set_first(v, key, value) for v in doc)
    return False


def _offloaded(doc) -> dict:
    """The quickstart with an explicit host pool size on its offload rows."""
    doc = json.loads(json.dumps(doc))
    for block in next(iter(doc.values()))["scenarios"]["agentic-coding"]:
        for row in block["search-space"]:
            if row.get("kv-offload-backend"):
                row["kv-offload-backend"]["size-gb-per-rank"] = 8
    return doc


@settings(SETTINGS, max_examples=150)
@given(data=st.data())
def test_bounded_recipe_fields_through_matrix_and_plan(data, stage_dir, tmp_path, capsys):
    """A recipe or runners number around its range (or spelt in hex, octal, binary), or a
    string around the length bound, through validate, matrix and plan: accepted only inside
    the range."""
    docs = {"recipe": _offloaded(QUICKSTART), "runners": json.loads(json.dumps(RUNNERS))}
    kind = data.draw(st.sampled_from(["number", "number", "spelling", "text"]))
    if kind == "text":
        which, key = "recipe", data.draw(st.sampled_from(["image", "model", "runner"]))
        length = data.draw(st.sampled_from([B.MAX_TEXT_CHARS - 1, B.MAX_TEXT_CHARS,
                                            B.MAX_TEXT_CHARS + 1, 4 * B.MAX_TEXT_CHARS]))
        value: object = "x" * length
        rng = None
    else:
        which, key, rng = data.draw(st.sampled_from(RECIPE_FIELDS))
        value = data.draw(near(rng))
    marker = "__fuzz_value__"
    assert _set_first(docs[which], key, marker if kind == "spelling" else value)
    texts = {name: dump_yaml(doc) for name, doc in docs.items()}
    if kind == "spelling":
        value = data.draw(st.sampled_from([int(rng.hi) + 1, int(rng.hi), int(rng.lo),
                                           2**64, 2**68, int(rng.hi) * 16]))
        texts[which] = texts[which].replace(marker, data.draw(st.sampled_from(SPELLINGS))
                                            .format(value))
    recipe, runners = tmp_path / "recipe.yaml", tmp_path / "runners.yaml"
    recipe.write_text(texts["recipe"])
    runners.write_text(texts["runners"])
    kind_name = f"bounded recipe {kind}"
    code, out = run_bounded(capsys, ["validate", str(recipe), str(runners)])
    check_one_line(kind_name, code, out.err, (key, value))
    if code != 0:
        return
    if kind == "text" and len(value) > B.MAX_TEXT_CHARS:
        nonsense(kind_name, f"{key} of {len(value):,} characters")
    if rng is not None and not within(rng, value):
        nonsense(kind_name, f"{key} = {value!r}")
    for command in ("matrix", "plan"):
        argv = [command, "--config-files", str(recipe), "--runner-config", str(runners),
                "--format", "json"]
        code, out = run_bounded(capsys, argv)
        check_one_line(f"{kind_name}:{command}", code, out.err, argv)
        if code == 0 and command == "matrix":
            for row in json.loads(out.out):
                for k in ("tp", "pp", "ep"):
                    if not within(B.PARALLELISM, row.get(k, 1)):
                        nonsense(kind_name, row)
        if code == 0 and command == "plan":
            for row in json.loads(out.out):
                assert not finite_numbers(row), row


def _numeric_options() -> list[tuple[str, object, object, B.Range]]:
    """(command path, click command, parameter, range) for every ranged option."""
    from kvbench.cli import _command

    found = []

    def walk(cmd, path):
        for param in getattr(cmd, "params", ()):
            long = max(getattr(param, "opts", None) or [""], key=len)
            rng = B.option_range(path, long)
            if rng is not None and long.startswith("--"):
                found.append((path, cmd, param, rng))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(_command(), "")
    return found


OPTIONS = _numeric_options()


def _spelt(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return repr(value)
    return repr(value) if isinstance(value, float) else str(value)


@settings(SETTINGS, max_examples=500)
@given(data=st.data())
def test_bounded_option_values(data):
    """Every ranged option of every command, given a value around its range, at the parser
    (the door; nothing runs): refused by the bounds model in one line, or converted to a
    value inside the range."""
    path, cmd, param, rng = data.draw(st.sampled_from(OPTIONS))
    value = data.draw(st.one_of(near(rng).map(_spelt),
                                st.sampled_from(["1e3", "0x10", " 5", "5 ", "", "1_000"])))
    long = max(param.opts, key=len)
    FIGURES["bounded option inputs"] += 1
    try:
        cmd.make_context(path.split()[-1] if path else "kvbench", [long, value])
        accepted = True
    except Exception as e:  # click's errors: ours, or another parameter's (missing ones)
        own = getattr(e, "param", None) is param
        if own or type(e).__name__ == "NoSuchOption":
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            assert "\n" not in message.strip() and len(message) < 600, message
            FIGURES["bounded option clean errors"] += 1
            return
        accepted = True
    if accepted:
        FIGURES["bounded option accepted"] += 1
        # the value as the command receives it (no checks, no missing parameters: parsed only)
        ctx = cmd.make_context(path.split()[-1] if path else "kvbench", [long, value],
                               resilient_parsing=True)
        converted = ctx.params.get(param.name)
        for v in converted if isinstance(converted, list | tuple) else (converted,):
            if isinstance(v, int | float) and not isinstance(v, bool) and not within(rng, v):
                nonsense("bounded option", f"{path} {long} {value!r}")


@pytest.fixture(scope="module")
def job_doc() -> dict:
    from kvbench.matrix import Selection, select_jobs
    from kvbench.sweep import RunOptions, build_specs

    jobs = select_jobs(Selection(config_files=(REPO / "examples" / "quickstart.yaml",),
                                 runner_config=REPO / "examples" / "runners.yaml"))
    spec = build_specs([j for j in jobs if j.offload_backend][:1], RunOptions())[0]
    return spec.to_json()


JOB_FIELDS = [(("repeat",), None), (("row", "tp"), B.PARALLELISM),
              (("row", "ep"), B.PARALLELISM), (("row", "conc"), B.LANES),
              (("row", "total-cpu-dram-gb"), B.HOST_GB),
              (("row", "kv-offload-backend", "size-gb-per-rank"), B.HOST_GB_PER_RANK),
              (("options", "duration_s"), B.DURATION_S),
              (("options", "max_requests"), B.REQUESTS),
              (("options", "warmup_requests"), B.WARMUP_REQUESTS),
              (("options", "seed"), B.SEED), (("options", "max_tokens_cap"), B.OUTPUT_TOKENS),
              (("options", "max_input_tokens"), B.CONTEXT_TOKENS),
              (("options", "think_time_scale"), B.RATE_SCALE),
              (("options", "scrape_interval_s"), B.INTERVAL_S),
              (("options", "timeouts", "ready_s"), B.TIMEOUT_S)]
JOB_WORDS = [("row", "kv-offloading"), ("row", "spec-decoding"),
             ("row", "kv-offload-backend", "name")]


@settings(SETTINGS, max_examples=400)
@given(data=st.data(), as_text=st.booleans())
def test_bounded_job_files(data, as_text, job_doc):
    """A job file (job.json or a CI matrix entry's --job-json) with one number around its
    range or one closed word replaced: the spec is refused, or every value is in range."""
    from pydantic import ValidationError

    from kvbench.sweep import JobSpec

    doc = json.loads(json.dumps(job_doc))
    if data.draw(st.integers(0, 4)) == 0:
        path, rng = data.draw(st.sampled_from(JOB_WORDS)), None
        value: object = data.draw(st.one_of(st.text(max_size=8), st.sampled_from(
            ["none", "dram", "tape", "hicache", "mtp", "NONE", ""])))
    else:
        path, rng = data.draw(st.sampled_from(JOB_FIELDS))
        value = data.draw(near(rng if rng is not None else B.REPEATS))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    FIGURES["bounded job file inputs"] += 1
    try:
        spec = (JobSpec.model_validate_json(json.dumps(doc)) if as_text
                else JobSpec.model_validate(doc))
    except ValidationError as e:
        from kvbench.errors import validation_message

        assert "\n" not in validation_message(e, "job")
        FIGURES["bounded job file clean errors"] += 1
        return
    FIGURES["bounded job file accepted"] += 1
    got = spec.to_json()
    for part in path:
        got = got[part]
    if rng is None and path == ("repeat",):
        ok = within(B.REPEATS, got + 1)
    elif rng is None:
        from kvbench.recipe import fields

        ok = got in {*fields.KV_OFFLOADINGS, *fields.SPEC_DECODINGS,
                     *fields.KV_OFFLOAD_BACKENDS}
    else:
        ok = within(rng, got)
    if not ok:
        nonsense("bounded job file", f"{path} = {value!r}")


TRACE_FIELDS = {"in": B.CONTEXT_TOKENS, "out": B.OUTPUT_TOKENS, "t": B.TRACE_TIME_S,
                "think_time": B.IDLE_S, "api_time": B.SERVER_TIME_S}
ROW_FIELDS = {"input_length": B.CONTEXT_TOKENS, "output_length": B.OUTPUT_TOKENS,
              "timestamp": B.TRACE_TIME_S}


@settings(SETTINGS, max_examples=400)
@given(data=st.data(), mooncake=st.booleans(), two_files=st.booleans())
def test_bounded_trace_fields(data, mooncake, two_files, tmp_path):
    """Trace numbers around their ranges through both views of the one loader; two files
    sharing a session id keep separate caches."""
    from kvbench.sim import load_trace as sim_load
    from kvbench.workload import load_trace

    if mooncake:
        field_name = data.draw(st.sampled_from(sorted(ROW_FIELDS)))
        rng = ROW_FIELDS[field_name]
        doc: dict = {"timestamp": 1000, "input_length": 600, "output_length": 20,
                     "hash_ids": [1]}
        value = data.draw(near(rng))
        doc[field_name] = value * 1000 if field_name == "timestamp" and isinstance(
            value, int | float) and not isinstance(value, bool) else value
    else:
        field_name = data.draw(st.sampled_from(sorted(TRACE_FIELDS)))
        rng = TRACE_FIELDS[field_name]
        value = data.draw(near(rng))
        doc = {"id": "s1", "requests": [{"in": 130, "out": 10, "hash_ids": [1, 2],
                                         field_name: value}]}
    names = ["a.jsonl", "b.jsonl"] if two_files else ["a.jsonl"]
    for name in names:
        (tmp_path / name).write_text(json.dumps(doc) + "\n")
    paths = [tmp_path / n for n in names]
    FIGURES["bounded trace inputs"] += 1
    outcomes = []
    for load in (lambda: load_trace(paths), lambda: [sim_load(p) for p in paths]):
        try:
            outcomes.append(load())
        except KvbenchError as e:
            assert "\n" not in e.message and len(e.message) < 1000
            outcomes.append(e.message)
    if isinstance(outcomes[0], str):
        assert outcomes[1] == outcomes[0]  # one loader: one verdict
        FIGURES["bounded trace clean errors"] += 1
        return
    FIGURES["bounded trace accepted"] += 1
    sessions = outcomes[0]
    for turn in (t for s in sessions for t in s.turns):
        if not (within(B.CONTEXT_TOKENS, turn.input_tokens)
                and within(B.OUTPUT_TOKENS, turn.output_tokens)
                and within(B.TRACE_TIME_S, turn.t_s) and within(B.IDLE_S, turn.think_time_s)):
            nonsense("bounded trace", f"{field_name} = {value!r}: {turn}")
    if two_files and not mooncake:
        assert len({s.namespace for s in sessions}) == 2, "a shared id shares a cache"


def _unit_leaves(doc, path=()):
    """(path, range) of every number in a result whose name carries a unit."""
    from kvbench.results.schema import _unit_range

    out = []

    def walk(node, path, rng):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k), _unit_range(k, rng) if isinstance(k, str) else rng)
        elif isinstance(node, int | float) and not isinstance(node, bool) and rng is not None:
            out.append((path, rng))

    for section in ("request_metrics", "server_metrics", "energy", "cache_reuse"):
        walk(doc.get(section), (section,), None)
    return out


RESULT_FIELDS = [(("conc",), B.LANES), (("tp",), B.PARALLELISM), (("num_gpus",), B.GPUS),
                 (("allocated_cpu_dram_gb",), B.HOST_GB), (("duration_s",), B.MEASURED_S)]


@settings(SETTINGS, max_examples=300)
@given(data=st.data())
def test_bounded_result_values(data, results_root, tmp_path):
    """A result read back with one number around its range (every metric whose name carries
    a unit, and the topology): refused by name, or every number in range."""
    from kvbench.results.schema import impossible_metric
    from kvbench.results.store import read_result

    source = sorted(results_root.rglob("result.json"))[data.draw(st.integers(0, 1))]
    doc = json.loads(source.read_text())
    path, rng = data.draw(st.sampled_from(RESULT_FIELDS + _unit_leaves(doc)))
    value = data.draw(near(rng))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    import tempfile

    target = Path(tempfile.mkdtemp(dir=tmp_path)) / "result.json"
    target.write_text(json.dumps(doc, allow_nan=True))
    FIGURES["bounded result inputs"] += 1
    try:
        result = read_result(target)
    except KvbenchError as e:
        assert "\n" not in e.message and str(target) in e.message
        FIGURES["bounded result clean errors"] += 1
        return
    FIGURES["bounded result accepted"] += 1
    assert impossible_metric(result) is None
    if not within(rng, value):
        nonsense("bounded result", f"{path} = {value!r}")


# Server responses: a valid stream is generated, then 0-2 defects of its own classes are
# injected; the record must be ok exactly when no defect was.
DEFECTS = ("after_done", "usage_below_streamed", "prompt_zero", "prompt_null",
           "choices_not_list", "choice_not_object", "second_choice", "content_not_text",
           "cached_above_prompt", "over_max_tokens", "negative_count", "json_body",
           "garbage_event", "top_level_list", "many_headers")


def _stream(data, max_tokens: int) -> tuple[dict, set[str]]:
    n = data.draw(st.integers(1, 6))
    prompt = data.draw(st.integers(1, 5000))
    done = n + data.draw(st.integers(0, max_tokens - n))
    cached = data.draw(st.integers(0, prompt))
    defects = set(data.draw(st.lists(st.sampled_from(DEFECTS), max_size=2, unique=True)))
    events: list = []
    if data.draw(st.booleans()):
        events.append({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for i in range(n):
        events.append({"choices": [{"index": 0, "delta": {"content": f"w{i} "},
                                    "finish_reason": None}]})
    usage = {"prompt_tokens": prompt, "completion_tokens": done,
             "prompt_tokens_details": {"cached_tokens": cached}}
    if "usage_below_streamed" in defects:
        usage["completion_tokens"] = n - 1 if n > 1 else 0
        if n == 1:
            usage["completion_tokens"] = 0
    if "prompt_zero" in defects:
        usage["prompt_tokens"] = 0
        usage["prompt_tokens_details"]["cached_tokens"] = 0
    if "prompt_null" in defects:
        usage["prompt_tokens"] = None
    if "cached_above_prompt" in defects and usage["prompt_tokens"]:
        usage["prompt_tokens_details"]["cached_tokens"] = usage["prompt_tokens"] + 1
    if "over_max_tokens" in defects:
        usage["completion_tokens"] = max_tokens + data.draw(st.integers(1, 100))
    if "negative_count" in defects:
        usage[data.draw(st.sampled_from(["prompt_tokens", "completion_tokens"]))] = -1
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": usage})
    k = data.draw(st.integers(0, n - 1)) + (len(events) - n - 1)
    if "choices_not_list" in defects:
        events[k] = {"choices": {"0": events[k]["choices"][0]}}
    if "choice_not_object" in defects:
        events[k] = {"choices": [7]}
    if "second_choice" in defects:
        events[k] = {"choices": [{"index": 1, "delta": {"content": "x"}}]}
    if "content_not_text" in defects:
        events[k] = {"choices": [{"index": 0, "delta": {"content": 5}}]}
    if "top_level_list" in defects:
        events.insert(k, [1, 2])
    crlf = data.draw(st.booleans())
    nl = "\r\n" if crlf else "\n"
    parts = []
    for e in events:
        if data.draw(st.integers(0, 4)) == 0:  # keep-alive comments and unused fields
            parts.append(f": keep-alive{nl}{nl}")
        extra = f"event: message{nl}id: 1{nl}" if data.draw(st.integers(0, 5)) == 0 else ""
        parts.append(f"{extra}data: {json.dumps(e)}{nl}{nl}")
    if "garbage_event" in defects:
        parts.insert(1, f"data: {{not json{nl}{nl}")
    parts.append(f"data: [DONE]{nl}{nl}")
    if "after_done" in defects:
        parts.append(f"data: {json.dumps(events[len(events) - n - 1])}{nl}{nl}")
    body = "".join(parts)
    content_type = "text/event-stream"
    if "json_body" in defects:
        body = json.dumps({"choices": [{"message": {"content": "w " * n}}], "usage": usage})
        content_type = data.draw(st.sampled_from(["application/json", "text/event-stream"]))
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=4))
    spec = {"body": body, "content_type": content_type, "cuts": cuts,
            "headers": 1000 if "many_headers" in defects else data.draw(st.integers(0, 20))}
    return spec, defects


@pytest.fixture(scope="module")
def raw_server():
    """The bad server, an event loop of the test's own and one kept-alive connection to it
    (reopened when a response closed it): a request costs about a millisecond."""
    from fixtures.bad_server import bad_server

    from kvbench.replay.http import Endpoint

    loop = asyncio.new_event_loop()
    with bad_server() as url:
        yield {"ep": Endpoint.parse(url), "loop": loop, "conn": None}
    loop.close()


@settings(SETTINGS, max_examples=400)
@given(data=st.data())
def test_generated_server_responses(data, raw_server):
    """A generated stream, served by the bad server byte for byte, read by replay's own
    connection and record builder: a request is ok exactly when its stream has no defect,
    and every failed one carries its reason."""
    from kvbench.replay.config import ReplayConfig
    from kvbench.replay.http import open_connection
    from kvbench.replay.request import RequestFactory, build_record, mark_impossible_usage
    from kvbench.workload.prompt import PromptJson

    max_tokens = data.draw(st.integers(8, 64))
    spec, defects = _stream(data, max_tokens)
    cfg = ReplayConfig(url="http://x", model="m", output_dir=Path("."))
    ep, loop = raw_server["ep"], raw_server["loop"]
    raw = RequestFactory(cfg, ep).encode({"model": "gen", "raw": spec,
                                          "max_tokens": max_tokens}, "s",
                                         PromptJson([], 0))  # the body holds no prompt

    async def ask():
        conn = raw_server["conn"]
        if conn is None or conn.closed:
            conn = raw_server["conn"] = await open_connection(ep)
        return (await asyncio.wait_for(conn.request(raw), CASE_LIMIT_S))[1]

    resp = loop.run_until_complete(ask())
    rec = mark_impossible_usage({"max_tokens": max_tokens,
                                 **build_record(resp, chat=True, keep_text=False)})
    FIGURES["generated response inputs"] += 1
    FIGURES["generated responses with a defect"] += bool(defects)
    if rec["status"] == "ok":
        FIGURES["generated response accepted"] += 1
        if defects:
            nonsense("generated response", f"{sorted(defects)} recorded ok: {spec}")
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
            assert rec[key] is None or (type(rec[key]) is int and rec[key] >= 0), rec
    else:
        FIGURES["generated response clean errors"] += 1
        assert rec["error"] and rec["error_kind"], rec
        assert defects, (rec["error"], spec)  # a valid stream must never fail


def test_zz_figures(capsys):
    """The suite's figures (run last: tests run in file order)."""
    tried = sum(v for k, v in FIGURES.items() if k.endswith("inputs"))
    errors = sum(v for k, v in FIGURES.items() if k.endswith("clean errors"))
    lines = [f"fuzz: {tried} inputs tried, {errors} clean errors, 0 tracebacks"]
    lines += [f"  {k}: {v}" for k, v in sorted(FIGURES.items())]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    if tried == 0:
        pytest.skip("run with the rest of tests/fuzz/test_fuzz.py for the figures")
    assert tried >= 1000
    assert math.isfinite(errors)
