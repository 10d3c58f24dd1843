"""The H200 arms side by side, from the committed runs of one engine: per job the request
counts, TTFT, ITL, throughput, the hit rate from per-request usage
(`prompt_tokens_details.cached_tokens`) and its split by tier from the engine's own counters
(vLLM `vllm:prompt_tokens_by_source_total`, SGLang `sglang:cached_tokens_total{cache_source}`),
the planner's projected host pool, and the host memory the engine process really took (peak
RSS of its scheduler process, from the memory sampler `benchmarks/gpu/vllm/memory.py`).

    PYTHONPATH=src python benchmarks/gpu/table.py benchmarks/results/h200/vllm
    PYTHONPATH=src python benchmarks/gpu/table.py benchmarks/results/h200/sglang
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvbench.files import iter_jsonl, jsonl_path

KIB = 1024
# the process that owns the KV pools (and so the pinned host tier), as its comm reads (15 chars)
ENGINE_PROCESS = {"vllm": "EngineCor", "sglang": "sglang::schedul"}


def engine_peak_bytes(memory_jsonl: Path, comm: str) -> dict[int, int]:
    """Peak resident bytes (anon + shared) of each engine process sampled in `memory_jsonl`."""
    peak: dict[int, int] = {}
    for snap in iter_jsonl(memory_jsonl):
        for p in snap["procs"]:
            if comm in p["comm"]:
                peak[p["pid"]] = max(peak.get(p["pid"], 0), p.get("VmRSS", 0) * KIB)
    return peak


def _lookups(run: Path) -> float | None:
    """Δ vllm:prefix_cache_queries_total over the scrape (runs made before the field existed)."""
    snaps = list(iter_jsonl(run / "scrape.jsonl"))
    vals = [sum(v for _, v in s["samples"].get("vllm:prefix_cache_queries_total", []))
            for s in snaps if s.get("ok")]
    return vals[-1] - vals[0] if vals else None


def run_row(run: Path) -> tuple[str, ...]:
    r = json.loads((run / "result.json").read_text())
    m, s = r["request_metrics"], r["server_metrics"]
    lat, thr, cache = m["latency"], m["throughput"], m["cache"]
    tiers = s["cache"]["cached_tokens_by_tier"]
    prompt = s["tokens"]["prompt_total"]
    host = (tiers["host"] or 0) + (tiers["external"] or 0)
    lookups = s["counters"].get("prefix_cache_lookups") or (
        _lookups(run) if r["framework"] == "vllm" else None)
    acc = r["request_accounting"]
    return (run.name, str(acc["records_profiled"]),
            f"{1 - acc['records_successful'] / max(1, acc['records_profiled']):.1%}",
            f"{lat['ttft_ms']['p50']:,.0f}", f"{lat['ttft_ms']['p90']:,.0f}",
            f"{lat['itl_ms']['p50']:.2f}", f"{thr['input_tok_s']:,.0f}",
            f"{thr['output_tok_s']:.1f}", f"{cache['hit_rate']:.3f}",
            f"{(tiers['device'] or 0) / prompt:.3f}", f"{host / prompt:.3f}",
            f"{lookups / prompt:.0f}x" if lookups else "-",
            f"{r['plan']['projected-host-gb']:.2f}",
            "saturated" if r["client"]["saturated"] else "ok")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/h200/vllm")
    head = ("job", "req", "fail", "TTFT p50", "TTFT p90", "ITL p50", "in tok/s", "out tok/s",
            "hit (usage)", "device", "host", "lookups/tok", "plan GB", "client")
    print(" | ".join(head))
    runs = sorted(p for p in (root / "runs").iterdir() if (p / "result.json").exists())
    for run in runs:
        print(" | ".join(run_row(run)))
    print()
    # vLLM's sampler logs sit per device call (calls/), SGLang's beside each job (runs/)
    engine = json.loads((runs[0] / "result.json").read_text())["framework"]
    for d in sorted({*(root / "calls").glob("*"), *runs}):
        if jsonl_path(d / "memory.jsonl") is not None:
            peaks = engine_peak_bytes(d / "memory.jsonl", ENGINE_PROCESS[engine])
            print(f"{d.parent.name}/{d.name}: {ENGINE_PROCESS[engine]} peak RSS GB per job: "
                  + ", ".join(f"{b / 1e9:.3f}" for b in peaks.values()))


if __name__ == "__main__":
    main()
