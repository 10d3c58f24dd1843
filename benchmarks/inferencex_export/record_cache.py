"""Record InferenceX's cache-reuse figures for seven engine cases, from its own code.

    python3 benchmarks/inferencex_export/record_cache.py --git-dir DIR --app-file FILE...
        [--commit SHA] [--tsc PATH]

Cases (tests/data/inferencex_cache/cases/<case>.json: framework, kv_offloading, the
/metrics snapshots kvbench's scraper keeps, pre and post):

- sglang: SGLang 0.5.17 HiCache, the committed H200 run `sglang/runs/hicache-c4`;
- sglang-l3: SGLang's names with an L3 storage tier, `sglang:cached_tokens_total{cache_source=
  device|host|storage}` (sglang 0.5.23 srt/observability/metrics_collector.py:2117-2130);
- vllm-by-source: vLLM 0.26 native offload, the H200 run
  `vllm/runs/qwen3-8b_tp1_conc4_kvdram-vllm-native`;
- vllm-no-by-source: the same scrape without `vllm:prompt_tokens_by_source_total` (a vLLM
  before PromptTokenStats);
- dynamo-vllm: Dynamo's frontend counters and router gauges with vLLM workers;
- atom: ATOM's exporter names (ROCm/ATOM atom/entrypoints/openai/metrics.py) with LMCache;
- trt: TensorRT-LLM with host offload (`trtllm_*`).

For each case kvbench writes AIPerf's server_metrics_export.json (metrics/aiperf.py); then, from
the InferenceX checkout at SHA (default 843c6254f, extracted to a temporary directory),
`utils.agentic.aggregation.server_metrics.compute_server_metrics` reads it as the aggregator
does (or refuses it), and InferenceX-app's `cache-reuse.ts` `cacheShareOf` (the `--app-file`s:
cache-reuse.ts, lib/framework-family.ts, lib/kv-offload.ts, read with the search tool, compiled
with TypeScript's `transpileModule` and run under node) draws the row the aggregate becomes
(the ingest flattens `server_metrics.cache.*_rate` to `server_*_cache_hit_rate`:
packages/db/src/etl/agentic-v3-flatten.ts). For `trt` the aggregator has no backend; the row
is the app's own TRT parser's (its rates are recorded with the case). Writes
tests/data/inferencex_cache/upstream.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "tests/data/inferencex_cache"
COMMIT = "843c6254ff69b567f772f6a5fd97675af3d04431"
H200 = ROOT / "benchmarks/results/h200"


def _snap(phase: str, samples: dict) -> dict:
    return {"phase": phase, "t_ns": 0, "ok": True, "error": None, "samples": samples}


def _ends(path: Path, keep: set[str] | None = None, drop: str | None = None) -> list[dict]:
    with gzip.open(path, "rt") as f:
        snaps = [json.loads(x) for x in f if x.strip()]
    out = []
    for s in (snaps[0], snaps[-1]):
        samples = {k: v for k, v in s["samples"].items()
                   if (keep is None or k.split(":")[0] in keep) and k != drop}
        out.append(_snap(s["phase"], samples))
    return out


def _counters(values: dict[str, list]) -> list[dict]:
    """pre: every counter at 0; post: the values."""
    pre = {k: [[labels, 0.0] for labels, _ in v] if k.endswith("_total") else v
           for k, v in values.items()}
    return [_snap("pre", pre), _snap("post", values)]


def cases() -> dict[str, dict]:
    m = {"model_name": "m"}
    return {
        "sglang": {"framework": "sglang", "kv_offloading": "dram",
                   "snapshots": _ends(H200 / "sglang/runs/hicache-c4/scrape.jsonl.gz", {"sglang"})},
        "sglang-l3": {"framework": "sglang", "kv_offloading": "dram", "snapshots": _counters({
            "sglang:prompt_tokens_total": [[m, 100000.0]],
            "sglang:generation_tokens_total": [[m, 5000.0]],
            "sglang:cached_tokens_total": [[{**m, "cache_source": "device"}, 30000.0],
                                           [{**m, "cache_source": "host"}, 20000.0],
                                           [{**m, "cache_source": "storage"}, 25000.0]],
            "sglang:token_usage": [[m, 0.9]],
            "sglang:hicache_host_used_tokens": [[m, 50000.0]],
            "sglang:hicache_host_total_tokens": [[m, 200000.0]]})},
        "vllm-by-source": {
            "framework": "vllm", "kv_offloading": "dram",
            "snapshots": _ends(H200 / "vllm/runs/qwen3-8b_tp1_conc4_kvdram-vllm-native/"
                               "scrape.jsonl.gz", {"vllm"})},
        "vllm-no-by-source": {
            "framework": "vllm", "kv_offloading": "dram",
            "snapshots": _ends(H200 / "vllm/runs/qwen3-8b_tp1_conc4_kvdram-vllm-native/"
                               "scrape.jsonl.gz", {"vllm"},
                               drop="vllm:prompt_tokens_by_source_total")},
        "dynamo-vllm": {"framework": "dynamo-vllm", "kv_offloading": "none",
                        "snapshots": _counters({
            "dynamo_frontend_input_sequence_tokens_total": [[m, 80000.0]],
            "dynamo_frontend_output_tokens_total": [[m, 4000.0]],
            "dynamo_frontend_cached_tokens_total": [[m, 48000.0]],
            "dynamo_component_router_kv_hit_rate": [[m, 0.55]],
            "dynamo_component_router_shared_cache_hit_rate": [[m, 0.6]],
            "vllm:prefix_cache_hits_total": [[{**m, "engine": "0"}, 30000.0]],
            "vllm:prefix_cache_queries_total": [[{**m, "engine": "0"}, 90000.0]],
            "vllm:kv_cache_usage_perc": [[{**m, "engine": "0"}, 0.7]]})},
        "atom": {"framework": "atom", "kv_offloading": "dram", "snapshots": _counters({
            "atom:prompt_tokens_total": [[{}, 60000.0]],
            "atom:generation_tokens_total": [[{}, 3000.0]],
            "atom:prefix_cache_cached_tokens_total": [[{}, 36000.0]],
            "atom:prefix_cache_full_tokens_total": [[{}, 60000.0]],
            "atom:lmcache_loaded_tokens_total": [[{}, 9000.0]],
            "atom:kv_cache_usage_ratio": [[{}, 0.8]]})},
        "trt": {"framework": "trt", "kv_offloading": "dram", "snapshots": _counters({
            "trtllm_prompt_tokens_total": [[m, 50000.0]],
            "trtllm_generation_tokens_total": [[m, 2500.0]],
            "trtllm_prompt_cached_tokens_total": [[m, 35000.0]],
            "trtllm_kv_cache_utilization": [[m, 0.6]]})},
    }


def _extract(git_dir: Path, commit: str, dest: Path) -> None:
    tar = subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit, "utils"],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(dest, filter="data")


_RUNNER = """
const Module = require('module');
const orig = Module._resolveFilename;
Module._resolveFilename = function (req, ...rest) {
  if (req === '@/lib/framework-family') req = __dirname + '/framework-family.js';
  if (req === '@/lib/kv-offload') req = __dirname + '/kv-offload.js';
  return orig.call(this, req, ...rest);
};
const { cacheShareOf } = require('./cache-reuse.js');
const rows = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = {};
for (const [k, row] of Object.entries(rows)) out[k] = cacheShareOf({ sourceRow: row });
process.stdout.write(JSON.stringify(out));
"""


def _shares(app_files: list[Path], tsc: Path, rows: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="ix-app-") as tmp:
        compile_js = (
            "const ts=require(process.argv[1]);const fs=require('fs');"
            "for (const f of process.argv.slice(3)){const src=fs.readFileSync(f,'utf8');"
            "const js=ts.transpileModule(src,{compilerOptions:{module:ts.ModuleKind.CommonJS,"
            "target:ts.ScriptTarget.ES2022}}).outputText;"
            "fs.writeFileSync(process.argv[2]+'/'+require('path').basename(f,'.ts')+'.js',js);}")
        subprocess.run(["node", "-e", compile_js, str(tsc), tmp, *map(str, app_files)],
                       check=True)
        Path(tmp, "run.js").write_text(_RUNNER)
        done = subprocess.run(["node", str(Path(tmp, "run.js"))], input=json.dumps(rows),
                              capture_output=True, text=True, check=True)
        return json.loads(done.stdout)


def main() -> int:
    from kvbench.metrics.aiperf import server_metrics_export
    from kvbench.metrics.inferencex import _trt_app_rates

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", type=Path, required=True)
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--app-file", type=Path, nargs=3, required=True,
                    help="cache-reuse.ts, framework-family.ts, kv-offload.ts")
    ap.add_argument("--tsc", type=Path, default=Path("/tmp/tsc/node_modules/typescript"))
    args = ap.parse_args()
    (OUT / "cases").mkdir(parents=True, exist_ok=True)
    golden: dict = {"inferencex_commit": args.commit, "cases": {}}
    rows = {}
    with tempfile.TemporaryDirectory(prefix="ix-cache-") as tmp:
        _extract(args.git_dir, args.commit, Path(tmp))
        sys.path.insert(0, tmp)
        os.chdir(tmp)
        from utils.agentic.aggregation.server_metrics import compute_server_metrics

        for name, case in cases().items():
            (OUT / "cases" / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")
            export = server_metrics_export(case["snapshots"])
            entry: dict = {}
            try:
                _, nested, _ = compute_server_metrics(export, framework=case["framework"],
                                                      records=[])
                entry["aggregator"] = {"adapter": nested["adapter"], "cache": {
                    k: nested["cache"][k] for k in ("gpu_cache_hit_rate", "cpu_cache_hit_rate",
                                                    "external_cache_hit_rate",
                                                    "overall_cache_hit_rate")}}
                rates = entry["aggregator"]["cache"]
            except ValueError as e:
                entry["aggregator"] = {"error": str(e)}
                rates = _trt_app_rates(export["metrics"])
                entry["app_trt_parser"] = rates
            golden["cases"][name] = entry
            rows[name] = {"framework": case["framework"], "metrics": {
                "server_gpu_cache_hit_rate": rates["gpu_cache_hit_rate"],
                "server_cpu_cache_hit_rate": rates["cpu_cache_hit_rate"],
                "server_external_cache_hit_rate": rates["external_cache_hit_rate"],
                "kv_offloading": case["kv_offloading"]}}
    for name, share in _shares(args.app_file, args.tsc.resolve(), rows).items():
        golden["cases"][name]["cacheShareOf"] = share
    (OUT / "upstream.json").write_text(json.dumps(golden, indent=1) + "\n")
    for name, entry in golden["cases"].items():
        print(name, json.dumps(entry)[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
