"""`kvbench plan --predict` / `simulate-jobs --prune` on a hand-built case.

Sessions re-send a 65,536-token context (cases.py). The quickstart's row as Qwen3-8B bf16 on
one H100 of a 1 TiB node holds 5 such contexts on the GPU and, with its 67 GB write-through
host tier, 6 in host DRAM: at 2 sessions both arms hit (benefit 0: within noise, kept); at 6
the resident arm thrashes and recomputes every turn while the offload arm loads from host (a
large benefit)."""

from __future__ import annotations

import json

import pytest
from capacity.cases import write_sessions

from kvbench.cli import main
from kvbench.sweep.quickstart import RECIPE


@pytest.fixture
def case(tmp_path, monkeypatch):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.read_text().replace("conc-list: [3, 6, 12]", "conc-list: [2, 6]")
                      .replace("Qwen/Qwen3-32B", "Qwen/Qwen3-8B")
                      .replace("model-prefix: qwen3-32b", "model-prefix: qwen3-8b")
                      .replace("precision: fp8", "precision: bf16"))
    (tmp_path / "runners.yaml").write_text((RECIPE.parent / "runners.yaml").read_text()
                                           .replace("2_063_837", "1_048_576"))
    monkeypatch.chdir(tmp_path)  # the CI matrix names its files relative to the checkout
    traces = write_sessions(tmp_path / "traces", sessions=8, context_pages=1024)
    return recipe, traces


def _run(capsys, *argv: str) -> dict | list:
    main(list(argv))
    return json.loads(capsys.readouterr().out)


def test_rows_ranked_by_predicted_benefit(case, capsys):
    recipe, traces = case
    preds = _run(capsys, "plan", "--config-files", str(recipe), "--predict", "--trace",
                 str(traces), "--bounds", "once", "--format", "json")
    assert [(p["conc"], p["verdict"]) for p in preds] == [(6, "above threshold"),
                                                           (2, "within noise")]
    big, none = preds
    assert big["benefit"] > 0.9  # TTFT p90: a recompute of 65,536 tokens vs a host load
    assert big["arms"]["resident"]["hit_rate"] < 0.5 < 0.9 < big["arms"]["offload"]["hit_rate"]
    assert abs(none["benefit"]) < 0.01
    assert big["rows"] == ["qwen3-8b_tp1_conc6_kvdram-hicache", "qwen3-8b_tp1_conc6_kvnone"]


def test_pruned_matrix_is_the_run_matrix_of_the_kept_rows(case, capsys):
    recipe, traces = case
    # threshold above the conc-6 benefit: only the undecided conc-2 pair is left to measure
    pruned = _run(capsys, "simulate-jobs", "--config-files", str(recipe), "--trace",
                  str(traces), "--bounds", "once", "--prune", "--threshold", "0.99")
    full = _run(capsys, "run", str(recipe), "--trace", str(traces), "--max-conc", "2",
                "--emit", "github-matrix")
    assert [e["name"] for e in pruned["include"]] == ["qwen3-8b_tp1_conc2_kvnone",
                                                      "qwen3-8b_tp1_conc2_kvdram-hicache"]
    assert pruned == full
    via_plan = _run(capsys, "plan", "--config-files", str(recipe), "--predict", "--trace",
                    str(traces), "--bounds", "once", "--threshold", "0.99", "--emit",
                    "github-matrix")
    assert via_plan == pruned


def test_noise_must_be_below_threshold(case, capsys):
    recipe, traces = case
    with pytest.raises(SystemExit) as e:
        main(["plan", "--config-files", str(recipe), "--predict", "--trace", str(traces),
              "--noise", "0.5", "--threshold", "0.2"])
    assert e.value.code == 2
    assert "--noise must be >= 0 and below --threshold" in capsys.readouterr().err


def test_a_row_whose_warm_up_cannot_run_says_why(capsys):
    """A real row on the default AgentX workload: Kimi-K3 on GB200 at conc 256, four DP ranks
    of 290,304 GPU KV tokens each. The warm-up sends 346K-token prompts that no rank's pool
    holds; agentx-harness 1.0.12 aborts a run whose warm-up fails, so no profiled request
    runs, and the prediction names that and the refusal, not "no request finished"."""
    from conftest import REPO

    data = REPO / "tests" / "data" / "inferencex"
    preds = _run(capsys, "plan", "--config-files", str(data / "nvidia-master.yaml"),
                 "--runner-config", str(data / "runners.yaml"), "--config-keys",
                 "kimik3-fp4-gb200-dynamo-vllm-agentic", "--min-conc", "256", "--max-conc",
                 "256", "--predict", "--format", "json")
    [offload] = [p for p in preds if p["exp-name"].endswith("kvdram-vllm-simple")]
    assert offload["verdict"] == "not simulated"
    assert offload["reason"].startswith("the warm-up failed on the resident arm, so no "
                                        "profiled request ran")
    assert "maximum context length is 290304 tokens" in offload["reason"]
    assert "more KV blocks than the GPU pool holds" in offload["reason"]
