"""Hand-computed checks of the dashboard's pieces."""

from __future__ import annotations

import json

from kvbench.report.figures import esc, pareto_front
from kvbench.report.page import _script_json


def test_pareto_front_keeps_only_undominated_points():
    pts = [(10, 100), (20, 90), (15, 80), (30, 50), (5, 100), (30, 40)]
    # (15, 80) is beaten by (20, 90); (5, 100) by (10, 100); (30, 40) by (30, 50)
    assert pareto_front(pts) == [(10, 100), (20, 90), (30, 50)]
    assert pareto_front([]) == []


def test_script_json_cannot_close_the_script_element():
    text = _script_json({"name": "</script><script>alert(1)</script>&"})
    assert "</script>" not in text and "<" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>&"}


def test_esc_escapes_markup_and_quotes():
    assert esc("<b a='x'>&") == "&lt;b a=&#x27;x&#x27;&gt;&amp;"


def test_arms_that_differ_only_in_backend_settings_are_kept_apart():
    """The H200 SGLang runs: HiCache write_through and write_through_selective share an arm
    name (offload-hicache); the dashboard tells them apart by the setting that differs, and
    leaves the resident arm's name alone."""
    from pathlib import Path

    from kvbench.report import tag_backend_settings
    from kvbench.results import load_results

    runs = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/sglang/runs"
    results = load_results([runs])
    assert len({r.arm for r in results}) == 2  # before: two policies pooled as one arm
    tag_backend_settings(results)
    arms = sorted({r.arm for r in results})
    assert arms == ["sglang qwen3-8b tp1 offload-hicache [write-policy=write_through]",
                    "sglang qwen3-8b tp1 offload-hicache [write-policy=write_through_selective]",
                    "sglang qwen3-8b tp1 resident"]
