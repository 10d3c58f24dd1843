"""Fuzzing the error boundary (hypothesis): recipes, runners files, traces and CLI argv,
mutated as a hostile user would. Every input ends in success or in one clean error (exit 2
through the CLI, or a KvbenchError from the loader) that names the file, the field and the
bad value; never a traceback. The suite counts what it tried and prints the figures at the
end (recorded in docs/reliability.md)."""

from __future__ import annotations

import copy
import json
import math
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
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

HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, -64, 2**63, 10**4299, 10**5000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, float("inf"), float("nan"), 0.5, -0.0]),
    st.text(max_size=30), st.sampled_from(["", "x" * 100_000, "../../etc", "fp9", "sglng"]),
    st.lists(st.integers(), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(),
                                                         max_size=3),
)


def leaf_paths(obj, prefix=()) -> list[tuple]:
    """Every key path of a nested dict/list document."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += leaf_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += leaf_paths(v, (*prefix, i))
    return out


def mutate(doc, data) -> tuple[object, tuple, str]:
    """A copy of `doc` with one change: a value replaced, a key dropped or an unknown key
    added. Returns the document, the path changed and what was done."""
    doc = copy.deepcopy(doc)
    path = data.draw(st.sampled_from(leaf_paths(doc)))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    how = data.draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
    if how == "replace":
        parent[path[-1]] = data.draw(HOSTILE)
    elif how == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        key = data.draw(st.sampled_from(["typo-key", "extra", "tp ", "Conc-List"]))
        parent[key] = 1
        path = (*path[:-1], key)
    else:
        parent.append(data.draw(HOSTILE))
    return doc, path, how


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
    assert tried >= 500
    assert math.isfinite(errors)
