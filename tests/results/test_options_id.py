"""Results of other run options are other experiments: compare never pairs or pools them
with these, and the dashboard names their arms apart. Built from the real H200 run of the
resident arm at conc 4 (benchmarks/results/h200/vllm/runs/) and its repeat."""

from __future__ import annotations

from pathlib import Path

from kvbench.report import write_dashboard
from kvbench.results import compare, read_result, write_result
from kvbench.results.build import options_digest
from kvbench.results.option_sets import option_labels

RUNS = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/vllm/runs"


def _copies(tmp_path: Path, ids: tuple[str | None, str | None]) -> list:
    out = []
    for name, oid in zip(("qwen3-8b_tp1_conc4_kvnone", "qwen3-8b_tp1_conc4_kvdram-vllm-native"),
                         ids, strict=True):
        for d in (RUNS / name, RUNS / f"{name}__r1"):
            if not d.is_dir():
                continue
            r = read_result(d / "result.json")
            r.options_id = oid
            write_result(tmp_path / d.name, r)
            out.append(read_result(tmp_path / d.name / "result.json"))
    return out


def test_options_digest_is_stable_and_order_free():
    a = options_digest({"duration_s": 50, "trace": ["x"]})
    assert a == options_digest({"trace": ["x"], "duration_s": 50}) and len(a) == 12
    assert a != options_digest({"duration_s": 60, "trace": ["x"]})


def test_same_options_pair_other_options_do_not(tmp_path):
    same = _copies(tmp_path / "same", ("aaaaaaaaaaaa", "aaaaaaaaaaaa"))
    [cell] = compare(same)["cells"]
    assert {n: len(r) for n, r in cell["runs"].items()} == {
        "kv_offloading=none": 2, "kv_offloading=dram": 2}
    assert cell["key"]["options_id"] == "aaaaaaaaaaaa"
    # the offload run measured under other options: nothing to pair with
    other = _copies(tmp_path / "other", ("aaaaaaaaaaaa", "bbbbbbbbbbbb"))
    out = compare(other)
    assert out["cells"] == [] and out["unpaired_cells"] == 2


def test_the_dashboard_names_two_option_sets_apart(tmp_path):
    _copies(tmp_path / "runs", ("aaaaaaaaaaaa", "bbbbbbbbbbbb"))
    html = write_dashboard([tmp_path / "runs"], tmp_path / "d.html").read_text()
    assert "resident [options aaaaaaaaaaaa]" in html
    assert "offload-vllm-native [options bbbbbbbbbbbb]" in html
    one = write_dashboard([RUNS], tmp_path / "one.html").read_text()
    # one set (the session-1 runs' id derived from their job.json by rescore): names as ever
    assert "[options" not in one


def test_arms_apart_only_by_options_are_named_and_pair_when_the_selections_name_them(tmp_path):
    """Issue 37: the Qwen3.5 resident twin ran with its own --page-size 16 (another options_id
    than the HiCache arm's). compare pairs nothing and names the two ids; selections naming
    each arm's options_id pair them."""
    other = _copies(tmp_path / "other", ("aaaaaaaaaaaa", "bbbbbbbbbbbb"))
    out = compare(other)
    assert out["cells"] == [] and out["options_ids"] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    named = compare(other, a={"kv_offloading": "none", "options_id": "aaaaaaaaaaaa"},
                    b={"kv_offloading": "dram", "options_id": "bbbbbbbbbbbb"})
    [cell] = named["cells"]
    assert [len(r) for r in cell["runs"].values()] == [2, 2] and named["options_ids"] == []
    assert named["options"] == {} and "options_id" not in cell["key"]
    # one options set and nothing paired for another reason: no options line
    assert compare(other[:2])["options_ids"] == []


def test_engine_argument_lists_apart_past_the_cut_are_named_by_their_own_flags(tmp_path):
    """The Qwen3.5 runs (issue 37): six shared engine flags, then the resident twin's
    --page-size=16; the first 60 characters of both lists are the same."""
    shared = ["--attention-backend=triton", "--sampling-backend=pytorch", "--disable-cuda-graph",
              "--max-total-tokens=43680", "--max-mamba-cache-size=80"]
    runs = _copies(tmp_path, ("aaaaaaaaaaaa", "bbbbbbbbbbbb"))
    for r in runs:
        page = ["--page-size=16"] if r.options_id == "aaaaaaaaaaaa" else []
        r.run_options = {"engine_args": shared + page, "duration_s": 50.0}
    assert option_labels(runs) == {"aaaaaaaaaaaa": "engine_args+=--page-size=16",
                                   "bbbbbbbbbbbb": "engine_args-=--page-size=16"}


def test_cli_compare_names_the_options_and_pairs_arms_selected_by_them(tmp_path, capsys):
    from kvbench.cli import main

    _copies(tmp_path, ("aaaaaaaaaaaa", "bbbbbbbbbbbb"))
    main(["compare", str(tmp_path)])
    out = capsys.readouterr().out
    assert "the arms ran with other run options (options_id aaaaaaaaaaaa" in out
    main(["compare", str(tmp_path), "--a", "kv_offloading=none,options_id=aaaaaaaaaaaa",
          "--b", "kv_offloading=dram,options_id=bbbbbbbbbbbb"])
    out = capsys.readouterr().out
    assert "TTFT p50 ms" in out and "sets of run options" not in out


RUNS_S15 = RUNS.parent / "runs-s15"


def test_runs_of_other_sessions_never_pool(tmp_path):
    """Session 15's conc-4 runs on real vLLM: one option set, the same sessions (one digest),
    so the simple arm's repeats pool. One run as another kvbench would have read the same
    trace files (another digest) is another experiment: it pools with none of them, and the
    dashboard names its arm apart."""
    names = ["qwen3-8b_tp1_conc4_kvnone__r3", "qwen3-8b_tp1_conc4_kvdram-vllm-simple__r2",
             "qwen3-8b_tp1_conc4_kvdram-vllm-simple__r3"]
    results = [read_result(RUNS_S15 / n / "result.json") for n in names]
    assert len({r.sessions for r in results}) == 1 and len({r.options_id for r in results}) == 1
    [cell] = compare(results)["cells"]
    assert {n: len(r) for n, r in cell["runs"].items()} == {
        "kv_offloading=none": 1, "kv_offloading=dram": 2}

    results[2].workload["corpus"]["fingerprint"] = "f" * 64
    for r in results:
        write_result(tmp_path / "runs" / f"{r.exp_name}__r{r.repeat}", r)
    out = compare([read_result(p) for p in sorted((tmp_path / "runs").glob("*/result.json"))])
    [cell] = out["cells"]
    assert cell["runs"]["kv_offloading=dram"] == ["qwen3-8b_tp1_conc4_kvdram-vllm-simple__r2"]
    assert cell["key"]["sessions"] == results[0].sessions and out["unpaired_cells"] == 1
    html = write_dashboard([tmp_path / "runs"], tmp_path / "d.html").read_text()
    assert "offload-vllm-simple [sessions=ffffffffffff]" in html
    assert f"offload-vllm-simple [sessions={results[0].sessions}]" in html
    assert "resident [sessions" not in html
