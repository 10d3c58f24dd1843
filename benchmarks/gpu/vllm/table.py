"""The H200 vLLM arms side by side, from the committed runs: per job the request counts, TTFT,
ITL, throughput, the hit rate from per-request usage (`prompt_tokens_details.cached_tokens`)
and its split by tier from `vllm:prompt_tokens_by_source_total`, the scheduler's prefix-cache
lookups per prompt token (an attempt count), and the host memory the engine really took.

    PYTHONPATH=src python benchmarks/gpu/vllm/table.py [benchmarks/results/h200/vllm]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvbench.files import iter_jsonl

KIB = 1024


def _engine_peak_bytes(memory_jsonl: Path) -> dict[int, int]:
    """Peak resident bytes (anon + shared) of each EngineCore process sampled in a call."""
    peak: dict[int, int] = {}
    for snap in iter_jsonl(memory_jsonl):
        for p in snap["procs"]:
            if "EngineCor" in p["comm"]:
                peak[p["pid"]] = max(peak.get(p["pid"], 0), p.get("VmRSS", 0) * KIB)
    return peak


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/h200/vllm")
    head = ("job", "req", "fail", "TTFT p50", "TTFT p90", "ITL p50", "in tok/s", "out tok/s",
            "hit (usage)", "device", "host", "lookups/tok", "plan GB", "client")
    print(" | ".join(head))
    for run in sorted((root / "runs").iterdir()):
        r = json.loads((run / "result.json").read_text())
        m, s = r["request_metrics"], r["server_metrics"]
        lat, thr, cache = m["latency"], m["throughput"], m["cache"]
        tiers = s["cache"]["cached_tokens_by_tier"]
        prompt = s["tokens"]["prompt_total"]
        lookups = s["counters"].get("prefix_cache_lookups") or _lookups(run)
        acc = r["request_accounting"]
        row = (run.name, acc["records_profiled"],
               f"{1 - acc['records_successful'] / max(1, acc['records_profiled']):.1%}",
               f"{lat['ttft_ms']['p50']:,.0f}", f"{lat['ttft_ms']['p90']:,.0f}",
               f"{lat['itl_ms']['p50']:.2f}", f"{thr['input_tok_s']:,.0f}",
               f"{thr['output_tok_s']:.1f}", f"{cache['hit_rate']:.3f}",
               f"{(tiers['device'] or 0) / prompt:.3f}", f"{(tiers['external'] or 0) / prompt:.3f}",
               f"{lookups / prompt:.0f}x", f"{r['plan']['projected-host-gb']:.2f}",
               "saturated" if r["client"]["saturated"] else "ok")
        print(" | ".join(str(c) for c in row))
    print()
    for arm in ("resident", "native", "simple"):
        for path in sorted((root / "calls").glob(f"{arm}*/memory.jsonl*")):
            peaks = ", ".join(f"{b / 1e9:.2f}" for b in _engine_peak_bytes(path).values())
            print(f"{path.parent.name}: EngineCore peak RSS GB per job: {peaks}")


def _lookups(run: Path) -> float:
    """Δ vllm:prefix_cache_queries_total over the scrape (runs made before the field existed)."""
    snaps = list(iter_jsonl(run / "scrape.jsonl"))
    vals = [sum(v for _, v in s["samples"].get("vllm:prefix_cache_queries_total", []))
            for s in snaps if s.get("ok")]
    return vals[-1] - vals[0]


if __name__ == "__main__":
    main()
