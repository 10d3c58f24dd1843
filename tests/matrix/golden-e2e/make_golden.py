"""Regenerate the golden rows of the newer InferenceX generator (not run by the tests).

    python3 tests/matrix/golden-e2e/make_golden.py PATH/TO/inferencex-e2e PYTHON3.12

copies the generator folder (`infx/` + `configs/`) to a temporary directory, runs
`python -m infx.matrix.generate SUBCOMMAND --config-files configs/nvidia-master.yaml
--runner-config configs/runners.yaml ARGS` there for every case of cases.json, and writes
each case's stdout, gzipped, beside this script. The generator needs Python >= 3.12 with
pydantic and PyYAML."""

from __future__ import annotations

import gzip
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    source, python = Path(sys.argv[1]), sys.argv[2]
    cases = json.loads((HERE / "cases.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "inferencex-e2e"
        shutil.copytree(source, work)
        for name, case in cases.items():
            argv = [python, "-m", "infx.matrix.generate", case["command"], "--config-files",
                    "configs/nvidia-master.yaml", "--runner-config", "configs/runners.yaml",
                    *shlex.split(case["args"])]
            out = subprocess.run(argv, cwd=work, check=True, capture_output=True, text=True)
            text = out.stdout.strip()
            case["rows"] = len(json.loads(text))
            with gzip.open(HERE / f"{name}.json.gz", "wt") as f:
                f.write(text)
            print(f"{name}: {case['rows']} rows")
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
