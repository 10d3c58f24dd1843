"""Nonsense is refused in one line (issue 27 items 3 and 4): recipe values that only look like
numbers, parallelism that cannot fit one node, option values that cannot mean anything (NaN
included), impossible usage from a server, impossible metrics in a result, and a corrupt job
file under rescore (named; the others are rescored; exit non-zero)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.bad_server import bad_server
from fixtures.results_data import make_job

from kvbench.cli import main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text()
RUNNERS = str(REPO / "examples" / "runners.yaml")


def _run(capsys, argv) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize(("value", "message"), [
    ('["4"]', "conc-list[0]: expected an integer, got '4' (str)"),
    ("[true]", "conc-list[0]: expected an integer, got true (bool)"),
    ("[4.0]", "conc-list[0]: expected an integer, got 4.0 (float)"),
    ("[1e3]", "conc-list[0]: expected an integer, got 1000.0 (float)"),
])
def test_conc_list_items_are_integers_in_validate_and_plan(value, message, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.replace("conc-list: [3, 6, 12]", f"conc-list: {value}"))
    for argv in (["validate", str(recipe)],
                 ["plan", "--config-files", str(recipe), "--runner-config", RUNNERS]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and message in err, (argv, err)


def test_1e3_reads_the_same_in_validate_and_plan(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.replace("name: hicache }", "name: hicache, "
                                         "size-gb-per-rank: 1e1 }"))
    code, _, err = _run(capsys, ["validate", str(recipe)])
    assert code == 0, err
    code, out, err = _run(capsys, ["plan", "--config-files", str(recipe), "--runner-config",
                                   RUNNERS, "--format", "json"])
    assert code == 0, err
    hicache = [p for p in json.loads(out) if p.get("backend") == "hicache" or
               "hicache" in json.dumps(p.get("engine_flags", ""))]
    assert hicache and "10" in json.dumps(hicache[0])
    recipe.write_text(QUICKSTART.replace("name: hicache }", "name: hicache, "
                                         "size-gb-per-rank: '1e1' }"))
    for argv in (["validate", str(recipe)],
                 ["plan", "--config-files", str(recipe), "--runner-config", RUNNERS]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and "size-gb-per-rank: expected a number, got '1e1' (str)" in err


@pytest.mark.parametrize(("edit", "message"), [
    ("tp: 16, kv-offloading: none", "tp=16 with pp=1 and pcp-size=1 needs 16 GPUs"),
    ("tp: 1, ep: 16, kv-offloading: none", "ep=16 spreads experts over more GPUs than"),
])
def test_parallelism_beyond_the_node_is_refused_on_every_single_node_row(edit, message,
                                                                       tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.replace("tp: 1, kv-offloading: none", edit))
    for argv in (["validate", str(recipe), RUNNERS],
                 ["plan", "--config-files", str(recipe), "--runner-config", RUNNERS]):
        code, _, err = _run(capsys, argv)
        assert code == 2 and message in err, (argv, err)


TRACE_ROW = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
Q = ["--config-files", str(REPO / "examples" / "quickstart.yaml"), "--runner-config", RUNNERS]


@pytest.mark.parametrize(("argv", "message"), [
    (["plan", *Q, "--max-tp", "0"], "invalid value for --max-tp (got '0'): out of range"),
    (["plan", *Q, "--max-ep", "0"], "invalid value for --max-ep (got '0'): out of range"),
    (["matrix", *Q, "--min-conc", "-1"], "invalid value for --min-conc (got '-1'): out of range"),
    (["plan", *Q, "--host-headroom-gb", "-1"], "--host-headroom-gb (got '-1'): out of range"),
    (["plan", *Q, "--host-headroom-gb", "nan"], "invalid value for --host-headroom-gb (got "
                                                "'nan'): nan is not a finite number"),
    (["plan", *Q, "--precision", "fp3"], "unknown --precision 'fp3'"),
    (["simulate", "--trace", "TRACE", "--precision", "fp3"], "--precision 'fp3'; allowed:"),
    (["simulate", "--trace", "TRACE", "--router", "nope"], "--router 'nope'; allowed:"),
    (["simulate", "--trace", "TRACE", "--spec-verify-tokens", "0"],
     "--spec-verify-tokens (got '0'): out of range"),
    (["simulate", "--trace", "TRACE", "--duration", "inf"], "inf is not a finite number"),
    (["serve-sim", "--time-scale", "nan"], "--time-scale (got 'nan'): nan is not a finite"),
    (["run", "RECIPE", "--time-scale", "nan"], "--time-scale (got 'nan')"),
    (["run", "RECIPE", "--time-scale", "0"], "--time-scale (got '0'): out of range"),
    (["run", "RECIPE", "--duration", "-5"], "--duration (got '-5'): out of range"),
    (["run", "RECIPE", "--max-requests", "0"], "--max-requests (got '0'): out of range"),
    (["run", "RECIPE", "--warmup-requests", "-1"], "--warmup-requests (got '-1'): out of range"),
    (["run", "RECIPE", "--max-tokens-cap", "0"], "--max-tokens-cap (got '0'): out of range"),
    (["run", "RECIPE", "--max-input-tokens", "0"], "--max-input-tokens (got '0'): out of range"),
    (["run", "RECIPE", "--think-time-scale", "-1"], "--think-time-scale (got '-1'): out of range"),
    (["run", "RECIPE", "--ready-timeout", "0"], "--ready-timeout (got '0'): out of range"),
    (["run", "RECIPE", "--replay-timeout", "-1"], "--replay-timeout (got '-1'): out of range"),
    (["run", "RECIPE", "--repeat", "0"], "--repeat (got '0'): out of range"),
    (["run", "RECIPE", "--max-parallel", "0"], "--max-parallel (got '0'): out of range"),
    (["run", "RECIPE", "--seed", "nan"], "invalid value for --seed"),
    (["quickstart", "--repeats", "0"], "--repeats (got '0'): out of range"),
])
def test_meaningless_option_values_are_one_line_usage_errors(argv, message, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_ROW)
    subst = {"TRACE": str(trace), "RECIPE": str(REPO / "examples" / "quickstart.yaml")}
    argv = [subst.get(a, a) for a in argv]
    if argv[0] in ("run", "quickstart"):
        argv += ["--results", str(tmp_path / "results")]
    code, _, err = _run(capsys, argv)
    assert code == 2, (argv, err)
    errors = _errors(err)
    assert len(errors) == 1 and message in errors[0], err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob(
        "result.json"))


@pytest.mark.parametrize("mode", ["usage-negative", "usage-string", "usage-over-max-tokens",
                                  "usage-cached-above-prompt", "usage-huge", "usage-list"])
def test_impossible_usage_is_a_failed_request_with_its_reason(mode, tmp_path, capsys):
    with bad_server() as url:
        code, _, err = _run(capsys, [
            "replay", "--url", url, "--model", mode, "--trace", "synthetic", "--sessions", "1",
            "--output", str(tmp_path), "--max-requests", "2", "--duration", "2", "--grace",
            "1", "--format", "json", "--max-tokens-cap", "64"])
    assert code == 3 and "bad_usage" in err  # every measured request failed
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    bad = [r for r in records if r["error_kind"] == "bad_usage"]
    assert bad and all(r["status"] == "error" and r["error"].startswith("impossible usage: ")
                       for r in bad)
    assert all(isinstance(r["completion_tokens"], int | None) for r in records)


def test_a_result_with_bad_usage_is_not_valid():
    from kvbench.results.validity import validity

    stamp = validity(row={}, summary={"requests": {"errors_by_kind": {"bad_usage": 1}}},
                     server={}, client=None, check={"failed_request_ratio": 0.01,
                                                    "failed_request_threshold": 0.1})
    assert stamp["valid"] is False
    assert any(r.startswith("usage: 1 response(s) reported impossible usage")
               for r in stamp["reasons"])


@pytest.mark.parametrize(("where", "value"), [
    (("request_metrics", "ttft_ms", "p50"), -3.0),
    (("request_metrics", "ttft_ms", "p50"), float("inf")),
    (("server_metrics",), {"x": -1}),
    (("num_requests_total",), -1),
    # a word where the name carries a unit (found by tests/fuzz's results generator: a
    # TypeError in the dashboard's mean)
    (("request_metrics", "throughput", "output_tok_s_per_gpu"), "U\u00f1 "),
])
@pytest.mark.parametrize("command", ["compare", "report"])
def test_compare_and_report_refuse_impossible_metrics(where, value, command, tmp_path,
                                                      capsys):
    job_dir, _ = make_job(tmp_path, "sim", 4, True)
    make_job(tmp_path, "sim", 4, False)
    raw = json.loads((job_dir / "result.json").read_text())
    node = raw
    for key in where[:-1]:
        node = node[key] if node.get(key) is not None else node.setdefault(key, {})
    node[where[-1]] = value
    # NaN/inf are not JSON: write them the way Python's json does, as a careless tool would
    (job_dir / "result.json").write_text(json.dumps(raw))
    argv = [command, str(tmp_path)] + (["-o", str(tmp_path / "d.html")] if command == "report"
                                       else [])
    code, _, err = _run(capsys, argv)
    assert code == 2 and str(job_dir / "result.json") in err, err
    assert not (tmp_path / "d.html").exists()


def test_rescore_names_a_corrupt_job_file_goes_on_and_exits_non_zero(tmp_path, capsys):
    good, _ = make_job(tmp_path, "sim", 4, True)
    bad, _ = make_job(tmp_path, "sim", 8, True)
    (bad / "summary.json").write_text('{"requests": [1, 2')  # torn
    worse, _ = make_job(tmp_path, "sim", 16, True)
    (worse / "result.json").write_text("[1, 2, 3]")
    code, out, err = _run(capsys, ["rescore", str(tmp_path), "--format", "json"])
    assert code == 2
    assert f"{bad / 'summary.json'}: corrupt job file" in err
    assert f"{worse / 'result.json'}: corrupt job file" in err
    assert "2 of 3 job(s) not rescored" in err
    assert [Path(r["job"]) for r in json.loads(out)] == [good]
    assert (good / "result.orig.json").exists()
