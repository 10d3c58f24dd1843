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


def _open(browser, html: Path, problems: list[str]):
    """A page with the dashboard loaded and every plot drawn; console errors, page errors and
    any network request land in `problems`."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: problems.append(f"network: {r.url}")
            if not r.url.startswith(("file:", "data:", "blob:")) else None)
    page.goto(html.as_uri(), wait_until="load")
    page.wait_for_function("document.querySelectorAll('.plot .main-svg').length"
                           " >= document.querySelectorAll('.plot').length")
    return page


@pytest.mark.slow
def test_dashboard_renders_in_headless_chromium(dashboard, artifacts_dir):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (.ci/install does)"
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = _open(browser, dashboard, problems)
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


@pytest.fixture(scope="module")
def doubled(tmp_path_factory) -> Path:
    """`kvbench report` over two copies of the same results (issue 15: bars stacked past
    100 % when two runs of one arm shared a label), with time-scaled runs and no telemetry."""
    import os
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    root = tmp_path_factory.mktemp("doubled")
    one = root / "a"
    for conc in (4, 8):
        for offload in (False, True):
            job_dir, _ = make_job(one, "sim", conc, offload)
            raw = read_json(job_dir / "result.json")
            raw["request_metrics"]["time_scale"] = 50.0
            raw["telemetry"] = {"present": False, "reason": "not sampled"}
            raw["energy"] = None
            write_json_atomic(job_dir / "result.json", raw)
    shutil.copytree(one, root / "b")
    out = root / "dashboard.html"
    res = subprocess.run([sys.executable, "-m", "kvbench", "report", str(one), str(root / "b"),
                          "-o", str(out)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert res.returncode == 0, res.stderr
    return out


def test_two_copies_average_instead_of_stacking(doubled):
    results = load_results([doubled.parent / "a", doubled.parent / "b"])
    figs = {pid: fig for pid, _, _, fig, _ in panels(results)}
    bars = [t for t in figs["p-hits"].data if t.type == "bar"]
    labels = list(bars[0].y)
    assert len(labels) == 4 and all("n=2" in lab for lab in labels)  # one bar per arm x conc
    for i in range(len(labels)):
        assert sum(t.x[i] for t in bars) <= 100.0 + 1e-9
    # the engine clock: 40 scrapes 15 s apart at 50x
    gpu = [t for t in figs["p-gpu-kv"].data]
    assert max(gpu[0].x) == pytest.approx(41 * 15 * 50)
    assert "engine clock" in figs["p-gpu-kv"].layout.xaxis.title.text
    assert {t.name for t in gpu if t.showlegend} == {
        f"{arm} · c{c}" for arm in {r.arm for r in results} for c in (4, 8)}
    # no GPU telemetry: the energy panel is left out and the page says why
    assert "Not shown, for want of data: Energy per output token" in doubled.read_text()


@pytest.mark.slow
def test_doubled_report_in_chromium_has_hit_rates_at_most_one(doubled, artifacts_dir):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            errors: list[str] = []
            page = _open(browser, doubled, errors)
            plots = page.eval_on_selector_all(
                ".plot", "els => els.map(e => [e.id, (e.data || []).filter(t => "
                         "(t.x || []).length > 0).length])")
            stacks = page.evaluate(
                "() => { const d = document.getElementById('p-hits').data"
                ".filter(t => t.type === 'bar'); return d[0].y.map((_, i) => "
                "d.reduce((s, t) => s + t.x[i], 0)); }")
            # the toolbar sits above the plot area, not over the first trace or legend
            overlap = page.evaluate(
                "() => [...document.querySelectorAll('.plot')].map(p => {"
                "const bar = p.querySelector('.modebar'); const area = p.querySelector("
                "'.cartesianlayer, .bglayer'); if (!bar || !area) return 0;"
                "const b = bar.getBoundingClientRect(), a = p.querySelector('.bglayer rect,"
                " .draglayer .nsewdrag').getBoundingClientRect();"
                "return Math.max(0, b.bottom - a.top); })")
            page.screenshot(path=str(artifacts_dir / "dashboard-doubled.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert len(plots) == 8  # the energy panel is hidden: no telemetry
    for pid, with_data in plots:
        assert with_data > 0, f"panel {pid} has no data"
    assert stacks and all(0 <= v <= 100.0 + 1e-9 for v in stacks), stacks
    assert max(overlap) <= 1, overlap
