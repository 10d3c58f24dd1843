"""Small rules of the CLI boundary: file modes, contradictory or unknown filters, a plan
command whose every plan is refused."""

from __future__ import annotations

import os
import stat

import pytest
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.cli import main
from kvbench.files import write_atomic, write_json_atomic


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        write_json_atomic(tmp_path / "result.json", {"a": 1})
        write_atomic(tmp_path / "dashboard.html", "<html></html>")
    finally:
        os.umask(old)
    for name in ("result.json", "dashboard.html"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode


def _error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 2
    return capsys.readouterr().err


SELECT = ("--config-files", str(CONFIGS[1]), "--runner-config", str(RUNNERS))


def test_single_and_multi_node_together_is_an_error(capsys):
    err = _error(capsys, "matrix", *SELECT, "--single-node", "--multi-node")
    assert err.startswith("error: --single-node and --multi-node cannot be combined")


def test_unknown_precision_is_refused_with_the_allowed_ones(capsys):
    err = _error(capsys, "matrix", *SELECT, "--precision", "fp9")
    first = err.splitlines()[0]
    assert first.startswith("error: unknown --precision 'fp9' (allowed: ")
    assert "fp4" in first and "fp8" in first


def test_unknown_framework_suggests_the_close_one(capsys):
    err = _error(capsys, "matrix", *SELECT, "--framework", "sglng")
    assert "did you mean 'sglang'?" in err


def test_plan_exits_non_zero_when_every_plan_is_refused(tmp_path, capsys):
    recipe = tmp_path / "glm.yaml"
    recipe.write_text(
        "glm5.2-fp4-b300-sglang-agentic-mtp:\n  image: lmsysorg/sglang:v0.5.16-cu130\n"
        "  model: nvidia/GLM-5.2-NVFP4\n  model-prefix: glm5.2\n  runner: cluster:b300-nv\n"
        "  precision: fp4\n  framework: sglang\n  multinode: false\n  scenarios:\n"
        "    agentic-coding:\n    - dram-utilization: 0.80\n      search-space:\n"
        "      - { tp: 8, ep: 8, spec-decoding: mtp, kv-offloading: dram,\n"
        "          kv-offload-backend: { name: hicache, size-gb-per-rank: 270 },\n"
        "          conc-list: [12] }\n")
    err = _error(capsys, "plan", "--config-files", str(recipe), "--runner-config", str(RUNNERS))
    assert "error: every one of the 1 selected plans is refused" in err
