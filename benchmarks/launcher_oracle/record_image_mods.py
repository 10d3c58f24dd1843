"""Record what an srt-slurm setup script's source patch does to the engine, by running it.

    python3 benchmarks/launcher_oracle/record_image_mods.py --srt-slurm GITDIR \
        --ref v1.0.45 --vllm-wheel vllm-0.20.0-*.whl   (or --parallel-py FILE --vllm-version V)

`configs/patches/vllm-container-deps.sh` (the setup_script of the DeepSeek-V4 GB200/GB300
dynamo-vllm recipes) runs `configs/patches/vllm_numa_bind_hash_fix.py` on the image's
`vllm/config/parallel.py`. This takes that script from srt-slurm at `--ref` unmodified, points
its TARGET at a copy of `ParallelConfig.compute_hash` from the given vLLM wheel (a release with
the NUMA-bind fields and without the fix, e.g. 0.20.0), runs its `main()` and writes the method
before and after to tests/engines/data/image_mods/vllm-numa-bind-hash-fix.json, with the script's
output. tests/launch/test_image_mods.py applies kvbench's `vllm-numa-bind-hash-fix` edit to the
same text and compares.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import subprocess
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "engines" / "data" / "image_mods" / "vllm-numa-bind-hash-fix.json"
SCRIPT = "configs/patches/vllm_numa_bind_hash_fix.py"


def compute_hash_of(parallel_py: str) -> str:
    """`def compute_hash` of ParallelConfig up to the next method, at its indentation."""
    m = re.search(r"(?ms)^    def compute_hash\(self\).*?(?=^    def )", parallel_py)
    if m is None:
        raise SystemExit("no ParallelConfig.compute_hash in this parallel.py")
    return m.group(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--srt-slurm", type=Path, required=True)
    parser.add_argument("--ref", default="v1.0.45")
    parser.add_argument("--vllm-wheel", type=Path, help="`pip download --no-deps vllm==V`")
    parser.add_argument("--parallel-py", type=Path, help="vllm/config/parallel.py of a wheel")
    parser.add_argument("--vllm-version", help="with --parallel-py: its release")
    args = parser.parse_args()
    if args.vllm_wheel:
        version = args.vllm_wheel.name.split("-")[1]
        with zipfile.ZipFile(args.vllm_wheel) as whl:
            text = whl.read("vllm/config/parallel.py").decode()
    elif args.parallel_py and args.vllm_version:
        version, text = args.vllm_version, args.parallel_py.read_text()
    else:
        parser.error("give --vllm-wheel, or --parallel-py with --vllm-version")
    before = compute_hash_of(text)
    script = subprocess.run(["git", "-C", str(args.srt_slurm), "show", f"{args.ref}:{SCRIPT}"],
                            check=True, capture_output=True, text=True).stdout
    commit = subprocess.run(["git", "-C", str(args.srt_slurm), "rev-parse", args.ref],
                            check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "parallel.py"
        target.write_text(before)
        source = Path(tmp) / "fix.py"
        source.write_text(script)
        spec = importlib.util.spec_from_file_location("fix", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.TARGET = target  # the image's path, here a copy of the method
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            module.main()
        after = target.read_text()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "srt-slurm": {"ref": args.ref, "commit": commit, "script": SCRIPT},
        "vllm": {"version": version, "file": "vllm/config/parallel.py",
                 "excerpt": "ParallelConfig.compute_hash"},
        "before": before, "after": after, "script-said": err.getvalue().strip(),
        "recorder": "benchmarks/launcher_oracle/record_image_mods.py",
    }, indent=1) + "\n")
    print(f"{OUT}: {err.getvalue().strip()}")


if __name__ == "__main__":
    main()
