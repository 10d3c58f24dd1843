"""Plotly figures for the dashboard, one function per panel. Every string that came from a
result is HTML-escaped before it reaches a figure (plotly renders a subset of HTML)."""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from typing import Any

import plotly.graph_objects as go

from kvbench.results import Result
from kvbench.results.compare import result_reuse

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B",
           "#FF9DA6", "#9D755D", "#BAB0AC"]
TIER_COLORS = {"device": "#4C78A8", "host": "#F58518", "external": "#54A24B",
               "recomputed": "#D0D4D9"}
FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"


def is_empty(fig: go.Figure) -> str | None:
    """The reason a figure has no data, or None when it has some."""
    meta = fig.layout.meta
    return meta.get("empty") if isinstance(meta, dict) else None


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
        # the top margin holds plotly's toolbar, so it never covers a trace or the legend
        margin={"l": 64, "r": 20, "t": 34, "b": 10}, hovermode="closest",
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0,
                "font": {"size": 11}, "traceorder": "normal"},
        xaxis_title=x_title, yaxis_title=y_title)
    return fig


def _concurrency_axis(fig: go.Figure, results: list[Result]) -> None:
    """A log axis ticked at the concurrencies that ran (4 and 6 share no power of two)."""
    concs = sorted({r.conc for r in results})
    fig.update_xaxes(type="log", tickvals=concs, ticktext=[str(c) for c in concs])


def _empty(fig: go.Figure, message: str) -> go.Figure:
    # marked, so the page hides the panel and says why instead of drawing an empty frame
    fig.update_layout(meta={"empty": message})
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


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def throughput_vs_interactivity(results: list[Result], colors: dict[str, str]) -> go.Figure:
    """One point per (arm, concurrency): the mean over repeats, with their sd as error bars."""
    fig = go.Figure()
    runs: dict[str, dict[int, list[tuple[float, float, Result]]]] = defaultdict(
        lambda: defaultdict(list))
    for r in results:
        x = _dig(r.request_metrics, "latency", "interactivity_tok_s", "p50")
        y = _dig(r.request_metrics, "throughput", "output_tok_s_per_gpu")
        if r.status == "ok" and x is not None and y is not None:
            runs[r.arm][r.conc].append((x, y, r))
    for arm, by_conc in sorted(runs.items()):
        c = colors[arm]
        concs = sorted(by_conc)
        xs = [_mean_sd([p[0] for p in by_conc[k]]) for k in concs]
        ys = [_mean_sd([p[1] for p in by_conc[k]]) for k in concs]
        n = [len(by_conc[k]) for k in concs]
        invalid = [sum(1 for p in by_conc[k] if p[2].valid is False) for k in concs]
        fig.add_trace(go.Scatter(
            x=[m for m, _ in xs], y=[m for m, _ in ys], mode="markers+text",
            text=[f"c{k}" for k in concs], textposition="top center",
            textfont={"size": 10, "color": c},
            error_x={"type": "data", "array": [sd for _, sd in xs], "visible": max(n) > 1,
                     "thickness": 1},
            error_y={"type": "data", "array": [sd for _, sd in ys], "visible": max(n) > 1,
                     "thickness": 1},
            marker={"size": 9, "color": c, "line": {"width": 1, "color": "white"},
                    "symbol": ["circle" if not bad else "circle-open" for bad in invalid]},
            name=esc(arm), legendgroup=esc(arm),
            hovertext=[f"{esc(arm)}<br>conc {k}, {m} run(s)" + (
                f", {bad} not valid" if bad else "") for k, m, bad in zip(
                concs, n, invalid, strict=True)],
            hovertemplate="%{hovertext}<br>%{x:.1f} tok/s/user<br>%{y:.1f} tok/s/GPU"
                          "<extra></extra>"))
        front = pareto_front([(x[0], y[0]) for x, y in zip(xs, ys, strict=True)])
        fig.add_trace(go.Scatter(
            x=[p[0] for p in front], y=[p[1] for p in front], mode="lines",
            line={"color": c, "width": 2}, name=esc(arm) + " front",
            legendgroup=esc(arm), showlegend=False, hoverinfo="skip"))
    _layout(fig, "interactivity p50 (tokens/s per user)", "output throughput (tokens/s per GPU)")
    return fig if runs else _empty(fig, "no successful runs with request metrics")


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
    _concurrency_axis(fig, results)
    return fig if any_data else _empty(fig, "no successful runs with latency data")


def _ideal_hit_rate(r: Result) -> float | None:
    return _dig(r.validity, "checks", "ideal_cache", "ideal_hit_rate")


def hit_rate_by_tier(results: list[Result], colors: dict[str, str]) -> go.Figure:
    """One bar per (arm, concurrency): each tier's share of prompt tokens, the mean over
    repeats (so a bar never passes 100 %), with the ideal-cache ceiling as a marker."""
    groups: dict[tuple[str, int], list[Result]] = defaultdict(list)
    for r in results:
        if r.server_metrics.get("present") and r.status == "ok":
            groups[(r.arm, r.conc)].append(r)
    rows = []
    for (arm, conc), rs in sorted(groups.items()):
        label = f"{esc(arm)} · c{conc}" + (f" · n={len(rs)}" if len(rs) > 1 else "")
        rows.append((label, rs))
    fig = go.Figure()
    for tier, key in (("device", "gpu_cache_hit_rate"), ("host", "cpu_cache_hit_rate"),
                      ("external", "external_cache_hit_rate")):
        stats = [_mean_sd([_dig(r.server_metrics, "cache", key) or 0 for r in rs])
                 for _, rs in rows]
        fig.add_trace(go.Bar(
            y=[lab for lab, _ in rows], x=[100 * m for m, _ in stats],
            customdata=[100 * sd for _, sd in stats],
            orientation="h", name=f"{tier} tier", marker_color=TIER_COLORS[tier],
            hovertemplate=f"%{{y}}<br>{tier}: %{{x:.1f}} % of prompt tokens "
                          "(sd %{customdata:.1f})<extra></extra>"))
    # the rest of the prompt tokens were prefilled again: InferenceX's cache-reuse view
    recomputed = [[v["recomputed"] for r in rs if (v := result_reuse(r)) is not None
                   and v.get("recomputed") is not None] for _, rs in rows]
    if any(recomputed):
        stats = [_mean_sd(vs) if vs else (0.0, 0.0) for vs in recomputed]
        fig.add_trace(go.Bar(
            y=[lab for lab, _ in rows], x=[100 * m for m, _ in stats],
            customdata=[100 * sd for _, sd in stats], orientation="h", name="recomputed",
            marker_color=TIER_COLORS["recomputed"],
            hovertemplate="%{y}<br>recomputed: %{x:.1f} % of prompt tokens "
                          "(sd %{customdata:.1f})<extra></extra>"))
    ideal = [(lab, [v for r in rs if (v := _ideal_hit_rate(r)) is not None]) for lab, rs in rows]
    ideal = [(lab, statistics.fmean(vs)) for lab, vs in ideal if vs]
    if ideal:
        fig.add_trace(go.Scatter(
            y=[lab for lab, _ in ideal], x=[100 * v for _, v in ideal], mode="markers",
            name="ideal-cache ceiling", marker={"symbol": "line-ns-open", "size": 18,
                                                "color": "#1f2328", "line": {"width": 2}},
            hovertemplate="%{y}<br>an unlimited cache: %{x:.1f} %<extra></extra>"))
    height = max(260, 90 + 26 * len(rows))
    _layout(fig, "share of prompt tokens (%)", "", height=height)
    fig.update_layout(barmode="stack", margin={"l": 10, "r": 20, "t": 34, "b": 10},
                      # 64 px under the plot area, below the x-axis title (legend y is a
                      # fraction of the plot area's height: the figure's less its margins)
                      legend={"y": -64 / (height - 44)})
    fig.update_yaxes(automargin=True, autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig if rows else _empty(fig, "no server metrics in these results")


DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def time_scale(r: Result) -> float:
    return float(_dig(r.request_metrics, "time_scale") or 1.0)


def timeline(results: list[Result], colors: dict[str, str], field: str, y_title: str,
             scale: float = 1.0) -> go.Figure:
    """One line per run; colour = arm, dash = concurrency (one legend entry per pair).
    Time is the engine's clock: a time-scaled run's wall seconds times its scale."""
    fig = go.Figure()
    any_data = False
    seen: set[tuple[str, int]] = set()
    concs = sorted({r.conc for r in results})
    scaled = any(time_scale(r) != 1.0 or (_dig(r.server_metrics, "timeline") or {}).get(
        "clock") == "engine" for r in results)
    for r in sorted(results, key=lambda r: (r.arm, r.conc, r.repeat)):
        tl = _dig(r.server_metrics, "timeline") or {}
        ys = tl.get(field)
        if not ys or all(v is None for v in ys):
            continue
        any_data = True
        # the engine's own clock where the scrapes carried it, else wall seconds x scale
        k = 1.0 if tl.get("clock") == "engine" else time_scale(r)
        key = (r.arm, r.conc)
        name = f"{esc(r.arm)} · c{r.conc}"
        fig.add_trace(go.Scatter(
            # a scrape that failed leaves a hole (None) in either series
            x=[None if t is None else t * k for t in tl.get("t_s") or []],
            y=[None if v is None else v * scale for v in ys],
            mode="lines", name=name, showlegend=key not in seen,
            legendgroup=name,
            line={"color": colors[r.arm], "width": 1.6,
                  "dash": DASHES[concs.index(r.conc) % len(DASHES)]},
            opacity=0.85,
            hovertemplate=f"{name}" + (f" · r{r.repeat}" if r.repeat else "")
                          + "<br>t=%{x:.0f} s<br>%{y:.1f}<extra></extra>"))
        seen.add(key)
    clock = "engine clock, s" if scaled else "s"
    _layout(fig, f"time since the pre-run scrape ({clock})", y_title)
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
    _concurrency_axis(fig, results)
    return fig if by_arm else _empty(fig, "no GPU telemetry in these results")
