"""Issue 37 item 4: are the host hits on the hybrid model real? For each run, the engine's
per-request cached tokens (`usage.prompt_tokens_details.cached_tokens`, records.jsonl) against
its tier counters (`sglang:cached_tokens_total{cache_source}`, scrape.jsonl, 1 s apart), and
the hit rate against kvbench's ideal-cache ceiling (`ideal_cached_tokens`: what an unbounded
cache of this workload would hold).

SGLang 0.5.17 counts a request's cached tokens by tier when the request finishes
(srt/observability/metrics_collector.py:1708-1752 observe_one_finished_request), so the
counters' step between two scrapes belongs to the requests that finished between them: where
the requests' cached tokens add up to the step, each tier's share is theirs (a lone request
takes the step's split as its own). TTFT per prompt token of requests served mostly from the
host against those recomputed shows whether a host hit skipped the prefill, i.e. whether the
KV pages and the Mamba/GDN state were really restored (a hybrid prefix hit needs both:
UnifiedRadixCache matches a prefix only up to a node with a state). Whether the restored state
is the right one (sglang#39830: wrong outputs) cannot be told with dummy weights.

    PYTHONPATH=src python benchmarks/gpu/qwen3.5/cache_truth.py benchmarks/results/h200/qwen3.5/runs
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

from kvbench.files import iter_jsonl, read_json

TIERS = ("device", "host")


def _counters(scrape: Path) -> list[tuple[float, dict[str, float], float]]:
    """(wall s, cached tokens by tier, load-back count) at each successful scrape."""
    out = []
    for snap in iter_jsonl(scrape):
        if not snap.get("ok"):
            continue
        samples = snap["samples"]
        tiers = {t: 0.0 for t in TIERS}
        for labels, value in samples.get("sglang:cached_tokens_total", []):
            if labels.get("cache_source") in tiers:
                tiers[labels["cache_source"]] += value
        loads = sum(v for _, v in samples.get("sglang:load_back_duration_seconds_count", []))
        out.append((snap["t_ns"] / 1e9, tiers, loads))
    return out


def _records(job: Path) -> list[dict]:
    """Every completed request, the warm-up's too: the engine's counters count them all (runs
    under `--profile agentx` warm up first). The run's wall start is `warmup_s` and
    `prepare_s` (each 0 where the run had none) before the profiling phase began."""
    run = read_json(job / "summary.json")["run"]
    t0_wall = run["started_unix_s"]
    before_s = (run.get("warmup_s") or 0.0) + (run.get("prepare_s") or 0.0)
    t0_perf = run["profiling_started_ns"] - before_s * 1e9
    out = []
    for r in iter_jsonl(job / "records.jsonl"):
        if r.get("status") != "ok":
            continue
        r["finish_s"] = t0_wall + (r["t_last_ns"] - t0_perf) / 1e9
        out.append(r)
    return out


def analyse(job: Path) -> dict:
    recs, scrapes = _records(job), _counters(job / "scrape.jsonl")
    by_tier = {t: 0.0 for t in TIERS}
    attributed, unmatched, lone = 0, 0, []
    for (t_a, a, _), (t_b, b, _) in itertools.pairwise(scrapes):
        step = {t: b[t] - a[t] for t in TIERS}
        done = [r for r in recs if t_a < r["finish_s"] <= t_b and r["cached_tokens"]]
        if not done and not any(step.values()):
            continue
        if sum(r["cached_tokens"] for r in done) == sum(step.values()):
            attributed += len(done)
            for t in TIERS:
                by_tier[t] += step[t]
            if len(done) == 1:
                lone.append((done[0], step))
        else:
            unmatched += len(done)
    prompt = sum(r["prompt_tokens"] for r in recs)
    cached = sum(r["cached_tokens"] for r in recs)
    ideal = sum(r["ideal_cached_tokens"] for r in recs)
    counted = {t: scrapes[-1][1][t] - scrapes[0][1][t] for t in TIERS}

    def ttft_per_ktoken(rows: list[dict]) -> float | None:
        vals = [(r["t_first_ns"] - r["t_send_ns"]) / 1e6 / (r["prompt_tokens"] / 1e3)
                for r in rows]
        return statistics.median(vals) if vals else None

    host_served = [r for r, s in lone if s["host"] >= 0.5 * r["prompt_tokens"]]
    cold = [r for r in recs if r["cached_tokens"] < 0.05 * r["prompt_tokens"]]
    return {
        "requests": len(recs), "hit_requests": sum(1 for r in recs if r["cached_tokens"]),
        "prompt": prompt, "cached": cached, "counted": counted,
        "agrees": cached == sum(counted.values()), "attributed": attributed,
        "unmatched": unmatched, "by_tier": by_tier, "ideal": ideal,
        "load_backs": scrapes[-1][2] - scrapes[0][2],
        "host_served": len(host_served), "ttft_host": ttft_per_ktoken(host_served),
        "cold": len(cold), "ttft_cold": ttft_per_ktoken(cold),
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    print("run | requests (with hits) | prompt tokens | usage cached | counters device + host "
          "| agree | requests attributed by tier (unmatched) | attributed device / host | "
          "hit rate / ideal ceiling | load-backs | TTFT ms per 1k prompt tokens: host-served "
          "(n) vs recomputed (n)")
    for job in sorted(p for p in root.iterdir() if (p / "records.jsonl.gz").is_file()):
        a = analyse(job)
        c = a["counted"]

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:,.1f}"
        print(f"{job.name} | {a['requests']} ({a['hit_requests']}) | {a['prompt']:,} | "
              f"{a['cached']:,} | {c['device']:,.0f} + {c['host']:,.0f} | "
              f"{'yes' if a['agrees'] else 'NO'} | {a['attributed']} ({a['unmatched']}) | "
              f"{a['by_tier']['device']:,.0f} / {a['by_tier']['host']:,.0f} | "
              f"{a['cached'] / a['prompt']:.3f} / {a['ideal'] / a['prompt']:.3f} | "
              f"{a['load_backs']:.0f} | {ms(a['ttft_host'])} ({a['host_served']}) vs "
              f"{ms(a['ttft_cold'])} ({a['cold']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
