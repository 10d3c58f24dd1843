"""One bounds model (issue 40): every numeric option of every command has a physical range
(kvbench/bounds.py OPTION_RANGES), checked where the command line is parsed: a value outside
it is one usage line naming the option, the value and the range, exit 2, before any work."""

from __future__ import annotations

import math

import pytest

from kvbench.bounds import LANES, OPTION_RANGES, TIME_SCALE, TOKENS, Range, option_range
from kvbench.cli import _command, main


def _numeric_options() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def walk(cmd, path):
        for param in cmd.params:
            text = str(param.type_descriptor.annotation)
            if ("int" in text or "float" in text) and "bool" not in text:
                found.setdefault(max(param.opts, key=len), set()).add(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(_command(), "")
    return found


def test_every_numeric_option_has_a_range():
    missing = {opt: sorted(cmds) for opt, cmds in _numeric_options().items()
               if not all(option_range(c, opt) for c in cmds)}
    assert missing == {}, "add each to kvbench/bounds.py OPTION_RANGES with its reason"


def test_every_range_states_a_reason_and_holds_its_own_ends():
    for name, rng in OPTION_RANGES.items():
        assert rng.why and rng.lo < rng.hi, name
        assert rng.problem(rng.hi) is None, name
        assert (rng.problem(rng.lo) is None) != rng.lo_open, name
        beyond = rng.hi + 1 if rng.integer else rng.hi * 2 + 1
        assert "out of range" in rng.problem(beyond), name


@pytest.mark.parametrize("value, problem", [
    (math.nan, "not a finite number"), (math.inf, "not a finite number"), (True, "not a number"),
    (2.5, "not an integer"), (-1, "out of range"), (1 << 31, "out of range"), (5, None)])
def test_range_problems(value, problem):
    rng = Range(0, 100, "tokens", "a reason", integer=True)
    got = rng.problem(value)
    assert (got is None) if problem is None else problem in got


def _run(capsys, argv):
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


# one value beyond each end the issue found accepted or hanging, through the real commands
@pytest.mark.parametrize("argv, option", [
    (["simulate", "--trace", "bundled", "--max-requests", "2147483648"], "--max-requests"),
    (["simulate", "--trace", "bundled", "--warmup-requests", "2147483648"],
     "--warmup-requests"),
    (["simulate", "--trace", "bundled", "--spec-verify-tokens", "65537"],
     "--spec-verify-tokens"),
    (["simulate", "--trace", "bundled", "--host-tokens", "9" * 25], "--host-tokens"),
    (["run", "examples/quickstart.yaml", "--repeat", "100000000"], "--repeat"),
    (["run", "examples/quickstart.yaml", "--warmup-requests", "1000000000"],
     "--warmup-requests"),
    (["run", "examples/quickstart.yaml", "--time-scale", "1e-300"], "--time-scale"),
    (["plan", "--config-files", "examples/quickstart.yaml", "--host-headroom-gb", "1e308"],
     "--host-headroom-gb"),
    (["recipe", "mirror", "--config-keys", "x", "--size", "1e308"], "--size"),
    (["serve-sim", "--port", "99999"], "--port"),
])
def test_values_out_of_range_are_one_usage_line(argv, option, capsys, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    code, out = _run(capsys, argv)
    assert code == 2 and "Traceback" not in out.err
    first = out.err.splitlines()[0]
    assert option in first and "out of range (allowed:" in first


def test_ranges_read_as_their_reasons():
    assert LANES.allowed() == "an integer 1 to 65,536 session lanes"
    assert TIME_SCALE.allowed() == "a number 0.001 to 10,000 x"
    assert "Llama 4 Scout" in TOKENS.why
