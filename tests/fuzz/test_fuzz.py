"""Fuzzing the error boundary (hypothesis): recipes, runners files, traces and CLI argv,
mutated as a hostile user would. Every input ends in success or in one clean error (exit 2
through the CLI, or a KvbenchError from the loader) that names the file, the field and the
bad value; never a traceback. The suite counts what it tried and prints the figures at the
end (recorded in docs/reliability.md)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
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

CASE_LIMIT_S = 20


class Hang(Exception):
    """A case ran past CASE_LIMIT_S: a hang (fails the test with the case)."""


@contextlib.contextmanager
def bounded(what):
    """Fail the case (as a hang) if it runs past CASE_LIMIT_S."""
    def alarm(signum, frame):
        raise Hang(f"{what}: still running after {CASE_LIMIT_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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
    from fixtures.results_data import make_job

    root = tmp_path_factory.mktemp("results")
    make_job(root, "sim", 4, False)
    make_job(root, "sim", 4, True)
    return root


def _json_leaves(doc) -> list[tuple]:
    return [p for p in leaf_paths(doc) if p]


@settings(SETTINGS, max_examples=90)
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
