"""Settings precedence, token parsing and templates."""

from __future__ import annotations

import pytest

from kvbench.engines.argv import Settings, render_value
from kvbench.errors import EngineError
from kvbench.expr import evaluate, expand


def test_stronger_source_wins_and_weaker_is_recorded_as_shadowed():
    s = Settings("arg")
    s.set("--page-size", 256, "default", "data: dsv4")
    s.set("--page-size", 64, "plan", "plan.page_size_tokens")
    s.set("--page-size", 16, "default", "data: later rule")  # weaker than plan: ignored
    s.set("--tp-size", 8, "job", "row.tp")
    s.set("--tp-size", 4, "override", "--engine-arg")
    assert s.argv() == ["--page-size", "64", "--tp-size", "4"]
    page = next(x for x in s.sources() if x.flag == "--page-size")
    assert page.source == "plan"
    assert page.shadowed == ["256 (default: data: dsv4)", "16 (default: data: later rule)"]


def test_equal_rank_later_rule_wins_and_false_removes():
    s = Settings("arg")
    s.set("--watchdog-timeout", 1800, "default", "common")
    s.set("--watchdog-timeout", 3600, "default", "dsv4")
    s.set("--enable-metrics", True, "default", "common")
    s.set("--enable-metrics", False, "override", "user")
    assert s.argv() == ["--watchdog-timeout", "3600"]


def test_dict_values_merge_and_render_as_compact_json():
    s = Settings("arg")
    s.set("--speculative-config", {"method": "mtp", "num_speculative_tokens": 3}, "default", "a")
    s.set("--speculative-config", {"synthetic_acceptance_length": 2.49}, "default", "b")
    assert s.argv() == ["--speculative-config", '{"method":"mtp","num_speculative_tokens":3,'
                        '"synthetic_acceptance_length":2.49}']


def test_token_fragments_parse_flags_values_and_negative_numbers():
    s = Settings("arg")
    s.set_tokens(["--a", "1", "--flag", "--b=x", "--neg", "-1", "--many", "1", "2"], "plan", "p")
    assert s.argv() == ["--a", "1", "--flag", "--b", "x", "--neg", "-1", "--many", "1", "2"]
    with pytest.raises(EngineError, match="expected a flag"):
        s.set_tokens(["oops"], "plan", "p")


def test_rename_moves_value_and_keeps_provenance():
    s = Settings("arg")
    s.set("--cuda-graph-max-bs-decode", 8, "default", "common")
    s.rename("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs", "old version")
    assert s.argv() == ["--cuda-graph-max-bs", "8"]
    assert "renamed from --cuda-graph-max-bs-decode" in s.sources()[0].detail


def test_templates_compute_from_job_numbers_only():
    names = {"conc": 56, "tp": 4, "host": "127.0.0.1", "engine_port": 30001}
    assert evaluate("min(conc, 64)", names, "t") == 56
    assert evaluate("ceil(2 * conc / tp)", names, "t") == 28
    assert evaluate("8192 * tp if tp > 2 else 8192", names, "t") == 32768
    value, used = expand({"a": "${2 * conc}", "b": ["http://${host}:${engine_port}"]}, names, "t")
    assert value == {"a": 112, "b": ["http://127.0.0.1:30001"]}
    assert used == ["2 * conc", "host", "engine_port"]
    with pytest.raises(EngineError, match="unknown name 'gpus'"):
        evaluate("gpus * 2", names, "t")
    with pytest.raises(EngineError, match="unsupported expression"):
        evaluate("__import__('os')", names, "t")
    with pytest.raises(EngineError, match="unsupported expression"):
        evaluate("conc.real", names, "t")


def test_render_value():
    assert render_value(0.8) == "0.8"
    assert render_value(True) == "true"
    assert render_value(16384) == "16384"
