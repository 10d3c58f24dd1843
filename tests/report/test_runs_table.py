"""The dashboard's runs table says one verdict per run (issue 39: `ok ⚑` beside `not valid`
read as two verdicts that disagree)."""

from __future__ import annotations

from fixtures.results_data import make_job

from kvbench.report.table import run_rows
from kvbench.results import load_results


def test_each_run_has_one_verdict(tmp_path):
    make_job(tmp_path, "sglang", 4, offload=False)
    make_job(tmp_path, "sglang", 4, offload=True, repeat=1)
    make_job(tmp_path, "vllm", 4, offload=False, status="failed")
    results = load_results([tmp_path])
    failed = next(r for r in results if r.status == "failed")
    ok, other = sorted((r for r in results if r.status == "ok"), key=lambda r: r.repeat)
    not_valid = other.model_copy(update={
        "validity": {**other.validity, "valid": False, "reasons": ["client: saturated"]},
        "validation": {**other.validation, "flags": [{"code": "client-saturated"}]}})
    row = run_rows([not_valid])
    assert "not valid" in row and ">ok" not in row and "⚑" not in row
    assert "title='client: saturated'" in row  # the reason, on hover
    assert ">valid<" in run_rows([ok]) and ">ok" not in run_rows([ok])
    assert ">failed<" in run_rows([failed])
    # a result older than the validity stamp keeps its status and the flag
    old = ok.model_copy(update={"validity": None,
                                "validation": {**ok.validation, "flags": [{"code": "x"}]}})
    assert ">ok ⚑<" in run_rows([old])
