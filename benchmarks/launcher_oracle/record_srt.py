"""Record what InferenceX's srt-slurm chain starts for its Dynamo and multi-node vLLM rows.

    python3 benchmarks/launcher_oracle/record_srt.py --checkout IX --srt-slurm GITDIR \
        --srtctl-python VENV/bin/python

For every multi-node agentic row of a `dynamo-vllm`, `dynamo-sglang`, `dynamo-trt` or
multi-node `vllm` config key of nvidia-master.yaml (the upstream generator's rows, as
record_disagg.py takes them), the NVIDIA runner's srt-slurm steps are replayed and then
NVIDIA's own `srtctl` runs unmodified at the runner's pin, with the cluster replaced at its
edges:

1. the runner's steps before `srtctl apply` (runners/launch_<runner>.sh at 843c6254f): the
   srt-slurm checkout at the pinned tag or commit (PINS below, each with its line), the
   InferenceX recipes overlaid onto it (`cp -rT .../srt-slurm-recipes/...`), the runner's
   `srtslurm.yaml` (gpus per node, the model path alias, the container map), the recipe's
   `name:` rewritten to `inferencex-<runner>` (sed) and `srtctl apply --no-preflight -f
   CONFIG_FILE` (with `--setup-script install-torchao.sh` for dynamo-sglang on GB200);
   `sbatch` is a recorder that keeps the job script and answers job 4242.
2. the job script's orchestrator, `python -m srtctl.cli.do_sweep <runtime config>` of the same
   checkout, with SLURM_JOB_ID / SLURM_NODELIST of an allocation of the script's `--nodes`;
   `srun` is a recorder (srt_stubs/srun): each step's argv is written down, a server step
   stays up until the orchestrator ends it, a utility or the benchmark step returns at once.
   `scontrol show hostnames` expands the node list; health and port waits return at once and
   node `nodeN` resolves to 10.0.0.N (srt_stubs/orchestrate.py, the only in-process patches).
   The job script's `SRTCTL_SETUP_SCRIPT` export (the runner's `--setup-script`) is passed on
   to the orchestrator as the job script passes it.

A row whose pin cannot be had here (a fork not mirrored) or whose recipe does not exist after
the overlay (the runner exits 1 there) is written with its reason instead of calls. Output:
`OUT/<config-key>.json.gz`, with the node addresses as `{node<i>}` (i from 0, the allocation's
order) and the sandbox paths as `{srt}`, `{outputs}`.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from record import generator_rows  # noqa: E402  (the single-node recorder's)
from record_disagg import normalise  # noqa: E402  (the PD-disaggregation recorder's)

DEFAULT_OUT = REPO / "tests" / "engines" / "data" / "launcher_oracle_srt"
STUBS = HERE / "srt_stubs"
JOB_ID = "4242"
FRAMEWORKS = ("dynamo-vllm", "dynamo-sglang", "dynamo-trt")

# (runner, framework, model-prefix, precision or None) -> (srt-slurm ref, the runner's line).
# The first match wins, in the runner's own if/elif order.
PINS: list[tuple[str, str | None, str | None, str | None, str, str]] = [
    ("gb200-nv", "dynamo-sglang", "glm5.2", "fp4", "v1.0.50", "runners/launch_gb200-nv.sh:404"),
    ("gb200-nv", "dynamo-vllm", "minimaxm3", "fp4", "v1.0.50", "runners/launch_gb200-nv.sh:414"),
    ("gb200-nv", "dynamo-sglang", "qwen3.5", "fp4", "v1.0.45", "runners/launch_gb200-nv.sh:426"),
    ("gb200-nv", "dynamo-vllm", "dsv4", "fp4", "v1.0.45", "runners/launch_gb200-nv.sh:426"),
    ("gb200-nv", None, "kimik3", None, "v1.0.53", "runners/launch_gb200-nv.sh:443"),
    ("gb300-nv", "dynamo-trt", "qwen3.5", None, "v1.0.50", "runners/launch_gb300-nv.sh:212"),
    ("gb300-nv", "dynamo-trt", "glm5.2", None, "v1.0.38", "runners/launch_gb300-nv.sh:224"),
    ("gb300-nv", "dynamo-sglang", "qwen3.5", None, "v1.0.38", "runners/launch_gb300-nv.sh:250"),
    ("gb300-nv", "dynamo-sglang", "dsv4", None, "v1.0.38", "runners/launch_gb300-nv.sh:263"),
    ("gb300-nv", "dynamo-trt", "dsv4", None, "v1.0.50", "runners/launch_gb300-nv.sh:269"),
    # `git checkout main`: srt-slurm main as of InferenceX 843c6254f (2026-08-21 21:59 -07:00)
    ("gb300-nv", "dynamo-sglang", "glm5.2", None, "c88ef731", "runners/launch_gb300-nv.sh:291"),
    ("gb300-nv", None, None, None, "v1.0.36", "runners/launch_gb300-nv.sh:300"),
    ("h200-dgxc-slurm", "dynamo-sglang", "glm5.2", None, "v1.0.44",
     "runners/launch_h200-dgxc-slurm.sh:80"),
    ("h200-dgxc-slurm", "vllm", "kimik3", None, "functionstackx/srt-slurm-nv@df5baa93",
     "runners/launch_h200-dgxc-slurm.sh:83-85"),
    ("h200-dgxc-slurm", "dynamo-sglang", "dsv4", None, "v1.0.38",
     "runners/launch_h200-dgxc-slurm.sh:96"),
    ("b200-dgxc", None, "kimik3", None, "functionstackx/srt-slurm-nv@df5baa93",
     "runners/launch_b200-dgxc.sh:172-174"),
    ("b200-nscale-slurm", None, "kimik3", None, "217f9438",
     "runners/launch_b200-nscale-slurm.sh:70-72"),
]
# the runner's srtslurm.yaml `gpus_per_node`
GPUS_PER_NODE = {"gb200-nv": 4, "gb300-nv": 4, "h200-dgxc-slurm": 8, "b200-dgxc": 8,
                 "b200-nscale-slurm": 8}


def srt_keys(checkout: Path) -> list[str]:
    import yaml

    entries = yaml.safe_load((checkout / "configs" / "nvidia-master.yaml").read_text())
    return sorted(k for k, e in entries.items()
                  if "agentic-coding" in e.get("scenarios", {})
                  and (e.get("framework") in FRAMEWORKS
                       or (e.get("framework") == "vllm" and e.get("multinode"))))


def runner_prefix(checkout: Path, label: str) -> str:
    from record import runner_name

    return runner_name(checkout, label).rsplit("_", 1)[0]


def pin_for(runner: str, row: dict[str, Any]) -> tuple[str, str]:
    for r, fw, mp, prec, ref, line in PINS:
        if r == runner and fw in (None, row["framework"]) and mp in (None, row["model-prefix"]) \
                and prec in (None, row["precision"]):
            return ref, line
    raise SystemExit(f"no srt-slurm pin for {runner} {row['framework']} {row['model-prefix']}")


def settings(row: dict[str, Any]) -> dict[str, str]:
    out = {}
    for role in ("prefill", "decode"):
        for s in row[role].get("additional-settings") or []:
            name, _, value = str(s).partition("=")
            out[name] = value
    return out


def checkout_pin(mirror: Path, ref: str, dest: Path, cache: dict[str, Path], tmp: Path) -> None:
    if ref not in cache:
        tree = tmp / f"pin-{ref}"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(mirror), "archive", ref],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        cache[ref] = tree
    shutil.copytree(cache[ref], dest, symlinks=True)


def overlay_recipes(checkout: Path, srt: Path) -> None:
    """The runners' `cp -rT $GITHUB_WORKSPACE/benchmarks/multi_node/srt-slurm-recipes/<x>
    recipes/<x>` (and, for the dynamo-trt recipes named by their InferenceX path, the same
    tree under benchmarks/multi_node/srt-slurm-recipes/): every recipe a row names is there."""
    src = checkout / "benchmarks" / "multi_node" / "srt-slurm-recipes"
    shutil.copytree(src, srt / "recipes", dirs_exist_ok=True)
    shutil.copytree(src, srt / "benchmarks" / "multi_node" / "srt-slurm-recipes",
                    dirs_exist_ok=True)


def srtslurm_yaml(runner: str, row: dict[str, Any], srt: Path, alias: str,
                  model_dir: Path) -> str:
    image = row["image"]
    return "\n".join([
        'default_account: "benchmark"', 'default_partition: "batch"',
        'default_time_limit: "6:00:00"', f"gpus_per_node: {GPUS_PER_NODE[runner]}",
        'network_interface: ""', f'srtctl_root: "{srt}"', "model_paths:",
        f'  "{alias}": "{model_dir}"', f'  "{row["model-prefix"]}": "{model_dir}"',
        "containers:", f'  dynamo-trtllm: "{image}"', f'  dynamo-sglang: "{image}"',
        f'  "{image}": "{image}"', f'  "{image.replace("nvcr.io/", "nvcr.io#")}": "{image}"',
        '  nginx-sqsh: "nginx:1.27.4"', "use_segment_sbatch_directive: false", ""])


def model_alias(recipe: Path) -> str:
    import yaml

    data = yaml.safe_load(recipe.read_text())
    model = data.get("model") or (data.get("base") or {}).get("model") or {}  # override recipes
    return str(model.get("path") or "")


def record_row(checkout: Path, mirror: Path, python: str, work: Path, runner: str,
               row: dict[str, Any], cache: dict[str, Path]) -> dict[str, Any]:
    ref, line = pin_for(runner, row)
    config_file = settings(row)["CONFIG_FILE"]
    base = {"row": row, "runner": runner, "srt-slurm": ref, "pin-line": line,
            "config-file": config_file}
    if "/" in ref:
        return base | {"unrecorded": f"srt-slurm pin {ref} ({line}) is a fork this recorder "
                                     "cannot obtain"}
    srt = work / "srt"
    checkout_pin(mirror, ref, srt, cache, work.parent)
    overlay_recipes(checkout, srt)
    for binary in ("configs/nats-server", "configs/etcd", "bin/uv",  # `make setup ARCH=..`
                   "bin/tachometer-scraper"):
        path = srt / binary  # downloads these; srtctl apply only checks that they exist
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    config_path = srt / config_file.split(":", 1)[0]
    if not config_path.is_file():
        return base | {"refused": f"CONFIG_FILE does not exist after srt-slurm setup: "
                                  f"{config_file} (the runner exits 1)"}
    job_name = f"inferencex-{runner}_0"
    text = re.sub(r"(?m)^name:.*$", f'name: "{job_name}"', config_path.read_text())
    config_path.write_text(text)
    model_dir = work / "models" / row["model"].rsplit("/", 1)[-1]  # the runner's MODEL_PATH
    model_dir.mkdir(parents=True)
    (srt / "srtslurm.yaml").write_text(srtslurm_yaml(runner, row, srt, model_alias(config_path),
                                                     model_dir))
    oracle = work / "oracle"
    oracle.mkdir()
    env = {"PATH": f"{STUBS}:/usr/bin:/bin", "HOME": str(work), "ORACLE_DIR": str(oracle),
           "ORACLE_PYTHON": python, "PYTHONPATH": str(srt / "src"), "RUNNER_NAME": job_name,
           "ISL": "0", "OSL": "0", "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200",
           "HF_HUB_OFFLINE": "1", "INFMAX_WORKSPACE": "/infmax-workspace"}
    args = ["--no-preflight", "-f", config_file, "--tags", "oracle"]
    if runner == "gb200-nv" and row["framework"] == "dynamo-sglang":
        args += ["--setup-script", "install-torchao.sh"]  # launch_gb200-nv.sh:735-736
    apply = subprocess.run([python, "-c", "import sys; from srtctl.cli.submit import main; "
                            "sys.argv = ['srtctl', 'apply', *sys.argv[1:]]; sys.exit(main())",
                            *args], cwd=srt, env=env, capture_output=True, text=True,
                           timeout=300)
    (work / "apply.log").write_text(apply.stdout + apply.stderr)
    script = oracle / "sbatch_script.sh"
    if not script.is_file():
        return base | {"refused": "srtctl apply submitted nothing: "
                                  + (apply.stdout + apply.stderr).strip()[-800:]}
    text = script.read_text()
    nodes = int(re.findall(r"#SBATCH --nodes=(\d+)", text)[0])
    out_dir = srt / "outputs" / JOB_ID
    runtime = re.search(r'srtctl\.cli\.do_sweep "\$\{OUTPUT_DIR\}/([^"]+)"', text).group(1)
    # the runner's `--setup-script` override reaches the orchestrator as an export of the
    # job script (srt-slurm templates/job_script_minimal.j2 SRTCTL_SETUP_SCRIPT, read by
    # cli/do_sweep.py): the workers run it instead of the recipe's setup_script
    override = re.search(r'(?m)^export SRTCTL_SETUP_SCRIPT="([^"$]*)"$', text)
    denv = {**env, **({"SRTCTL_SETUP_SCRIPT": override.group(1)} if override else {}),
            "SLURM_JOB_ID": JOB_ID, "SLURM_JOBID": JOB_ID,
            "SLURM_NODELIST": f"node[1-{nodes}]", "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
            "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
            "SRTCTL_OUTPUT_DIR": str(out_dir), "SRTCTL_SOURCE_DIR": str(srt)}
    sweep = subprocess.run([python, str(STUBS / "orchestrate.py"), str(out_dir / runtime)],
                           cwd=srt, env=denv, capture_output=True, text=True, timeout=600)
    (work / "sweep.log").write_text(sweep.stdout + sweep.stderr)
    calls = [json.loads(x) for x in (oracle / "srun.jsonl").read_text().splitlines()] \
        if (oracle / "srun.jsonl").is_file() else []
    files = {}
    for path in sorted((out_dir / "logs").glob("*")):
        if path.is_file() and path.suffix in (".json", ".yaml", ".yml", ".conf") \
                and any(path.name in " ".join(c["argv"]) for c in calls):
            files[path.name] = path.read_text()
    return base | {"nodes": nodes, "sbatch": [ln for ln in text.splitlines()
                                              if ln.startswith("#SBATCH")],
                   "orchestrator-exit": sweep.returncode,
                   "calls": [parse_call(c) for c in calls], "files": files}


def parse_call(call: dict[str, Any]) -> dict[str, Any]:
    """An srun step: its options, and of its `bash -c` script the exports, what runs before
    the command (setup script, dynamo install, fingerprint) and the command's argv."""
    argv = call["argv"]
    script = argv[-1] if len(argv) >= 3 and argv[-3:-1] == ["bash", "-c"] else None
    options = argv[:-3] if script is not None else argv
    out: dict[str, Any] = {"srun": options, "exports": {}, "preamble": [], "argv": None}
    if script is None:
        out["argv"] = argv
        return out
    # the fingerprint capture (srtctl core/fingerprint.py) is a heredoc of its own: kept out
    fingerprint = re.search(r"(\( )?python3 <\(cat <<'__FINGERPRINT_EOF__'\n.*?"
                            r"__FINGERPRINT_EOF__\n\) \|\| true( \))?", script, re.S)
    if fingerprint:
        script = script[:fingerprint.start()] + "<fingerprint>" + script[fingerprint.end():]
    parts = [p.strip() for p in re.split(r" && |\n", script) if p.strip()]
    rest = []
    for p in parts:
        m = re.match(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", p)
        if m:
            out["exports"][m.group(1)] = shlex.split(m.group(2))[0] if m.group(2) else ""
        else:
            rest.append(p)
    out["preamble"], command = rest[:-1], rest[-1] if rest else ""
    out["argv"] = shlex.split(command.removeprefix("exec ")) if command else []
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True,
                        help="an InferenceX tree (e.g. extracted at 843c6254f)")
    parser.add_argument("--commit", default="843c6254f", help="the tree's commit, recorded")
    parser.add_argument("--srt-slurm", type=Path, required=True,
                        help="a git directory of NVIDIA/srt-slurm with its tags")
    parser.add_argument("--srtctl-python", required=True,
                        help="an interpreter with srtctl's dependencies (not srtctl itself)")
    parser.add_argument("--keys", nargs="*", help="only these config keys")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    pins: dict[str, str] = {}
    keep = os.environ.get("ORACLE_KEEP")
    with (tempfile.TemporaryDirectory(prefix="srt-oracle-") if not keep
          else contextlib.nullcontext(keep)) as tmp:
        cache: dict[str, Path] = {}
        for key in args.keys or srt_keys(args.checkout):
            records = []
            for i, row in enumerate(generator_rows(args.checkout, key, multi_node=True)):
                work = Path(tmp) / f"{key}-{i}"
                work.mkdir(parents=True)
                runner = runner_prefix(args.checkout, row["runner"])
                rec = record_row(args.checkout, args.srt_slurm, args.srtctl_python, work,
                                 runner, row, cache)
                rec["config-key"] = key
                pins[rec["srt-slurm"]] = subprocess.run(
                    ["git", "-C", str(args.srt_slurm), "rev-parse", rec["srt-slurm"]],
                    capture_output=True, text=True).stdout.strip() or "unavailable"
                subs = [(str(work / "models" / row["model"].rsplit("/", 1)[-1]), "{model_path}"),
                        (str(work / "srt" / "outputs" / JOB_ID), "{outputs}"),
                        (str(work / "srt"), "{srt}"), (str(work), "{sandbox}")]
                subs += [(f"10.0.0.{n + 1}", f"{{node{n}}}")  # 10.0.0.12 before 10.0.0.1
                         for n in reversed(range(rec.get("nodes", 0)))]
                records.append(normalise(rec, subs))
                print(f"{key} {row['exp-name']}: {len(rec.get('calls', []))} calls "
                      f"{rec.get('refused') or rec.get('unrecorded') or ''}", file=sys.stderr)
            with gzip.open(args.out / f"{key}.json.gz", "wt") as f:
                f.write(json.dumps(records, indent=1, sort_keys=True) + "\n")
            counts[key] = len(records)
    path = args.out / "manifest.json"
    if args.keys and path.is_file():  # a partial re-record keeps the other keys' entries
        old = json.loads(path.read_text())
        counts, pins = old["config-keys"] | counts, old["srt-slurm"] | pins
    manifest = {"inferencex-commit": args.commit, "rows": sum(counts.values()),
                "config-keys": dict(sorted(counts.items())),
                "srt-slurm": dict(sorted(pins.items())),
                "recorder": "benchmarks/launcher_oracle/record_srt.py"}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    os.umask(0o022)
    main()
