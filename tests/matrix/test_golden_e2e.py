"""On the newer InferenceX layout's configs, `kvbench matrix` prints exactly the rows the
newer generator (`python -m infx.matrix.generate`, InferenceX fabe70b7) printed for them."""

from __future__ import annotations

import gzip
import json
import shlex
from pathlib import Path

import pytest

from kvbench.cli import main

TESTS = Path(__file__).resolve().parents[1]
CONFIGS = TESTS / "data" / "inferencex-e2e" / "configs"
GOLDEN = TESTS / "matrix" / "golden-e2e"
CASES = json.loads((GOLDEN / "cases.json").read_text())
BASE = ["matrix", "--config-files", str(CONFIGS / "nvidia-master.yaml"), "--runner-config",
        str(CONFIGS / "runners.yaml"), "--format", "json"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_json_is_byte_identical_to_the_newer_generator(case, capsys):
    main([*BASE, *shlex.split(CASES[case]["args"])])
    out = capsys.readouterr().out.strip()
    with gzip.open(GOLDEN / f"{case}.json.gz", "rt") as f:
        golden = f.read()
    assert len(json.loads(out)) == CASES[case]["rows"]
    assert out == golden


def _rows(case: str) -> list[dict]:
    with gzip.open(GOLDEN / f"{case}.json.gz", "rt") as f:
        return json.load(f)


def test_the_issue_counts():
    # InferenceX issue 24's numbers: 88 agentic and 7 fixed-seq-len rows on the subset
    assert len(_rows("agentic-no-evals")) == 88
    assert len(_rows("fixed-no-evals")) == 7


def test_aggregated_rows_and_node_counts():
    rows = _rows("agentic-no-evals")
    agg = [r for r in rows if r["exp-name"].startswith("dsv4_p1x8_d0x8")]
    assert agg and all(r["decode"]["num-worker"] == 0 and r["node-count"] == 1 for r in agg
                       if r["framework"] == "dynamo-sglang")
    assert all("node-count" in r for r in rows if "prefill" in r)
    assert all("additional-settings" not in r["decode"] for r in agg)


def test_eval_rows_name_their_evaluator():
    rows = _rows("all-scenarios-default-evals")
    evals = [r for r in rows if r["run-eval"]]
    assert evals and all(r["eval-framework"] == "lm-eval" and r["eval-suite"] == ""
                         for r in evals)
    assert all("eval-framework" not in r for r in rows if not r["run-eval"])
