"""Record what InferenceX's multi-node SGLang PD-disaggregation launchers start, per node.

    python3 benchmarks/launcher_oracle/record_disagg.py --checkout DIR

For every multi-node agentic row of a `sglang-disagg` config key (the upstream generator,
`generate_sweep_configs.py test-config --scenario-type agentic-coding`), the launch chain of
the AMD runners runs unmodified under `/bin/bash`, with the cluster replaced at its edges:

1. `benchmarks/multi_node/agentic/<model>_<precision>_mi355x_sglang-disagg.sh` (the recipe)
   with `.github/workflows/benchmark-multinode-tmpl.yml`'s env for the row, the row's
   `additional-settings` exported as that workflow's launch step exports them, and the
   multi-node exports of `runners/launch_mi355x-amds.sh` (lines 27-45). It runs
   `amd_utils/submit.sh`, whose `sbatch` is a recorder: the environment `job.slurm` would
   start with.
2. `amd_utils/server.sh` -> `server_sglang.sh` once per node rank with its own dry-run
   mode (`DRY_RUN=1`, which prints every command instead of starting it), in the container
   environment `job.slurm` builds: each `-e NAME=value` of its `DOCKER_ENV_COMMON` and
   SGLang `DOCKER_ENV_ENGINE` arrays, evaluated against the sbatch environment, plus the
   `hicache_mc.env` file it writes (env.sh sources it with `set -a`). Node addresses are
   10.0.0.<rank + 1>; `ip`, `hostname` and `ibv_devinfo` are stand-ins, `setup_deps.sh`
   (package installs) and `sync.py` (the cross-node barrier) are replaced by no-ops.

Each `DRY RUN:` command is split into its leading `NAME=value` words (the command's own
environment) and argv; the node's exported environment is what server_sglang.sh's shell
exported at exit on top of the container's (`env.sh`: MoRI, NCCL, AITER settings), minus
the recorder's own variables. Written to `OUT/<config-key>.json` with placeholders
`{model_path}` (MODEL_DIR/MODEL_NAME) and `{node<i>}` (the node addresses).
"""

from __future__ import annotations

import argparse
import contextlib
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

DEFAULT_OUT = REPO / "tests" / "engines" / "data" / "launcher_oracle_disagg"
RUNNER = "mi355x-amds_00"
MODEL_DIR = "/models"
NODE_IP = "10.0.0.{}"
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
RECORDER_VARS = {"PATH", "ORACLE_OUT", "ORACLE_ENV", "PWD", "OLDPWD", "SHLVL", "_", "HOME",
                 "TMPDIR", "BASH_FUNC_*"}


def disagg_keys(checkout: Path) -> list[str]:
    import yaml

    entries = yaml.safe_load((checkout / "configs" / "amd-master.yaml").read_text())
    return sorted(k for k, e in entries.items() if e.get("framework") == "sglang-disagg"
                  and "agentic-coding" in e.get("scenarios", {}))




def workflow_env(row: dict[str, Any]) -> dict[str, str]:
    """benchmark-multinode-tmpl.yml's `env:` for one multi-node agentic row."""
    def s(value: Any) -> str:  # GitHub expressions render booleans lower-case
        return str(value).lower() if isinstance(value, bool) else str(value)

    backend = row.get("kv-offload-backend")
    p, d = row["prefill"], row["decode"]
    env = {
        "RANDOM_RANGE_RATIO": "0.8", "HF_TOKEN": "", "EXP_NAME": row["exp-name"],
        "RECIPE_FINGERPRINT": row.get("recipe-fingerprint", ""), "IMAGE": row["image"],
        "MODEL_PREFIX": row["model-prefix"], "MODEL": row["model"],
        "FRAMEWORK": row["framework"], "PRECISION": row["precision"], "ISL": "0", "OSL": "0",
        "MAX_MODEL_LEN": "0", "CONC_LIST": " ".join(map(str, row["conc"])),
        "SPEC_DECODING": row["spec-decoding"], "DISAGG": s(row.get("disagg", True)),
        "RUN_EVAL": "false", "EVAL_ONLY": "false", "EVAL_CONC": "", "EVAL_LIMIT": "",
        "SWEBENCH_GEN_MODE": "", "SWEBENCH_USE_MODAL": "true", "MODAL_TOKEN_ID": "",
        "MODAL_TOKEN_SECRET": "", "REQUIRE_POWER": "0", "SCENARIO_TYPE": "agentic-coding",
        "SCENARIO_SUBDIR": "agentic/", "IS_AGENTIC": "1", "CONC": "",
        "DURATION": s(row["duration"]), "AIPERF_EXPERIMENTAL_FAST": "0",
        "KV_OFFLOADING": row["kv-offloading"],
        "KV_OFFLOAD_BACKEND": backend["name"] if backend else "",
        "KV_OFFLOAD_BACKEND_METADATA": json.dumps(backend) if backend else "",
        "ROUTER_METADATA": "", "KV_P2P_TRANSFER": row.get("kv-p2p-transfer", ""),
        "TOTAL_CPU_DRAM_GB": s(row["total-cpu-dram-gb"]), "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": "/tmp/inferencex-pycache",
        "RUNNER_NAME": RUNNER, "RUNNER_TYPE": row["runner"], "IS_MULTINODE": "true",
    }
    for role, w in (("PREFILL", p), ("DECODE", d)):
        env |= {f"{role}_NUM_WORKERS": s(w["num-worker"]), f"{role}_TP": s(w["tp"]),
                f"{role}_PP_SIZE": s(w["pp"]), f"{role}_DCP_SIZE": s(w["dcp-size"]),
                f"{role}_PCP_SIZE": s(w["pcp-size"]), f"{role}_EP": s(w["ep"]),
                f"{role}_DP_ATTN": s(w["dp-attn"])}
    for setting in [*p.get("additional-settings", []), *d.get("additional-settings", [])]:
        name, _, value = setting.partition("=")  # the launch step's `export A=1 B=2`
        env[name] = value
    # runners/launch_mi355x-amds.sh, IS_MULTINODE branch
    env |= {"SLURM_ACCOUNT": "runner", "SLURM_PARTITION": "compute",
            "SLURM_JOB_NAME": "benchmark-sglang-disagg.job",
            "MODEL_NAME": row["model"].rsplit("/", 1)[-1], "MODEL_PATH": "/it-share/data",
            "IBDEVICES": "rdma0,rdma1,rdma2,rdma3,rdma4,rdma5,rdma6,rdma7",
            "MORI_RDMA_TC": "104", "MODEL_DIR": "/it-share/data", "GPUS_PER_NODE": "8"}
    return env


_PYTHON = ('case "$*" in *"-m sglang"*|*"-m atom"*|*"-m vllm"*) echo "recorder: refused $*" >&2;'
           f' exit 97;; esac\nexec {shlex.quote(sys.executable)} "$@"\n')


def write_stubs(stubs: Path) -> None:
    stubs.mkdir(parents=True, exist_ok=True)
    programs = {
        # the batch system: record the environment job.slurm would start with
        "sbatch": f'{shlex.quote(sys.executable)} -c "import json,os,sys; '
                  'json.dump({\\"argv\\": sys.argv[1:], \\"env\\": dict(os.environ)}, '
                  'open(os.environ[\\"ORACLE_OUT\\"], \\"w\\"))" "$@"\necho 4242\n',
        "ip": 'case "$*" in "route get"*) echo "1.1.1.1 via 10.0.0.254 dev eth0 src '
              '${ORACLE_NODE_IP} uid 0";; *) echo "default via 10.0.0.254 dev eth0";; esac\n',
        "hostname": 'echo "${ORACLE_NODE_NAME}"\n',
        # the node's RDMA NICs, as runners/launch_mi355x-amds.sh names them (IBDEVICES)
        "ibv_devinfo": "for i in 0 1 2 3 4 5 6 7; do echo \"hca_id:\trdma$i\"; done\n",
        "nicctl": "exit 1\n", "sudo": "exit 0\n",
        "amd-smi": "exit 0\n", "rocm-smi": "exit 0\n",
        # the image's interpreter (server_sglang.sh reads models.yaml with PyYAML)
        # (a server or router that slipped past the dry run is refused, never started)
        "python3": _PYTHON, "python": _PYTHON,
    }
    for name, body in programs.items():
        path = stubs / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)


def container_env(job_slurm: Path, sbatch_env: dict[str, str], rank: int, nodes: int,
                  ws_path: Path) -> dict[str, str]:
    """job.slurm's `docker run -e` list for node `rank`, evaluated as its srun step does."""
    text = job_slurm.read_text()
    pairs: list[tuple[str, str]] = []
    for block in ("DOCKER_ENV_COMMON=(", "else\n    DOCKER_ENV_ENGINE=("):
        body = text[text.index(block) + len(block):]
        body = body[:re.search(r"\n\s*\)\n", body).start()]
        pairs += re.findall(r'-e \\?"?([A-Z_][A-Z0-9_]*)=(\S*)', body)
    heredoc = text[text.index("<<EOF\n") + 6:]
    heredoc = heredoc[:heredoc.index("\nEOF")]
    ips = [NODE_IP.format(i + 1) for i in range(nodes)]
    computed = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"node[1-{nodes}]",
                "NNODES": str(nodes), "SLURM_PROCID": str(rank), "NODE0_ADDR": ips[0],
                "IPADDRS": ",".join(ips), "WS_PATH": str(ws_path)}
    script = "".join(f'printf "%s\\0" "{n}={e.replace(chr(92), "").strip(chr(34))}"\n'
                     for n, e in pairs)
    script += "".join(f'printf "%s\\0" "{line}"\n' for line in heredoc.splitlines())
    out = subprocess.run(["/bin/bash", "-c", script], env={**sbatch_env, **computed},
                         check=True, capture_output=True, text=True).stdout
    env = dict(item.split("=", 1) for item in out.split("\0") if item)
    env["MODEL_DIR"] = MODEL_DIR
    env["SGLANG_WS_PATH"] = str(ws_path)
    return env


def split_command(line: str) -> tuple[dict[str, str], list[str]]:
    words = shlex.split(line)
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def record_row(checkout: Path, work: Path, stubs: Path, row: dict[str, Any]) -> dict[str, Any]:
    ws = work / "workspace"
    shutil.copytree(checkout / "benchmarks", ws / "benchmarks", symlinks=True)
    amd = ws / "benchmarks" / "multi_node" / "amd_utils"
    (amd / "setup_deps.sh").write_text("# recorder: package installs skipped\n")
    (amd / "sync.py").write_text("# recorder: the cross-node barrier passes at once\n")
    recipe = (ws / "benchmarks" / "multi_node" / "agentic" /
              f"{row['exp-name'].split('_', 1)[0]}_{row['precision']}_mi355x_"
              f"{row['framework']}.sh")
    sbatch_out = work / "sbatch.json"
    env = {**workflow_env(row), "GITHUB_WORKSPACE": str(ws), "HOME": str(work),
           "PATH": f"{stubs}:/usr/bin:/bin", "ORACLE_OUT": str(sbatch_out),
           "BENCHMARK_LOGS_DIR": str(work / "benchmark_logs"),
           # server_sglang.sh's own dry run: print each command instead of starting it
           "DRY_RUN": "1"}
    subprocess.run(["/bin/bash", str(recipe)], cwd=ws, env=env, check=True,
                   capture_output=True, text=True, timeout=120)
    submitted = json.loads(sbatch_out.read_text())
    sbatch_env = submitted["env"]
    nodes = int(sbatch_env["NUM_NODES"])
    calls = []
    for rank in range(nodes):
        cenv = container_env(amd / "job.slurm", sbatch_env, rank, nodes, amd)
        env_file = work / f"env{rank}.bin"
        cenv |= {"PATH": f"{stubs}:/usr/bin:/bin", "ORACLE_NODE_IP": NODE_IP.format(rank + 1),
                 "ORACLE_NODE_NAME": f"node{rank + 1}", "HOME": str(work),
                 "ORACLE_ENV": str(env_file)}
        wrapper = 'trap \'env -0 > "$ORACLE_ENV"\' EXIT; source "$SGLANG_WS_PATH/server.sh"'
        out = subprocess.run(["/bin/bash", "-c", wrapper], cwd=amd, env=cenv,
                             capture_output=True, text=True, timeout=120)
        (work / f"node{rank}.log").write_text(out.stdout + out.stderr)
        exported = dict(item.split("=", 1) for item in env_file.read_text().split("\0")
                        if "=" in item)
        node_env = {k: v for k, v in exported.items()
                    if cenv.get(k) != v and k not in RECORDER_VARS
                    and not k.startswith(("BASH_FUNC_", "ORACLE_"))}
        for line in out.stdout.splitlines():
            if not line.startswith("DRY RUN: "):
                continue
            cmd_env, argv = split_command(line.removeprefix("DRY RUN: "))
            if not argv or Path(argv[0]).name not in ("python3", "python", "mooncake_master"):
                continue
            if "sync.py" in " ".join(argv[:3]):
                continue  # the barrier, not a server
            calls.append({"node-rank": rank, "argv": argv, "env-set": cmd_env,
                          "node-env": node_env})
    return {"config-key": None, "row": row, "nodes": nodes,
            "recipe": str(recipe.relative_to(ws)), "sbatch-argv": submitted["argv"],
            "calls": calls}


def normalise(node: Any, subs: list[tuple[str, str]]) -> Any:
    if isinstance(node, str):
        for old, new in subs:
            node = node.replace(old, new)
        return node
    if isinstance(node, list):
        return [normalise(x, subs) for x in node]
    if isinstance(node, dict):
        return {normalise(k, subs): normalise(v, subs) for k, v in node.items()}
    return node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True,
                        help="an InferenceX tree (e.g. extracted at 843c6254f)")
    parser.add_argument("--commit", default="843c6254f", help="the tree's commit, recorded")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    parser_tmp = os.environ.get("ORACLE_KEEP")  # a directory to keep the sandboxes in
    with (tempfile.TemporaryDirectory(prefix="disagg-oracle-") if not parser_tmp
          else contextlib.nullcontext(parser_tmp)) as tmp:
        stubs = Path(tmp) / "stubs"
        write_stubs(stubs)
        for key in disagg_keys(args.checkout):
            records = []
            for i, row in enumerate(generator_rows(args.checkout, key, multi_node=True)):
                work = Path(tmp) / f"{key}-{i}"
                work.mkdir()
                rec = record_row(args.checkout, work, stubs, row)
                rec["config-key"] = key
                model_dir = f"{MODEL_DIR}/{row['model'].rsplit('/', 1)[-1]}"
                subs = [(model_dir, "{model_path}"),
                        (str(work / "workspace"), "{workspace}"), (str(work), "{sandbox}")]
                subs += [(NODE_IP.format(n + 1), f"{{node{n}}}") for n in range(rec["nodes"])]
                records.append(normalise(rec, subs))
            (args.out / f"{key}.json").write_text(json.dumps(records, indent=1,
                                                             sort_keys=True) + "\n")
            counts[key] = len(records)
    manifest = {"inferencex-commit": args.commit, "rows": sum(counts.values()),
                "config-keys": counts, "recorder": "benchmarks/launcher_oracle/record_disagg.py"}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest), file=sys.stderr)


if __name__ == "__main__":
    os.umask(0o022)
    main()
