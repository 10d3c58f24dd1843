"""The capacity panel: sessions under the SLO vs host-tier GB, the simulator's curve with the
measured points beside it, read from `kvbench capacity`'s capacity.json files (plain JSON:
the report reads files, it imports nothing of the capacity package)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from kvbench.report.figures import PALETTE, _empty, _layout, esc

CAPACITY_FILE = "capacity.json"
PANEL_ID = "p-capacity"
TITLE = "Sessions under the SLO vs host DRAM"
CAPTION = ("Largest number of live agent sessions that meets the SLO at each host-tier size "
           "per rank. Line: the embedded simulator; diamonds: measured on a server; the "
           "ring marks the knee (the smallest size reaching the most sessions).")


def find_capacity_docs(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """capacity.json documents under files or directories (recursively); others skipped."""
    docs = []
    for p in map(Path, paths):
        files = [p] if p.is_file() and p.name == CAPACITY_FILE else (
            sorted(p.rglob(CAPACITY_FILE)) if p.is_dir() else [])
        for f in files:
            doc = json.loads(f.read_text())
            if isinstance(doc, dict) and doc.get("kind") == "kvbench-capacity":
                docs.append(doc)
    return docs


def _hover(point: dict, kind: str) -> str:
    steps = ", ".join(f"{s['concurrency']}{'' if s['passed'] else '✗'}"
                      for s in point.get("steps", []))
    flags = " ".join(point.get("engine_args") or [])
    return (f"{kind}: host {point['host_gb']:g} GB → {point['max_sessions']} sessions"
            f"<br>probed: {esc(steps)}<br>{esc(flags)}")


def capacity_figure(docs: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure()
    if not docs:
        return _layout(_empty(fig, "no capacity.json"), "host GB per rank", "sessions")
    for i, doc in enumerate(docs):
        color = PALETTE[i % len(PALETTE)]
        label = esc(doc.get("target", {}).get("label", f"target {i}"))
        pts = sorted(doc.get("predicted", []), key=lambda p: p["host_gb"])
        fig.add_trace(go.Scatter(
            x=[p["host_gb"] for p in pts], y=[p["max_sessions"] for p in pts],
            mode="lines+markers", line={"color": color, "shape": "hv"},
            name=f"{label} (simulated)", hovertext=[_hover(p, "simulated") for p in pts],
            hoverinfo="text"))
        measured = doc.get("measured", [])
        if measured:
            fig.add_trace(go.Scatter(
                x=[p["host_gb"] for p in measured], y=[p["max_sessions"] for p in measured],
                mode="markers", marker={"symbol": "diamond", "size": 13, "color": color,
                                        "line": {"color": "#1f2328", "width": 1}},
                name=f"{label} (measured)", hovertext=[_hover(p, "measured") for p in measured],
                hoverinfo="text"))
        knee = doc.get("knee")
        if knee:
            fig.add_trace(go.Scatter(
                x=[knee["host_gb"]], y=[knee["max_sessions"]], mode="markers",
                marker={"symbol": "circle-open", "size": 20, "color": color,
                        "line": {"width": 2}},
                name=f"{label} knee", hovertext=[esc(knee["text"])], hoverinfo="text"))
    fig = _layout(fig, "host-tier GB per rank", "sessions meeting the SLO")
    fig.update_yaxes(rangemode="tozero")
    return fig


def capacity_panel(docs: list[dict[str, Any]]) -> tuple[str, str, str, go.Figure, bool]:
    """The panel in the dashboard's (id, title, caption, figure, wide) form."""
    return PANEL_ID, TITLE, CAPTION, capacity_figure(docs), True


def render_capacity(docs: list[dict[str, Any]]) -> str:
    """A self-contained page of the panel and each knee's sentence (no results needed)."""
    from plotly.offline import get_plotlyjs

    from kvbench.report.page import CSS, _script_json

    fig = capacity_figure(docs).to_plotly_json()
    knees = "".join(f"<li>{esc(d.get('target', {}).get('label', ''))}: "
                    f"{esc((d.get('knee') or {}).get('text', 'no curve'))} "
                    f"<span class='muted'>(SLO: {esc(_slo_text(d.get('slo') or {}))})</span>"
                    f"</li>" for d in docs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kvbench capacity</title>
<style>{CSS}</style><script>{get_plotlyjs()}</script></head>
<body><header><h1>kvbench capacity</h1><div class="sub">{esc(CAPTION)}</div></header>
<main><div class="grid"><section class="card wide"><h2>{esc(TITLE)}</h2><ul>{knees}</ul>
<div id="{PANEL_ID}" class="plot"></div></section></div></main>
<script>const FIG = {_script_json(fig)};
Plotly.newPlot("{PANEL_ID}", FIG.data, FIG.layout, {{displaylogo:false, responsive:true}});
</script></body></html>
"""


def _slo_text(slo: dict) -> str:
    parts = [f"{name} {op} {slo[key]:g}" for key, name, op in (
        ("ttft_p90_ms", "TTFT p90 ms", "<="), ("itl_p99_ms", "ITL p99 ms", "<="),
        ("interactivity_p50_tok_s", "interactivity p50 tok/s", ">="),
        ("failed_ratio", "failed ratio", "<=")) if slo.get(key) is not None]
    return ", ".join(parts)


def write_capacity_page(paths: Sequence[Path], out: Path) -> Path:
    from kvbench.files import write_atomic

    return write_atomic(Path(out), render_capacity(find_capacity_docs(paths)))
