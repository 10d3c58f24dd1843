"""Record what InferenceX's agentic launchers start, row by row, without a GPU.

    python3 benchmarks/launcher_oracle/record.py --git-dir DIR --commit SHA

extracts the InferenceX tree at SHA from a git dir (e.g. the one the search tool's
`fetch github:SemiAnalysisAI/InferenceX` returns), runs the upstream generator
(`utils/matrix_logic/generate_sweep_configs.py test-config --scenario-type agentic-coding
--no-evals`, per single-node agentic config key) and, for every row whose launcher exists,
runs `benchmarks/single_node/agentic/<launcher>.sh` unmodified under `/bin/bash` with:

- the environment `.github/workflows/benchmark-tmpl.yml` gives the job (its `env:` block and
  the `Launch job script` step, fed the way `run-sweep.yml`'s `sweep-agentic` job feeds a
  matrix row), plus what the runner script passes into the container: `PORT=8888` (the
  `--export=ALL,PORT=8888` of the NVIDIA runners; the AMD runners derive a per-job port,
  normalised here to the same value) and `MODEL_PATH` pointing at a staged checkpoint;
- the launcher chosen as `runners/launch_<runner>.sh` chooses it (framework-tagged name,
  else the legacy name; the MI300X/MI325X/H100 runners only know the legacy name);
- every server program and helper replaced on PATH by `stub.py` (see there).

Each row's calls (engine, router, services, the replay client) are written, with argv, the
environment the launcher set on top of the job's (and what it unset) and the files it handed
over, to `OUT/<config-key>.json`; `OUT/manifest.json` names the commit and the counts.
Paths inside the sandbox read `{sandbox}`, the checkout `{workspace}`, the model `{model_path}`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

from stub import stage_checkpoint  # this directory is on sys.path: record.py runs as a script

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "tests" / "engines" / "data" / "launcher_oracle"
STUB_NAMES = (
    "python3", "python", "vllm", "trtllm-serve", "mpirun", "vllm-router", "mooncake_master",
    "lmcache", "hf", "huggingface-cli", "uv", "pip", "pip3", "apt-get", "curl", "nvidia-smi",
    "amd-smi", "rocm-smi", "ibv_devinfo", "ibstat", "flock", "sleep", "df", "bash", "git",
    "aiperf",
)
SILENT = {"nvidia-smi", "amd-smi", "ibv_devinfo", "ibstat", "flock", "sleep", "git"}
# runners/launch_<prefix>.sh that build the launcher name without the framework tag
LEGACY_ONLY_RUNNERS = ("mi300x-amds", "mi325x-amds", "h100-dgxc-slurm")
SKU = {"b300-nv": "b300", "b200-dgxc": "b200", "h100-dgxc-slurm": "h100",
       "h200-dgxc-slurm": "h200", "mi300x-amds": "mi300x", "mi325x-amds": "mi325x",
       "mi355x-amds": "mi355x", "b200-nscale-slurm": "b200", "h200-nb": "h200",
       "h100-cw": "h100", "gb200-nv": "gb200", "gb300-nv": "gb300"}
PORT = 8888
SHELL_NOISE = {"PWD", "OLDPWD", "SHLVL", "_"}  # bash's own bookkeeping, not the launcher's
ROW_TIMEOUT_S = 120


def extract(git_dir: Path, commit: str, dest: Path) -> str:
    full = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", commit],
                          check=True, capture_output=True, text=True).stdout.strip()
    tar = subprocess.run(["git", f"--git-dir={git_dir}", "archive", full],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(dest, filter="tar")
    return full


def agentic_keys(checkout: Path) -> list[str]:
    import yaml

    keys = []
    for name in ("amd-master.yaml", "nvidia-master.yaml"):
        for key, entry in yaml.safe_load((checkout / "configs" / name).read_text()).items():
            if not entry.get("multinode") and "agentic-coding" in entry.get("scenarios", {}):
                keys.append(key)
    return sorted(keys)


def generator_rows(checkout: Path, key: str, multi_node: bool = False) -> list[dict[str, Any]]:
    """The reference generator's agentic rows of `key`: single-node ones, or (`multi_node`)
    the prefill/decode ones."""
    cmd = [sys.executable, "utils/matrix_logic/generate_sweep_configs.py", "test-config",
           "--config-files", "configs/amd-master.yaml", "configs/nvidia-master.yaml",
           "--runner-config", "configs/runners.yaml", "--scenario-type", "agentic-coding",
           "--no-evals", "--config-keys", key]
    out = subprocess.run(cmd, cwd=checkout, check=True, capture_output=True, text=True).stdout
    return [r for r in json.loads(out) if ("prefill" in r) == multi_node]


def runner_name(checkout: Path, label: str) -> str:
    import yaml

    labels = yaml.safe_load((checkout / "configs" / "runners.yaml").read_text())["labels"]
    return labels[label][0]


def launcher_for(checkout: Path, row: dict[str, Any], runner: str) -> Path | None:
    prefix = runner.rsplit("_", 1)[0]
    base = (f"benchmarks/single_node/agentic/{row['exp-name'].split('_', 1)[0]}_"
            f"{row['precision']}_{SKU[prefix]}")
    spec = "_mtp" if row["spec-decoding"] == "mtp" else ""
    legacy = checkout / f"{base}{'_trt' if row['framework'] == 'trt' else ''}{spec}.sh"
    if prefix in LEGACY_ONLY_RUNNERS:
        return legacy if legacy.is_file() else None
    tagged = checkout / f"{base}_{row['framework']}{spec}.sh"
    for path in (tagged, legacy):
        if path.is_file():
            return path
    return None


def workflow_env(row: dict[str, Any], runner: str) -> dict[str, str]:
    """benchmark-tmpl.yml's env for one sweep-agentic matrix row (run-sweep.yml's `with:`)."""
    backend = row.get("kv-offload-backend")
    router = row.get("router")

    def s(value: Any) -> str:  # GitHub expressions render booleans lower-case
        return str(value).lower() if isinstance(value, bool) else str(value)

    env = {
        "RANDOM_RANGE_RATIO": "0.8", "HF_TOKEN": "", "EXP_NAME": row["exp-name"],
        "RECIPE_FINGERPRINT": row.get("recipe-fingerprint", ""), "MODEL": row["model"],
        "MODEL_PREFIX": row["model-prefix"], "ISL": "0", "OSL": "0", "MAX_MODEL_LEN": "0",
        "IMAGE": row["image"], "FRAMEWORK": row["framework"], "PRECISION": row["precision"],
        "TP": s(row["tp"]), "PP_SIZE": s(row["pp"]), "DCP_SIZE": s(row["dcp-size"]),
        "PCP_SIZE": s(row["pcp-size"]), "EP_SIZE": s(row["ep"]),
        "DP_ATTENTION": s(row["dp-attn"]), "CONC": s(row["conc"]),
        "SPEC_DECODING": row["spec-decoding"], "DISAGG": "false", "RUN_EVAL": "false",
        "EVAL_ONLY": "false", "SCENARIO_TYPE": "agentic-coding", "SCENARIO_SUBDIR": "agentic/",
        "IS_AGENTIC": "1", "KV_OFFLOADING": row["kv-offloading"],
        "KV_OFFLOAD_BACKEND": backend["name"] if backend else "",
        "KV_OFFLOAD_BACKEND_METADATA": json.dumps(backend) if backend else "",
        "ROUTER_METADATA": json.dumps(router) if router else "",
        "KV_P2P_TRANSFER": row.get("kv-p2p-transfer", ""),
        "TOTAL_CPU_DRAM_GB": s(row["total-cpu-dram-gb"]), "DURATION": s(row["duration"]),
        "REQUIRE_POWER": "0", "AIPERF_EXPERIMENTAL_FAST": "0", "EVAL_LIMIT": "",
        "SWEBENCH_GEN_MODE": "", "AIPERF_FAILED_REQUEST_THRESHOLD": "0.10",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/tmp/inferencex-pycache",
        "SWEBENCH_USE_MODAL": "true", "MODAL_TOKEN_ID": "", "MODAL_TOKEN_SECRET": "",
        "SALLOC_EXCLUDE": "b300-005,b300-006", "RUNNER_NAME": runner,
        "RUNNER_TYPE": row["runner"], "GITHUB_STEP_SUMMARY": "",
    }
    result = (f"{row['exp-name']}_{row['precision']}_{row['framework']}_tp{row['tp']}-"
              f"pp{row['pp']}-dcp{row['dcp-size']}-pcp{row['pcp-size']}-ep{row['ep']}-"
              f"dpa{s(row['dp-attn'])}_disagg-false_spec-{row['spec-decoding']}_"
              f"conc{row['conc']}_{runner}")
    if row.get("recipe-fingerprint"):
        result += f"_recipe-{row['recipe-fingerprint'][:16]}"
    env["RESULT_FILENAME"] = result
    env["GPU_COUNT"] = str(row["tp"] * row["pp"] * row["pcp-size"])
    return env


# Shell-level stand-ins: an RDMA rail probe that finds the first rail up, and `sed` on the
# image's engine source (a container patch) recorded instead of applied.
SHELL_STUBS = {
    "grep": 'for a; do case "$a" in /sys/class/infiniband/*) exit 0;; esac; done\n'
            'exec {grep} "$@"\n',
    "sed": 'for a; do case "$a" in /sgl-workspace/*|/usr/local/lib/python3*) exec '
           '"$ORACLE_PYTHON" "{stub}" container-patch sed "$@";; esac; done\nexec {sed} "$@"\n',
}


def write_stubs(stubs: Path) -> None:
    stubs.mkdir(parents=True, exist_ok=True)
    for name, body in SHELL_STUBS.items():
        path = stubs / name
        path.write_text("#!/bin/sh\n" + body.format(grep=shutil.which("grep"),
                                                      sed=shutil.which("sed"),
                                                      stub=HERE / "stub.py"))
        path.chmod(0o755)
    for name in STUB_NAMES:
        path = stubs / name
        if name in SILENT:  # succeed at once, without an interpreter start per call
            path.write_text("#!/bin/sh\nexit 0\n")
        else:
            path.write_text(
                f'#!/bin/sh\nexec "$ORACLE_PYTHON" "{HERE / "stub.py"}" {name} "$@"\n')
        path.chmod(0o755)


def _normalise(value: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        value = value.replace(old, new)
    return value


def _normalise_any(node: Any, subs: list[tuple[str, str]]) -> Any:
    if isinstance(node, str):
        return _normalise(node, subs)
    if isinstance(node, list):
        return [_normalise_any(n, subs) for n in node]
    if isinstance(node, dict):
        return {_normalise(k, subs): _normalise_any(v, subs) for k, v in node.items()}
    return node


def record_row(checkout: Path, stubs: Path, work: Path, key: str, index: int,
               row: dict[str, Any]) -> dict[str, Any]:
    runner = runner_name(checkout, row["runner"])
    launcher = launcher_for(checkout, row, runner)
    out: dict[str, Any] = {"config-key": key, "row": row, "runner-name": runner,
                           "launcher": str(launcher.relative_to(checkout)) if launcher else None}
    if launcher is None:
        return out
    sandbox = work / f"{key}.{index}"
    oracle = sandbox / "oracle"
    for d in ("home", "tmp", "results", "hf", "oracle"):
        (sandbox / d).mkdir(parents=True, exist_ok=True)
    # each job has a workspace of its own (the runner's checkout): links to the tree, so what a
    # launcher writes into its working directory (the TRT-LLM `ser.yaml`) is the row's alone
    workspace = sandbox / "workspace"
    workspace.mkdir()
    for entry in checkout.iterdir():
        (workspace / entry.name).symlink_to(entry)
    model_path = sandbox / "models" / row["model"].rsplit("/", 1)[-1]
    stage_checkpoint(model_path)
    env = workflow_env(row, runner)
    env.update({
        "PATH": f"{stubs}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(sandbox / "home"), "TMPDIR": str(sandbox / "tmp"), "LANG": "C.UTF-8",
        "PORT": str(PORT), "MODEL_PATH": str(model_path), "HF_HUB_CACHE": str(sandbox / "hf"),
        "RESULT_DIR": str(sandbox / "results"), "GITHUB_WORKSPACE": str(workspace),
    })
    given = dict(env)
    env.update({"ORACLE_DIR": str(oracle), "ORACLE_SANDBOX": str(sandbox),
                "ORACLE_STUBS": str(stubs), "ORACLE_PYTHON": sys.executable})
    proc = subprocess.Popen(["/bin/bash", str(workspace / launcher.relative_to(checkout))],
                            cwd=workspace, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=ROW_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log = b"(timed out)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    subs = [(str(model_path), "{model_path}"), (str(workspace), "{workspace}"),
            (str(sandbox), "{sandbox}"), (str(checkout), "{workspace}"), (str(stubs), "{stubs}")]
    calls = []
    calls_file = oracle / "calls.jsonl"
    for line in calls_file.read_text().splitlines() if calls_file.exists() else []:
        call = json.loads(line)
        seen = call.pop("env")
        call.pop("time_ns")
        call["env-set"] = {k: v for k, v in sorted(seen.items())
                           if not k.startswith("ORACLE_") and k not in SHELL_NOISE
                           and given.get(k) != v}
        call["files"] = {k: v for k, v in call["files"].items()
                         if v and not k.startswith(str(stubs))}
        call["env-unset"] = sorted(k for k in given if k not in seen)
        calls.append(_normalise_any(call, subs))
    out["reached-replay"] = (oracle / "replay-reached").exists()
    out["calls"] = calls
    if not out["reached-replay"]:
        out["log-tail"] = _normalise(log.decode(errors="replace")[-3000:], subs)
    shutil.rmtree(sandbox, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", type=Path, help="an InferenceX git dir to extract from")
    parser.add_argument("--commit", default="843c6254f")
    parser.add_argument("--checkout", type=Path, help="an extracted tree instead of --git-dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--config-keys", nargs="*", help="only these keys (default: all)")
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="launcher-oracle-") as tmp:
        work = Path(tmp)
        if args.checkout:
            checkout, commit = args.checkout.resolve(), args.commit
        elif args.git_dir:
            checkout = work / "InferenceX"
            checkout.mkdir()
            commit = extract(args.git_dir, args.commit, checkout)
        else:
            parser.error("give --git-dir (with --commit) or --checkout")
        (checkout / "utils" / "aiperf").mkdir(parents=True, exist_ok=True)  # the submodule
        stubs = work / "stubs"
        write_stubs(stubs)
        keys = args.config_keys or agentic_keys(checkout)
        jobs = [(key, i, row) for key in keys
                for i, row in enumerate(generator_rows(checkout, key))]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda j: record_row(checkout, stubs, work, *j), jobs))
    args.out.mkdir(parents=True, exist_ok=True)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for rec in done:
        by_key.setdefault(rec["config-key"], []).append(rec)
    for key, recs in by_key.items():
        (args.out / f"{key}.json").write_text(json.dumps(recs, indent=1, sort_keys=True) + "\n")
    # the manifest counts every key's file, re-recorded now or earlier
    done: list[dict[str, Any]] = []
    for path in sorted(args.out.glob("*.json")):
        if path.name != "manifest.json":
            done += json.loads(path.read_text())
    manifest = {
        "inferencex-commit": commit,
        "generator": "utils/matrix_logic/generate_sweep_configs.py test-config "
                     "--scenario-type agentic-coding --no-evals --config-keys KEY",
        "port": PORT,
        "rows": len(done),
        "rows-with-launcher": sum(1 for r in done if r["launcher"]),
        "rows-reaching-replay": sum(1 for r in done if r.get("reached-replay")),
        "config-keys": sorted({rec["config-key"] for rec in done}),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({k: v for k, v in manifest.items() if k != "config-keys"}))
    for rec in done:
        if rec["launcher"] and not rec.get("reached-replay"):
            print(f"did not reach the replay: {rec['config-key']} {rec['row']['exp-name']}\n"
                  f"{rec.get('log-tail', '')[-600:]}", file=sys.stderr)


if __name__ == "__main__":
    main()
