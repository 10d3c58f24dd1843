"""Regenerate the golden rows of InferenceX's generator (not run by the tests).

    python3 tests/matrix/golden/make_golden.py INFERENCEX_GIT_DIR PYTHON [--rev 843c6254f]

extracts `utils/matrix_logic/` at REV from the InferenceX git repository into a temporary
folder and runs, for every case of cases.json,

    PYTHON utils/matrix_logic/generate_sweep_configs.py COMMAND \
        --config-files DATA/amd-master.yaml DATA/nvidia-master.yaml \
        --runner-config DATA/runners.yaml ARGS

(DATA: tests/data/inferencex; COMMAND full-sweep unless the case says; `{all-keys}` in ARGS
stands for every config key of the two files in file order), writing each case's stdout,
gzipped, beside this script. PYTHON needs pydantic and PyYAML (CI: Python 3.12)."""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "data" / "inferencex"
CONFIGS = [DATA / "amd-master.yaml", DATA / "nvidia-master.yaml"]
RUNNERS = DATA / "runners.yaml"


def all_keys() -> list[str]:
    return [k for path in CONFIGS for k in yaml.safe_load(path.read_text())]


def case_argv(case: dict) -> list[str]:
    """A case's arguments after the config and runner files, `{all-keys}` expanded."""
    out: list[str] = []
    for arg in shlex.split(case["args"]):
        out += all_keys() if arg == "{all-keys}" else [arg]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo", help="an InferenceX git repository (bare or not)")
    ap.add_argument("python", help="a Python with pydantic and PyYAML")
    ap.add_argument("--rev", default="843c6254f")
    args = ap.parse_args()
    cases = json.loads((HERE / "cases.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", args.repo, "archive", args.rev,
                                  "utils/matrix_logic", "utils/constants.py"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        generator = Path(tmp) / "utils" / "matrix_logic" / "generate_sweep_configs.py"
        for name, case in cases.items():
            argv = [args.python, str(generator), case.get("command", "full-sweep"),
                    "--config-files", *map(str, CONFIGS), "--runner-config", str(RUNNERS),
                    *case_argv(case)]
            text = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            case["rows"] = len(json.loads(text))
            with gzip.GzipFile(HERE / f"{name}.json.gz", "wb", mtime=0) as f:
                f.write(text.strip().encode())
            print(f"{name}: {case['rows']} rows", file=sys.stderr)
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
