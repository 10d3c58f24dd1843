"""Arm comparison: pairing, deltas, the noise verdict, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from fixtures.results_data import make_job

from kvbench.errors import ResultError
from kvbench.results import compare, load_results, parse_selection
from kvbench.results.compare import _delta


@pytest.fixture(scope="module")
def result_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    for conc in (4, 8):
        for rep in (0, 1, 2):  # both arms repeated: the 95% interval has 4 degrees of freedom
            make_job(root, "sglang", conc, offload=False, repeat=rep)
        for rep in (1, 2, 3):
            make_job(root, "sglang", conc, offload=True, repeat=rep)
    make_job(root, "vllm", 4, offload=False)
    make_job(root, "vllm", 4, offload=True, error_every=3)  # fails validation: excluded
    return root


def test_resident_vs_offload_pairs_by_concurrency(result_root):
    out = compare(load_results([result_root]))
    assert out["arms"] == ["kv_offloading=none", "kv_offloading=dram"]
    keys = [(c["key"]["framework"], c["key"]["conc"]) for c in out["cells"]]
    assert keys == [("sglang", "4"), ("sglang", "8")]
    assert out["unpaired_cells"] == 1  # vllm conc 4: its offload arm failed
    cell = out["cells"][0]
    assert len(cell["runs"]["kv_offloading=dram"]) == 3
    ttft = next(m for m in cell["metrics"] if m["metric"] == "TTFT p50 ms")
    base, other = ttft["arms"]["kv_offloading=none"], ttft["arms"]["kv_offloading=dram"]
    d = ttft["deltas"]["kv_offloading=dram"]
    assert d["abs"] == pytest.approx(other["mean"] - base["mean"])
    assert d["pct"] == pytest.approx(100 * d["abs"] / base["mean"])
    # the fixture's offload arm has ~40 % lower TTFT, far beyond its repeat spread
    assert d["verdict"] == "better" and d["noise"] > 0
    assert all(v["valid"] == v["n"] for v in cell["validity"].values())


def test_a_delta_with_an_arm_not_valid_is_no_verdict(tmp_path):
    """Both arms saturated (the quickstart on a busy laptop printed "better" for 0/3 vs 0/3
    valid): the delta keeps its numbers, its verdict is "not valid"."""
    for rep in (0, 1, 2):
        make_job(tmp_path, "sglang", 4, offload=False, repeat=rep)
        make_job(tmp_path, "sglang", 4, offload=True, repeat=rep + 1)
    results = load_results([tmp_path])
    assert compare(results)["cells"][0]["metrics"][2]["deltas"]["kv_offloading=dram"][
        "verdict"] == "better"
    saturated = [r.model_copy(update={
        "validity": {**r.validity, "valid": False,
                     "reasons": ["client: load client saturated: event-loop lag p99 31 ms"]}})
        for r in results]
    cell = compare(saturated)["cells"][0]
    assert {n: (v["valid"], v["n"]) for n, v in cell["validity"].items()} == {
        "kv_offloading=none": (0, 3), "kv_offloading=dram": (0, 3)}
    for row in cell["metrics"]:
        d = row["deltas"]["kv_offloading=dram"]
        assert d["verdict"] in ("not valid", "n/a"), (row["metric"], d)
    ttft = next(m for m in cell["metrics"] if m["metric"] == "TTFT p50 ms")
    assert ttft["deltas"]["kv_offloading=dram"]["pct"] < -20  # the number is still shown
    # one arm not valid is enough
    half = [r if r.kv_offloading == "none" else s for r, s in zip(results, saturated,
                                                                   strict=True)]
    ttft = next(m for m in compare(half)["cells"][0]["metrics"] if m["metric"] == "TTFT p50 ms")
    assert ttft["deltas"]["kv_offloading=dram"]["verdict"] == "not valid"


def test_valid_only_leaves_the_runs_not_valid_out_and_names_them(tmp_path):
    """One saturated repeat no longer takes the verdict away from its arm's valid ones."""
    for rep in (0, 1, 2):
        make_job(tmp_path, "sglang", 4, offload=False, repeat=rep)
        make_job(tmp_path, "sglang", 4, offload=True, repeat=rep)
    results = [r.model_copy(update={"validity": {**r.validity, "valid": False, "reasons": [
        "client: load client saturated: event-loop lag p99 12 ms"]}})
        if r.kv_offloading == "dram" and r.repeat == 0 else r for r in load_results([tmp_path])]
    ttft = next(m for m in compare(results)["cells"][0]["metrics"]
                if m["metric"] == "TTFT p50 ms")
    assert ttft["deltas"]["kv_offloading=dram"]["verdict"] == "not valid"
    cell = compare(results, valid_only=True)["cells"][0]
    dropped = next(r for r in results if r.valid is False)
    assert cell["left_out"] == {"kv_offloading=dram": [dropped.exp_name]}
    assert {n: len(r) for n, r in cell["runs"].items()} == {
        "kv_offloading=none": 3, "kv_offloading=dram": 2}
    ttft = next(m for m in cell["metrics"] if m["metric"] == "TTFT p50 ms")
    assert ttft["arms"]["kv_offloading=dram"]["n"] == 2
    assert ttft["deltas"]["kv_offloading=dram"]["verdict"] == "better"
    # an arm left with no valid run is no arm: nothing to pair
    none_valid = [r.model_copy(update={"validity": {**r.validity, "valid": False}})
                  if r.kv_offloading == "dram" else r for r in results]
    out = compare(none_valid, valid_only=True)
    assert out["cells"] == [] and out["unpaired_cells"] == 1


H200_VLLM = Path(__file__).parents[2] / "benchmarks/results/h200/vllm/runs"


def test_the_h200_vllm_runs_offload_tier_row_counts_the_connectors_hits():
    """vLLM 0.26 counts its CPU connectors' hits as external_kv_transfer, not a host tier:
    the offload-tier row reads them (it read 0 while 66 % of prompt tokens came from the CPU),
    and the repeats at conc 6 give the headline its interval."""
    out = compare(load_results([H200_VLLM]), by="backend", valid_only=True)
    c6 = next(c for c in out["cells"] if c["key"]["conc"] == "6")
    rows = {m["metric"]: m for m in c6["metrics"]}
    # vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} over prompt tokens:
    # native 0.656 in each of its valid runs (631,392 of 961,870 in __r1), simple 0.662,
    # 0.670 (665,088 of 992,875 in __r1) and 0.662
    offload = rows["cache hit rate (offload tier)"]["arms"]
    assert offload["backend=vllm-native"]["mean"] == pytest.approx(0.6564, abs=5e-4)
    assert offload["backend=vllm-simple"]["mean"] == pytest.approx(0.6646, abs=5e-4)
    for arm in ("backend=vllm-native", "backend=vllm-simple"):
        d = rows["output tok/s/GPU"]["deltas"][arm]
        assert d["verdict"] == "better" and 20 < d["pct"] < 35 and d["noise_pct"] < 5
    assert rows["cache hit rate (offload tier)"]["arms"]["backend=none"]["mean"] == 0
    assert c6["left_out"] == {"backend=vllm-native": ["qwen3-8b_tp1_conc6_kvdram-vllm-native"]}
    table = subprocess.run([sys.executable, "-m", "kvbench", "compare", str(H200_VLLM), "--by",
                            "backend", "--valid-only"], capture_output=True, text=True,
                           check=True, env={**os.environ, "COLUMNS": "250"}).stdout
    assert "cache hit rate (offload tier)" in table and "not valid │" not in table
    assert ("left out of vllm-native (not valid, --valid-only): "
            "qwen3-8b_tp1_conc6_kvdram-vllm-native\n") in table


def test_by_concurrency_and_explicit_selections(result_root):
    results = load_results([result_root])
    by_conc = compare(results, by="conc")
    assert by_conc["arms"] == ["conc=4", "conc=8"]
    assert {c["key"]["kv_offloading"] for c in by_conc["cells"]} == {"none", "dram"}
    sel = compare(results, a=parse_selection("framework=sglang,kv_offloading=none"),
                  b=parse_selection("framework=sglang,kv-offloading=dram"))
    assert sel["arms"] == ["framework=sglang,kv_offloading=none",
                           "framework=sglang,kv_offloading=dram"]
    assert len(sel["cells"]) == 2


def test_noise_verdicts_by_hand():
    one = {"mean": 100.0, "std": None, "n": 1}
    assert _delta(one, {"mean": 110.0, "std": None, "n": 1}, True)["verdict"] == "too few runs"
    a = {"mean": 100.0, "std": 10.0, "n": 3}
    b = {"mean": 105.0, "std": 10.0, "n": 3}
    d = _delta(a, b, True)
    # pooled sd 10, se = 10 * sqrt(2/3) = 8.165; df 4: t = 2.776, noise = 22.67 > 5
    assert d["noise"] == pytest.approx(22.666, rel=1e-4) and d["verdict"] == "within noise"
    assert d["significant"] is False and d["noise_pct"] == pytest.approx(22.666, rel=1e-4)
    worse = _delta(a, {"mean": 130.0, "std": 10.0, "n": 3}, False)
    assert worse["verdict"] == "worse" and worse["significant"] is True
    # one arm with a single run: no interval, whatever the other arm's spread (issue 39:
    # `+87.8 % ±0.0 better` from 0.442 ±0 (n=2) vs 0.831 (n=1))
    d = _delta({"mean": 100.0, "std": None, "n": 1}, b, True)
    assert d["verdict"] == "too few runs" and d["noise"] is None and d["significant"] is None
    d = _delta({"mean": 0.442, "std": 0.0, "n": 2}, {"mean": 0.831, "std": None, "n": 1}, True,
               share=True)
    assert d["verdict"] == "too few runs" and d["pct"] is None  # a hit rate: pp, not %
    assert d["abs"] == pytest.approx(0.389)


def test_bad_selections_are_clear_errors(result_root):
    results = load_results([result_root])
    with pytest.raises(ResultError, match="cannot compare by 'colour'"):
        compare(results, by="colour")
    with pytest.raises(ResultError, match="KEY=VALUE"):
        parse_selection("tp")
    with pytest.raises(ResultError, match="both"):
        compare(results, a={"tp": "2"})
    with pytest.raises(ResultError, match="matches both"):
        compare(results, a={"tp": "2"}, b={"framework": "sglang"})


def test_cli_compare_and_report(result_root, tmp_path):
    run = [sys.executable, "-m", "kvbench"]
    table = subprocess.run([*run, "compare", str(result_root)], capture_output=True,
                           text=True, check=True)
    assert "TTFT p50 ms" in table.stdout and "better" in table.stdout
    js = subprocess.run([*run, "compare", str(result_root), "--by", "conc", "--format",
                         "json"], capture_output=True, text=True, check=True)
    assert orjson.loads(js.stdout)["arms"] == ["conc=4", "conc=8"]
    bad = subprocess.run([*run, "compare", str(tmp_path / "nope")], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "no such file or directory" in bad.stderr
    assert "Traceback" not in bad.stderr
    out = tmp_path / "dash.html"
    rep = subprocess.run([*run, "report", str(result_root), "-o", str(out)],
                         capture_output=True, text=True, check=True)
    assert out.is_file() and "wrote" in rep.stdout


def test_two_offload_backends_are_two_arms_never_repeats_of_one():
    """The real H200 runs: native and simple vLLM offload under kv_offloading=dram at conc 4
    must not be pooled into one arm with a spread (they once were: 'dram (n=2) ±74 ms')."""
    from pathlib import Path

    runs = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/vllm/runs"
    out = compare(load_results([runs]))
    assert out["arms"] == ["kv_offloading=none", "kv_offloading=dram,backend=vllm-native",
                           "kv_offloading=dram,backend=vllm-simple"]
    c4 = next(c for c in out["cells"] if c["key"]["conc"] == "4")
    # at conc 4 resident ran in sessions 1, 2 and 7, native in 1, 3 and 7, simple in 1 and 3
    # (the session-1 results got their options_id from job.json by rescore)
    assert {n: len(r) for n, r in c4["runs"].items()} == {
        "kv_offloading=none": 3, "kv_offloading=dram,backend=vllm-native": 3,
        "kv_offloading=dram,backend=vllm-simple": 2}
    ttft = next(m for m in c4["metrics"] if m["metric"] == "TTFT p50 ms")
    arms = ttft["arms"]
    assert arms["kv_offloading=none"]["mean"] == pytest.approx(
        (1_237.8 + 1_336.0 + 1_330.2) / 3, abs=0.1)
    assert arms["kv_offloading=dram,backend=vllm-native"]["mean"] == pytest.approx(
        (817.6 + 800.4 + 761.3) / 3, abs=0.1)
    assert arms["kv_offloading=dram,backend=vllm-simple"]["mean"] == pytest.approx(
        (712.6 + 968.3) / 2, abs=0.1)
    # native's runs agree (818 / 800 / 761 ms) and its interval excludes zero, but two of its
    # runs and one resident run were stamped not valid (client saturated at 10.1-12.4 ms loop
    # lag, the old scraper): the deltas carry their numbers and no verdict (issue 27, item 10)
    deltas = ttft["deltas"]
    assert c4["validity"]["kv_offloading=dram,backend=vllm-native"]["valid"] == 1
    assert c4["validity"]["kv_offloading=none"]["valid"] == 2
    for arm in ("kv_offloading=dram,backend=vllm-native", "kv_offloading=dram,backend=vllm-simple"):
        assert deltas[arm]["verdict"] == "not valid" and deltas[arm]["significant"] is None
        assert deltas[arm]["abs"] is not None and deltas[arm]["noise"] is not None


def _runs(tmp_path) -> list:
    for rep in (0, 1, 2):
        make_job(tmp_path, "sglang", 4, offload=False, repeat=rep)
        make_job(tmp_path, "sglang", 4, offload=True, repeat=rep + 1)
    return load_results([tmp_path])


def _row(out: dict, metric: str) -> dict:
    return next(m for m in out["cells"][0]["metrics"] if m["metric"] == metric)


def test_a_metric_some_runs_lack_is_partial_and_gets_no_verdict(tmp_path):
    """The ITL p50 a wall clock's client could not resolve in some runs (issue 39): the arm's
    number is over the runs that have it, marked, and compared with no verdict."""
    results = _runs(tmp_path)
    blind = results[0]
    latency = {**blind.request_metrics["latency"], "itl_ms": {
        **blind.request_metrics["latency"]["itl_ms"], "p50": None}}
    results[0] = blind.model_copy(update={"request_metrics": {
        **blind.request_metrics, "latency": latency}})
    itl = _row(compare(results), "ITL p50 ms")
    arm = "kv_offloading=none" if blind.kv_offloading == "none" else "kv_offloading=dram"
    assert itl["partial"] == {arm: [2, 3]}
    assert itl["deltas"]["kv_offloading=dram"]["verdict"] == "partial"
    assert _row(compare(results), "TTFT p50 ms")["partial"] == {}


def test_hit_rates_are_deltas_in_percentage_points(tmp_path):
    """One unit per row: a hit rate's delta is absolute (pp), never relative, whether or not
    the first arm's rate is zero (issue 39: `+89.4 % ±5.2` beside `+0.47 ±0.044`)."""
    out = compare(_runs(tmp_path))
    for metric in ("cache hit rate (all tiers)", "cache hit rate (offload tier)"):
        row = _row(out, metric)
        d = row["deltas"]["kv_offloading=dram"]
        assert row["unit"] == "pp" and d["pct"] is None and d["noise_pct"] is None
    assert _row(out, "TTFT p50 ms")["unit"] == "%"


def test_option_sets_are_named_by_what_differs(tmp_path):
    """Two experiments in one directory are told apart by the option that differs, never by
    a digest alone (issue 39: arms named `[options 85280469f0b1]`)."""
    results = _runs(tmp_path)
    other = [r.model_copy(update={"options_id": "b" * 12, "run_options": {
        "max_requests": 10, "seed": 0}}) for r in results]
    mine = [r.model_copy(update={"options_id": "a" * 12, "run_options": {
        "max_requests": 85, "seed": 0}}) for r in results]
    out = compare(mine + other)
    assert out["options"] == {"a" * 12: "max_requests=85", "b" * 12: "max_requests=10"}
    assert len(out["cells"]) == 2  # never pooled as repeats of one another
    old = [r.model_copy(update={"options_id": "c" * 12}) for r in results]  # no run_options
    assert compare(mine + old)["options"]["c" * 12] == f"options {'c' * 12}"
    assert compare(mine)["options"] == {}


def test_compare_of_only_failed_results_is_an_error(tmp_path, capsys):
    from kvbench.cli import main

    make_job(tmp_path, "sglang", 4, offload=False, status="failed")
    with pytest.raises(SystemExit) as e:
        main(["compare", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: nothing to compare: none of the 1"), err
