"""Plotly figures for the dashboard, one function per panel. Every string that came from a
result is HTML-escaped before it reaches a figure (plotly renders a subset of HTML)."""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from typing import Any

import plotly.graph_objects as go

from kvbench.results import Result

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B",
           "#FF9DA6", "#9D755D", "#BAB0AC"]
TIER_COLORS = {"device": "#4C78A8", "host": "#F58518", "external": "#54A24B"}
FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def arm_colors(results: list[Result]) -> dict[str, str]:
    arms = sorted({r.arm for r in results})
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _layout(fig: go.Figure, x_title: str, y_title: str, *, height: int = 380) -> go.Figure:
    fig.update_layout(
        template="plotly_white", height=height, font={"family": FONT, "size": 12},
        margin={"l": 64, "r": 20, "t": 10, "b": 10}, hovermode="closest",
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0,
                "font": {"size": 11}, "traceorder": "normal"},
        xaxis_title=x_title, yaxis_title=y_title)
    return fig


def _empty(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(text=esc(message), showarrow=False, xref="paper", yref="paper",
                       x=0.5, y=0.5, font={"size": 14, "color": "#888"})
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both axes (higher is better on both)."""
    front, best_y = [], float("-inf")
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best_y:
            front.append((x, y))
            best_y = y
    return sorted(front)


def throughput_vs_interactivity(results: list[Result], colors: dict[str, str]) -> go.Figure:
    fig = go.Figure()
    by_arm: dict[str, list[tuple[float, float, Result]]] = defaultdict(list)
    for r in results:
        x = _dig(r.request_metrics, "latency", "interactivity_tok_s", "p50")
        y = _dig(r.request_metrics, "throughput", "output_tok_s_per_gpu")
        if r.status == "ok" and x is not None and y is not None:
            by_arm[r.arm].append((x, y, r))
    for arm, pts in sorted(by_arm.items()):
        c = colors[arm]
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers+text",
            text=[f"c{p[2].conc}" for p in pts], textposition="top center",
            textfont={"size": 10, "color": c},
            marker={"size": 9, "color": c, "line": {"width": 1, "color": "white"}},
            name=esc(arm), legendgroup=esc(arm),
            hovertext=[f"{esc(p[2].exp_name)}<br>conc {p[2].conc}" for p in pts],
            hovertemplate="%{hovertext}<br>%{x:.1f} tok/s/user<br>%{y:.1f} tok/s/GPU"
                          "<extra></extra>"))
        front = pareto_front([(p[0], p[1]) for p in pts])
        fig.add_trace(go.Scatter(
            x=[p[0] for p in front], y=[p[1] for p in front], mode="lines",
            line={"color": c, "width": 2}, name=esc(arm) + " front",
            legendgroup=esc(arm), showlegend=False, hoverinfo="skip"))
    _layout(fig, "interactivity p50 (tokens/s per user)", "output throughput (tokens/s per GPU)")
    return fig if by_arm else _empty(fig, "no successful runs with request metrics")


def _by_arm_conc(results: list[Result], *path: str) -> dict[str, dict[int, list[float]]]:
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        v = _dig(r.request_metrics, *path)
        if r.status == "ok" and v is not None:
            out[r.arm][r.conc].append(v)
    return out


def latency_vs_concurrency(results: list[Result], colors: dict[str, str], metric: str,
                           label: str) -> go.Figure:
    fig = go.Figure()
    any_data = False
    for pct, dash in (("p50", "solid"), ("p90", "dash")):
        data = _by_arm_conc(results, "latency", metric, pct)
        for arm, by_conc in sorted(data.items()):
            concs = sorted(by_conc)
            means = [statistics.fmean(by_conc[c]) for c in concs]
            spread = [statistics.pstdev(by_conc[c]) if len(by_conc[c]) > 1 else 0
                      for c in concs]
            any_data = True
            fig.add_trace(go.Scatter(
                x=concs, y=means, mode="lines+markers", name=esc(arm),
                showlegend=pct == "p50", legendgroup=esc(arm),
                line={"color": colors[arm], "dash": dash, "width": 2},
                marker={"size": 7, "symbol": "circle" if pct == "p50" else "diamond"},
                error_y={"type": "data", "array": spread, "visible": any(spread),
                         "thickness": 1},
                hovertemplate=f"{esc(arm)}<br>conc %{{x}}<br>{pct} %{{y:.0f}} ms"
                              "<extra></extra>"))
    _layout(fig, "concurrency (session lanes)", f"{label} (ms)")
    fig.update_xaxes(type="log", dtick=0.30103)
    return fig if any_data else _empty(fig, "no successful runs with latency data")


def hit_rate_by_tier(results: list[Result], colors: dict[str, str]) -> go.Figure:
    rows = []
    for r in sorted(results, key=lambda r: (r.arm, r.conc, r.repeat)):
        cache = _dig(r.server_metrics, "cache") or {}
        if not r.server_metrics.get("present"):
            continue
        label = f"{esc(r.arm)} · c{r.conc}" + (f" · r{r.repeat}" if r.repeat else "")
        rows.append((label, cache))
    fig = go.Figure()
    for tier, key in (("device", "gpu_cache_hit_rate"), ("host", "cpu_cache_hit_rate"),
                      ("external", "external_cache_hit_rate")):
        fig.add_trace(go.Bar(
            y=[lab for lab, _ in rows], x=[100 * (c.get(key) or 0) for _, c in rows],
            orientation="h", name=f"{tier} tier", marker_color=TIER_COLORS[tier],
            hovertemplate=f"%{{y}}<br>{tier}: %{{x:.1f}} % of prompt tokens<extra></extra>"))
    _layout(fig, "prompt tokens served from cache (%)", "",
            height=max(260, 90 + 26 * len(rows)))
    fig.update_layout(barmode="stack", margin={"l": 10, "r": 20, "t": 10, "b": 10},
                      legend={"y": -0.12 if len(rows) > 8 else -0.2})
    fig.update_yaxes(automargin=True, autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig if rows else _empty(fig, "no server metrics in these results")


def timeline(results: list[Result], colors: dict[str, str], field: str, y_title: str,
             scale: float = 1.0) -> go.Figure:
    fig = go.Figure()
    any_data = False
    seen: set[str] = set()
    for r in sorted(results, key=lambda r: (r.arm, r.conc, r.repeat)):
        tl = _dig(r.server_metrics, "timeline") or {}
        ys = tl.get(field)
        if not ys or all(v is None for v in ys):
            continue
        any_data = True
        name = f"{esc(r.arm)} · c{r.conc}" + (f" · r{r.repeat}" if r.repeat else "")
        fig.add_trace(go.Scatter(
            x=tl["t_s"], y=[None if v is None else v * scale for v in ys], mode="lines",
            name=esc(r.arm), showlegend=r.arm not in seen, legendgroup=esc(r.arm),
            line={"color": colors[r.arm], "width": 1.6},
            opacity=0.85,
            hovertemplate=f"{name}<br>t=%{{x:.0f}} s<br>%{{y:.1f}}<extra></extra>"))
        seen.add(r.arm)
    _layout(fig, "time since the pre-run scrape (s)", y_title)
    return fig if any_data else _empty(fig, "no server timeline for this metric")


def energy_per_token(results: list[Result], colors: dict[str, str]) -> go.Figure:
    fig = go.Figure()
    by_arm: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        v = _dig(r.energy, "j_per_output_token")
        if r.status == "ok" and v is not None:
            by_arm[r.arm][r.conc].append(v)
    for arm, by_conc in sorted(by_arm.items()):
        concs = sorted(by_conc)
        fig.add_trace(go.Scatter(
            x=concs, y=[statistics.fmean(by_conc[c]) for c in concs], mode="lines+markers",
            name=esc(arm), line={"color": colors[arm], "width": 2},
            hovertemplate=f"{esc(arm)}<br>conc %{{x}}<br>%{{y:.2f}} J/token<extra></extra>"))
    _layout(fig, "concurrency (session lanes)", "GPU energy per output token (J)")
    fig.update_xaxes(type="log", dtick=0.30103)
    return fig if by_arm else _empty(fig, "no GPU telemetry in these results")
