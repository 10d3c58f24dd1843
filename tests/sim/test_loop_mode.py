"""`kvbench simulate` defaults: closed loop at a stated concurrency unless --open-loop; an
open loop that cannot keep up with the trace says so; errors come with their reasons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.cli import main

# the eight Claude Code sessions shipped with kvbench (85 requests over ~65 minutes)
BUNDLED = Path(__file__).resolve().parents[2] / "src" / "kvbench" / "workload" / "data" / (
    "claude-code")


@pytest.fixture()
def bundled() -> Path:
    return BUNDLED


def _run(capsys, *args: str) -> tuple[dict, str]:
    main(["simulate", *args, "--format", "json"])
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def test_default_is_closed_loop_at_a_stated_concurrency(bundled, capsys):
    doc, err = _run(capsys, "--trace", str(bundled))
    assert doc["setup"]["concurrency"] == 8
    assert "closed loop: 8 session lanes" in err
    assert "open_loop" not in doc


def test_open_loop_that_falls_behind_says_so(bundled, capsys):
    # 65 minutes of sessions squeezed into 39 s: a backlog, not latency
    doc, err = _run(capsys, "--trace", str(bundled), "--open-loop", "--arrival-scale",
                    "0.01")
    assert doc["setup"]["concurrency"] is None
    assert doc["open_loop"]["kept_up"] is False
    assert "open loop fell behind the trace" in err
    # at the trace's own pace the same server keeps up
    doc, err = _run(capsys, "--trace", str(bundled), "--open-loop")
    assert doc["open_loop"]["kept_up"] is True and "fell behind" not in err


def test_conflicting_loop_options_are_refused(bundled, capsys):
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--trace", str(bundled), "--open-loop", "--concurrency", "4"])
    assert e.value.code == 2
    assert "--concurrency (closed loop) or --open-loop, not both" in capsys.readouterr().err


def test_prompts_over_the_gpu_tier_are_context_refusals(bundled, capsys):
    # a GPU tier of 4,096 tokens holds none of these prompts (10K+ tokens): a server on it
    # serves no longer context, so all 85 are refused as over the context, not failures
    doc, _ = _run(capsys, "--trace", str(bundled), "--gpu-tokens", "4096")
    assert doc["errors"] == 0 and doc["errors_by_reason"] == {}
    assert doc["rejected"]["context"] == 85
    assert doc["rejected"]["example"].startswith(
        "rejected: context: This model's maximum context length is 4096 tokens.")
