"""The capacity panel: the simulated curve, measured points and the knee from capacity.json,
in a self-contained page that renders in headless Chromium with no errors."""

from __future__ import annotations

import json
from pathlib import Path

from kvbench.report.capacity import capacity_figure, find_capacity_docs, render_capacity

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
EVIL = "<img src=x onerror='window.__pwned=1'>"


def _point(gb: float, sessions: int) -> dict:
    return {"host_gb": gb, "gpu_kv_tokens": 1000, "host_kv_tokens": int(gb * 100),
            "max_sessions": sessions, "first_failing": sessions + 1,
            "engine_args": ["--hicache-size", f"{gb:g}"],
            "steps": [{"concurrency": sessions, "passed": True},
                      {"concurrency": sessions + 1, "passed": False}]}


def _doc(tmp_path: Path) -> Path:
    doc = {"kind": "kvbench-capacity", "version": 1, "target": {"label": EVIL},
           "workload": {"sessions": 8}, "slo": {"ttft_p90_ms": 100, "failed_ratio": 0.01},
           "ceiling": 8, "predicted": [_point(0, 2), _point(10, 4), _point(20, 6),
                                       _point(30, 6)],
           "knee": {"host_gb": 20, "max_sessions": 6, "resident_sessions": 2, "plateau": True,
                    "engine_args": [], "text": "host 20 GB -> 6 sessions; beyond 20 GB no gain"},
           "measured": [_point(20, 5)]}
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(doc))
    (tmp_path / "other.json").write_text("{}")
    return path


def test_figure_draws_curve_measured_and_knee(tmp_path):
    docs = find_capacity_docs([tmp_path, _doc(tmp_path)])
    assert len(docs) == 2  # the directory and the file name the same document
    fig = capacity_figure(docs[:1])
    curve, measured, knee = fig.data
    assert list(curve.x) == [0, 10, 20, 30] and list(curve.y) == [2, 4, 6, 6]
    assert list(measured.x) == [20] and list(measured.y) == [5]
    assert list(knee.x) == [20] and list(knee.y) == [6]
    assert EVIL not in curve.name and "&lt;img" in curve.name


def test_page_renders_in_headless_chromium(tmp_path, artifacts_dir):
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "capacity.html"
    page_path.write_text(render_capacity(find_capacity_docs([_doc(tmp_path)])))
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.goto(page_path.as_uri(), wait_until="load")
            page.wait_for_selector("#p-capacity .main-svg")
            traces = page.eval_on_selector_all("#p-capacity .scatterlayer .trace",
                                               "els => els.length")
            pwned = page.evaluate("window.__pwned === undefined")
            page.screenshot(path=str(artifacts_dir / "capacity-panel.png"))
        finally:
            browser.close()
    assert not problems
    assert traces == 3
    assert pwned


def test_a_capacity_json_named_alone_adds_the_panel_not_its_steps(tmp_path):
    """The H200 dashboard: the runs beside the measured capacity point. The capacity steps are
    another workload (8 sessions, 5 turns): named as capacity.json they add the panel only; named
    as their directory their result.json files join the runs (and pool with the conc-4 arm)."""
    from pathlib import Path

    from kvbench.report import write_dashboard

    h200 = Path(__file__).resolve().parents[2] / "benchmarks/results/h200/vllm"
    alone = write_dashboard([h200 / "runs", h200 / "capacity" / "capacity.json"],
                            tmp_path / "alone.html").read_text()
    assert "p-capacity" in alone and "host24gb" not in alone
    both = write_dashboard([h200 / "runs", h200 / "capacity"], tmp_path / "both.html").read_text()
    assert "p-capacity" in both and "host24gb_conc3" in both
