from __future__ import annotations

import json

import pytest

from kvbench.cli import main


def run(capsys, *args):
    """`kvbench plan --sizing budget`: these test the planner's table and JSON; the default
    (launcher sizing) is tests/plan/test_launcher_sizing.py's."""
    main(["plan", "--sizing", "budget", *args])
    return capsys.readouterr().out


def test_table_shows_budget_pools_and_verdict(shared_data, capsys):
    d = shared_data / "inferencex"
    out = run(capsys, "--config-files", str(d / "nvidia-master.yaml"),
              "--config-keys", "qwen3.5-fp8-b300-sglang-agentic-mtp", "--min-conc", "56")
    assert "qwen3.5_tp2_conc56_kvdram-hicache_spec-mtp" in out
    assert "599" in out and "595" in out and "ok" in out


def test_details_print_the_arithmetic(shared_data, capsys):
    d = shared_data / "inferencex"
    out = run(capsys, "--config-files", str(d / "nvidia-master.yaml"), "--details",
              "--config-keys", "glm5.2-fp4-b300-sglang-agentic-mtp", "--max-conc", "1")
    assert "budget: 2,399 GB" in out and "per rank:" in out


def test_json_is_one_object_per_job(shared_data, capsys):
    d = shared_data / "inferencex"
    out = run(capsys, "--config-files", str(d / "nvidia-master.yaml"), "--format", "json",
              "--config-keys", "minimaxm3-fp4-b300-trtllm-agentic-mtp")
    plans = json.loads(out)
    assert len(plans) == 11 and all(p["within-budget"] for p in plans)


def test_json_of_a_disaggregated_row_plans_every_worker(shared_data, capsys):
    d = shared_data / "inferencex"
    out = run(capsys, "--config-files", str(d / "amd-master.yaml"), "--format", "json",
              "--config-keys", "dsv4-fp4-mi355x-sglang-disagg-agentic-hicache-mtp",
              "--max-conc", "1")
    plan, = json.loads(out)
    assert [(w["role"], w["nodes"]) for w in plan["workers"]] == [("prefill", [0]),
                                                                  ("decode", [1])]
    prefill, decode = (w["plan"] for w in plan["workers"])
    assert prefill["backend"] == "hicache" and prefill["within-budget"]
    assert decode["backend"] is None and decode["host-pools"] == []
    assert plan["workers-errors"] == []


def test_bad_format_is_a_clear_error(shared_data):
    d = shared_data / "inferencex"
    with pytest.raises(SystemExit) as e:
        main(["plan", "--config-files", str(d / "nvidia-master.yaml"), "--format", "xml"])
    assert e.value.code == 2
