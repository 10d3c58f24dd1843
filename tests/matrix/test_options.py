"""The generator options beyond full-sweep's: what each refuses, and the default scenarios per
command (matrix prints both, as the generator; commands that plan or run select agentic)."""

from __future__ import annotations

import json

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.cli import main
from kvbench.errors import MatrixError
from kvbench.matrix import Selection, generate_rows

FILES = ["--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS)]
FIXED_ONLY = "dsr1-fp8-h200-sglang"  # a key with fixed-seq-len rows only


def _rows(**kw) -> list[dict]:
    return generate_rows(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                   scenario_types=("fixed-seq-len", "agentic-coding"), **kw))


def test_matrix_prints_both_scenarios_launch_selects_agentic(capsys):
    main(["matrix", *FILES, "--config-keys", FIXED_ONLY, "--format", "json"])
    assert {r["exp-name"] for r in json.loads(capsys.readouterr().out)} == {"dsr1_8k1k"}
    main(["launch", "--dry-run", *FILES, "--config-keys", FIXED_ONLY])
    assert capsys.readouterr().out.rstrip().endswith("0 jobs, 0 skipped")
    main(["launch", "--dry-run", *FILES, "--config-keys", FIXED_ONLY, "--scenario-type",
          "fixed-seq-len"])
    assert capsys.readouterr().out.rstrip().endswith("5 jobs, 0 skipped")


@pytest.mark.parametrize(("kw", "needle"), [
    ({"concs": (0,)}, "--conc 0 selects nothing"),
    ({"smoke": True, "trim_conc": True}, "--smoke cannot be combined"),
    ({"smoke": True, "evals_only": True}, "--smoke cannot be combined"),
    ({"exp_names": ("dsr1_8k1k", "dsr1_8k1k")}, "--exp-names repeats a name"),
    ({"exp_names": ("nope_8k1k",)}, "no row is named nope_8k1k"),
    ({"exp_names": ("dsr1_8k1k",)}, "several rows are named dsr1_8k1k"),
])
def test_refusals_name_the_flag(kw, needle):
    with pytest.raises(MatrixError, match=needle.replace("(", r"\(")):
        _rows(config_keys=(FIXED_ONLY,), **kw)


def test_conc_keeps_only_the_named_concurrencies():
    rows = _rows(config_keys=("qwen3.5-fp8-h200-sglang-agentic-mtp",), concs=(8, 16, 999))
    assert sorted({r["conc"] for r in rows}) == [8, 16]
    assert not _rows(config_keys=("qwen3.5-fp8-h200-sglang-agentic-mtp",), concs=(999,))
