"""Assemble the self-contained dashboard: plotly bundled inline, figures as escaped JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kvbench import __version__
from kvbench.redaction import redact_text
from kvbench.report import figures as F
from kvbench.report.figures import esc
from kvbench.report.table import header_row, run_rows
from kvbench.results import Result

CSS = """
:root { --fg:#1f2328; --muted:#6e7781; --line:#d8dee4; --bg:#f6f8fa; --card:#fff; }
* { box-sizing:border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,
  sans-serif; color:var(--fg); background:var(--bg); }
header { padding:20px 28px 12px; background:var(--card); border-bottom:1px solid var(--line); }
h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
.sub { color:var(--muted); }
.stats { display:flex; gap:12px; margin-top:12px; flex-wrap:wrap; }
.stat { background:var(--bg); border:1px solid var(--line); border-radius:8px;
  padding:6px 12px; }
.stat b { font-size:18px; display:block; }
main { padding:20px 28px 40px; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(560px,1fr)); gap:18px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:14px 16px 6px; min-width:0; }
.card h2 { margin:0; font-size:15px; font-weight:600; }
.card p { margin:2px 0 6px; color:var(--muted); font-size:12.5px; }
.wide { grid-column:1/-1; }
.controls { display:flex; gap:10px; margin:8px 0 10px; align-items:center; }
input[type=search], select { font:inherit; padding:5px 8px; border:1px solid var(--line);
  border-radius:6px; }
input[type=search] { width:320px; }
table { border-collapse:collapse; width:100%; font-size:12.5px; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line);
  vertical-align:top; white-space:nowrap; }
td:last-child { white-space:normal; min-width:260px; max-width:420px; }
.arm { color:var(--muted); font-size:11.5px; }
th { position:sticky; top:0; background:var(--bg); cursor:pointer; user-select:none;
  white-space:nowrap; }
td:nth-child(n+3):nth-child(-n+11),
th:nth-child(n+3):nth-child(-n+11) { font-variant-numeric:tabular-nums; text-align:right; }
tr:hover td { background:#fafbfc; }
.st { padding:1px 7px; border-radius:10px; font-size:11.5px; font-weight:600; }
.st-ok { background:#dafbe1; color:#116329; }
.st-failed { background:#ffebe9; color:#a40e26; }
.st-skipped { background:#eaeef2; color:#57606a; }
.muted { color:var(--muted); }
.bad { color:#a40e26; font-weight:600; }
details summary { cursor:pointer; color:#9a6700; }
details ul { margin:4px 0 0; padding-left:18px; max-width:520px; }
.tablewrap { max-height:640px; overflow:auto; }
.hidden-panels { margin:0 0 12px; }
.vd { margin-left:4px; padding:1px 6px; border-radius:10px; font-size:11px; }
.vd-yes { background:#dafbe1; color:#116329; }
.vd-no { background:#fff1e5; color:#953800; }
footer { color:var(--muted); font-size:12px; padding:0 28px 24px; }
"""

JS = """
function filterRows() {
  const q = document.getElementById('q').value.toLowerCase();
  const st = document.getElementById('status').value;
  let shown = 0;
  for (const tr of document.querySelectorAll('#runs tbody tr')) {
    const ok = (!q || tr.textContent.toLowerCase().includes(q)) &&
               (!st || tr.dataset.status === st);
    tr.style.display = ok ? '' : 'none';
    if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown;
}
function sortBy(th) {
  const col = +th.dataset.col, body = document.querySelector('#runs tbody');
  const dir = th.dataset.dir === 'asc' ? -1 : 1;
  document.querySelectorAll('#runs th').forEach(h => delete h.dataset.dir);
  th.dataset.dir = dir === 1 ? 'asc' : 'desc';
  const key = tr => { const t = tr.children[col].textContent.trim();
    const n = parseFloat(t); return isNaN(n) ? t : n; };
  [...body.rows].sort((a, b) => { const x = key(a), y = key(b);
    return (x > y ? 1 : x < y ? -1 : 0) * dir; }).forEach(r => body.appendChild(r));
}
document.getElementById('q').addEventListener('input', filterRows);
document.getElementById('status').addEventListener('change', filterRows);
document.querySelectorAll('#runs th').forEach(th => th.addEventListener('click',
  () => sortBy(th)));
const CONFIG = {displaylogo:false, responsive:true,
  modeBarButtonsToRemove:['lasso2d','select2d']};
for (const [id, fig] of Object.entries(FIGURES)) {
  Plotly.newPlot(id, fig.data, fig.layout, CONFIG);
}
"""


def _script_json(obj: object) -> str:
    # JSON inside <script>: "<", ">" and "&" only occur inside strings, where \\u escapes
    # are equivalent, so no result text can close the script element.
    from plotly.utils import PlotlyJSONEncoder

    return (json.dumps(obj, separators=(",", ":"), cls=PlotlyJSONEncoder)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def panels(results: list[Result]) -> list[tuple[str, str, str, object, bool]]:
    """(id, title, caption, figure, wide) for every panel, in page order."""
    c = F.arm_colors(results)
    return [
        ("p-pareto", "Throughput per GPU vs interactivity",
         "Each point is an arm at one concurrency (label), the mean over its repeats with "
         "their sd as error bars; an open marker has a run that is not valid. The line "
         "joins each arm's Pareto front. Up and to the right is better.",
         F.throughput_vs_interactivity(results, c),
         True),
        ("p-ttft", "Time to first token vs concurrency",
         "Solid: p50, dashed: p90; error bars are the spread across repeats.",
         F.latency_vs_concurrency(results, c, "ttft_ms", "TTFT"), False),
        ("p-e2e", "End-to-end latency vs concurrency",
         "Solid: p50, dashed: p90; error bars are the spread across repeats.",
         F.latency_vs_concurrency(results, c, "e2e_ms", "E2E latency"), False),
        ("p-hits", "Cache reuse per concurrency",
         "Share of prompt tokens the engine served from GPU, host DRAM or an external store, "
         "and the rest it recomputed (the engine's per-request prefix hits summed by its "
         "counters over the run; the mean over repeats), with the ideal-cache ceiling: what "
         "an unlimited cache would serve of the same requests.",
         F.hit_rate_by_tier(results, c), True),  # wide: one bar per arm and conc, long labels
        ("p-energy", "Energy per output token",
         "GPU energy (NVML) over the window divided by generated tokens.",
         F.energy_per_token(results, c), False),
        ("p-gpu-kv", "GPU KV cache usage over time",
         "Fraction of the device KV pool in use, per run (colour: arm, dash: concurrency).",
         F.timeline(results, c, "gpu_kv_usage", "GPU KV usage (%)", 100.0), False),
        ("p-host", "Host KV pool usage over time",
         "Fraction of the host DRAM pool in use; resident arms have none (colour: arm, "
         "dash: concurrency).",
         F.timeline(results, c, "host_pool_usage", "host pool usage (%)", 100.0), False),
        ("p-queue", "Queue depth over time",
         "Requests waiting to be scheduled; a growing queue means the server is saturated "
         "(colour: arm, dash: concurrency).",
         F.timeline(results, c, "queue_depth", "waiting requests"), False),
        ("p-running", "Running requests over time",
         "Requests in the running batch (colour: arm, dash: concurrency).",
         F.timeline(results, c, "running_requests", "running requests"), False),
    ]


def render(results: list[Result], extra_panels: list | None = None) -> str:
    from plotly.offline import get_plotlyjs

    every = panels(results) + list(extra_panels or [])
    ps = [p for p in every if F.is_empty(p[3]) is None]
    hidden = [f"{title} ({F.is_empty(fig)})" for _, title, _, fig, _ in every
              if F.is_empty(fig) is not None]
    figs = {pid: fig.to_plotly_json() for pid, _, _, fig, _ in ps}
    note = (f"<p class='muted hidden-panels'>Not shown, for want of data: "
            f"{esc('; '.join(hidden))}.</p>" if hidden else "")
    cards = "\n".join(
        f"<section class='card{' wide' if wide else ''}'><h2>{esc(title)}</h2>"
        f"<p>{esc(caption)}</p><div id='{pid}' class='plot'></div></section>"
        for pid, title, caption, _, wide in ps)
    n_failed = sum(r.status == "failed" for r in results)
    n_flagged = sum(bool(r.validation.get("flags")) for r in results)
    n_valid = sum(r.valid is True for r in results)
    arms = sorted({r.arm for r in results})
    engines = sorted({r.framework for r in results})
    stats = "".join(f"<div class='stat'><b>{v}</b>{esc(k)}</div>" for k, v in (
        ("runs", len(results)), ("valid", n_valid), ("arms", len(arms)),
        ("failed", n_failed), ("flagged", n_flagged), ("engines", esc(", ".join(engines)))))
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    # Secrets by value (a result written before redaction, a reason quoting a log line): the
    # page is redacted as a whole, all but the bundled plotly library.
    return redact_text(_page(cards, note, stats, now, results, figs)).replace(
        _PLOTLY_SLOT, get_plotlyjs(), 1)


_PLOTLY_SLOT = "/*kvbench:plotly.js*/"


def _page(cards: str, note: str, stats: str, now: str, results: list[Result],
          figs: dict) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvbench dashboard</title><style>{CSS}</style>
<script>{_PLOTLY_SLOT}</script></head>
<body><header><h1>kvbench dashboard</h1>
<div class="sub">Agentic KV-offload benchmark results · generated {esc(now)} by kvbench
{esc(__version__)}</div><div class="stats">{stats}</div></header>
<main>{note}<div class="grid">{cards}
<section class="card wide"><h2>Runs</h2>
<p>Every result with its plan and warnings. tok/s/user: interactivity p50; tok/s/GPU: output
throughput per GPU; hit %: prompt tokens from device / host / external tier; host GB: planned
host footprint / budget (hover for the offload flags); J/tok: GPU energy per output token.
Click a column to sort.</p>
<div class="controls"><input id="q" type="search" placeholder="filter: text in any column">
<select id="status"><option value="">all statuses</option><option value="ok">ok</option>
<option value="failed">failed</option><option value="skipped">skipped</option></select>
<span class="muted"><span id="shown">{len(results)}</span> shown</span></div>
<div class="tablewrap"><table id="runs"><thead><tr>{header_row()}</tr></thead>
<tbody>{run_rows(results)}</tbody></table></div></section>
</div></main>
<footer>Self-contained: plotly {esc(_plotly_version())} is bundled; no network access is
needed.</footer>
<script>const FIGURES = {_script_json(figs)};</script>
<script>{JS}</script></body></html>
"""


def _plotly_version() -> str:
    import plotly

    return plotly.__version__
