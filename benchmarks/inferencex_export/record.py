"""Run InferenceX's own agentic aggregation and result validation on kvbench's exports of the
committed H200 runs, and record what they produce as golden data for the offline tests.

    python3 benchmarks/inferencex_export/record.py --git-dir DIR [--commit SHA]

extracts InferenceX at SHA (default 843c6254f) from a git dir (the one the search tool's
`fetch github:SemiAnalysisAI/InferenceX` returns) into a temporary directory, writes
`kvbench export --format inferencex` of every run under benchmarks/results/h200/{vllm,sglang}/
runs, and for each point runs, from that checkout and unmodified:

- `python3 -m utils.agentic.aggregation.process_agentic_result` with the workflow environment
  the export wrote (`inferencex_env.json`), RESULT_DIR at the raw artifact and an empty
  HF_HUB_CACHE (no trace corpus: `output_expected` stays empty, as on a runner without it);
- `python3 -m utils.agentic.validation.validate_agentic_result <raw>/aiperf_artifacts
  --failed-request-threshold 0.10` (the CI gate, benchmark-tmpl.yml:318-322).

With `--harness-python PY` (an interpreter with agentx-harness 1.0.12 installed, e.g. a venv
under /tmp: `pip install agentx-harness==1.0.12`), every exported `profile_export.jsonl` line is
also validated against the harness's own `MetricRecordInfo` model and
`server_metrics_export.json` against its `ServerMetricsExportData`.

Writes tests/data/inferencex_export/: `upstream/<run>.json` (the aggregate InferenceX wrote)
and `verdicts.json` (per run: the point's RESULT_FILENAME, the aggregator's and validator's
exit codes and output, and whether kvbench's own aggregate equals InferenceX's). Only the
upstream programs' outputs are committed; their code stays upstream.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = [ROOT / "benchmarks/results/h200/vllm/runs", ROOT / "benchmarks/results/h200/sglang/runs"]
OUT = ROOT / "tests/data/inferencex_export"
COMMIT = "843c6254ff69b567f772f6a5fd97675af3d04431"


def _extract(git_dir: Path, commit: str, dest: Path) -> None:
    tar = subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit, "utils"],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(dest, filter="data")


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return {"rc": p.returncode, "stdout": p.stdout.strip().splitlines(),
            "stderr": p.stderr.strip().splitlines()[-5:]}


_HARNESS_CHECK = """
import json, sys
from pathlib import Path
from aiperf.common.models.record_models import MetricRecordInfo
from aiperf.common.models.server_metrics_models import ServerMetricsExportData
art = Path(sys.argv[1]) / "aiperf_artifacts"
lines = (art / "profile_export.jsonl").read_text().splitlines()
errors = []
for n, line in enumerate(lines):
    try:
        MetricRecordInfo.model_validate_json(line)
    except Exception as e:
        errors.append(f"line {n}: {str(e)[:300]}")
try:
    ServerMetricsExportData.model_validate_json((art / "server_metrics_export.json").read_text())
except Exception as e:
    errors.append(f"server_metrics_export.json: {str(e)[:300]}")
print(json.dumps({"records": len(lines), "errors": errors}))
"""


def _harness_check(python: Path, raw: Path) -> dict:
    p = subprocess.run([str(python), "-c", _HARNESS_CHECK, str(raw)], capture_output=True,
                       text=True, timeout=300)
    return json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr[-500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", type=Path, required=True)
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--harness-python", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ix-export-") as tmp:
        checkout, exported, hub = Path(tmp, "ix"), Path(tmp, "out"), Path(tmp, "hub")
        checkout.mkdir()
        hub.mkdir()
        _extract(args.git_dir, args.commit, checkout)
        runs = sorted(d for base in RUNS for d in base.iterdir() if (d / "result.json").is_file())
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        (OUT / "upstream").mkdir(parents=True, exist_ok=True)
        verdicts = {"inferencex_commit": args.commit, "runs": {}}
        for run in runs:
            key = f"{run.parent.parent.name}/{run.name}"
            out = exported / key
            subprocess.run([sys.executable, "-m", "kvbench", "export", "--format",
                            "inferencex", str(run), "-o", str(out)], check=True, env=env,
                           capture_output=True)
            raw = next(out.glob("agentic_*"))
            job_env = json.loads((raw / "inferencex_env.json").read_text())
            name = job_env["RESULT_FILENAME"]
            agg_dir = Path(tmp, "agg", run.name)
            agg_dir.mkdir(parents=True)
            upstream_env = {"PATH": os.environ["PATH"], "HF_HUB_CACHE": str(hub),
                            **job_env, "RESULT_DIR": str(raw),
                            "AGENTIC_OUTPUT_DIR": str(agg_dir)}
            agg_run = _run([sys.executable, "-m",
                            "utils.agentic.aggregation.process_agentic_result"],
                           checkout, upstream_env)
            val_run = _run([sys.executable, "-m",
                            "utils.agentic.validation.validate_agentic_result",
                            str(raw / "aiperf_artifacts"), "--failed-request-threshold",
                            "0.10"], checkout, upstream_env)
            upstream = agg_dir / f"{name}.json"
            ours = json.loads((out / f"bmk_agentic_{name}" / f"{name}.json").read_text())
            record = {"result_filename": name, "aggregation": agg_run, "validation": val_run}
            if args.harness_python:
                record["harness_models"] = _harness_check(args.harness_python, raw)
            if upstream.is_file():
                theirs = json.loads(upstream.read_text())
                (OUT / "upstream" / f"{run.parent.parent.name}-{run.name}.json").write_text(
                    json.dumps(theirs, indent=2) + "\n")
                record["kvbench_equals_upstream"] = theirs == ours
            verdicts["runs"][key] = record
            print(f"{key}: aggregation rc {agg_run['rc']}, validation rc {val_run['rc']}, "
                  f"equal {record.get('kvbench_equals_upstream')}")
        (OUT / "verdicts.json").write_text(json.dumps(verdicts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
