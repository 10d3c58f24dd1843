"""The dashboard in headless Chromium: loads offline with no console errors, every panel
holds a plot, and text from results is escaped."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.results_data import make_job

from kvbench.files import read_json, write_json_atomic
from kvbench.report import write_dashboard
from kvbench.report.page import panels
from kvbench.results import load_results

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
EVIL = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned=2'>"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    for framework in ("sglang", "vllm", "sim"):
        for conc in (4, 8, 16, 32):
            for offload in (False, True):
                make_job(root, framework, conc, offload)
    for rep in (1, 2):
        make_job(root, "sglang", 8, True, repeat=rep)
    make_job(root, "vllm", 64, True, error_every=3)  # a failed job shows in the table
    job_dir, _ = make_job(root, "sim", 2, True)
    raw = read_json(job_dir / "result.json")
    raw["exp_name"] = EVIL
    raw["warnings"].append(EVIL)
    write_json_atomic(job_dir / "result.json", raw)
    return write_dashboard([root], root / "dashboard.html")


def test_every_engine_fills_the_server_panels(dashboard):
    results = load_results([dashboard.parent])
    figs = {pid: fig for pid, _, _, fig, _ in panels(results)}
    for pid in ("p-hits", "p-gpu-kv", "p-queue", "p-host"):
        names = " ".join(f"{t.name} {' '.join(map(str, t.y or ()))}" for t in figs[pid].data)
        for framework in ("sglang", "vllm", "sim"):
            assert framework in names, (pid, framework)


def test_html_is_self_contained_and_escaped(dashboard):
    text = dashboard.read_text()
    assert "<script>window.__pwned" not in text
    assert "onerror='window" not in text
    # plotly is inline: no external script, stylesheet or font is referenced
    assert "<script src" not in text and "<link" not in text


@pytest.mark.slow
def test_dashboard_renders_in_headless_chromium(dashboard, artifacts_dir):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/install does)"
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: problems.append(f"network: {r.url}")
                    if not r.url.startswith(("file:", "data:", "blob:")) else None)
            page.goto(dashboard.as_uri(), wait_until="load")
            page.wait_for_function("document.querySelectorAll('.plot .main-svg').length"
                                   " >= document.querySelectorAll('.plot').length")
            plots = page.eval_on_selector_all(
                ".plot", "els => els.map(e => [e.id, (e.data || []).length, "
                         "e.querySelectorAll('.main-svg').length])")
            pwned = page.evaluate("window.__pwned === undefined ? null : window.__pwned")
            # the filter box hides rows that do not match
            total = page.eval_on_selector_all("#runs tbody tr", "rs => rs.length")
            page.fill("#q", "vllm")
            shown = int(page.text_content("#shown"))
            evil_cell = page.locator("#runs tbody tr", has_text="window.__pwned").count()
            page.fill("#q", "")
            page.screenshot(path=str(artifacts_dir / "dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert len(plots) == 9
    for pid, traces, svgs in plots:
        assert traces > 0 and svgs > 0, f"panel {pid} has no plot"
    assert pwned is None
    assert evil_cell == 1  # the text shows literally, as text
    assert 0 < shown < total
