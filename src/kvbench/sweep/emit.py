"""`--emit github-matrix`: what a GitHub Actions workflow feeds to `strategy.matrix`, one entry
per job, each run with `kvbench run-job`, within GitHub's documented limits.

GitHub Actions limits (docs.github.com/en/actions/reference/limits, "Job Matrix"): a matrix
generates at most 256 jobs per workflow run; a job's outputs are at most 1 MB together, their
size approximated in UTF-16 (docs.github.com/en/actions/writing-workflows/
choosing-what-your-workflow-does/passing-information-between-jobs). The real InferenceX
catalog gave 746 entries and 1.2 MB (issue 39), each with the planning machine's absolute
runner_config / config_file paths, which a runner with another checkout path cannot open.

So: paths in a job spec are relative to the checkout (the directory the command runs in,
where the workflow's `run-job` runs too); a matrix within the limits is one
`{"include": [...]}` with each job's spec inline (`run-job --job-json`); a larger one needs
`--emit-dir DIR`: each job's spec is a file there (upload it as an artifact) and the output is
`GITHUB_OUTPUT` lines, `matrix_count=N` and `matrix_0` .. `matrix_{N-1}`, matrices of at most
256 entries that name their job file (`run-job --job-file`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson

from kvbench.errors import SweepOptionError
from kvbench.sweep.slurm import Resources
from kvbench.sweep.spec import JobSpec

MAX_MATRIX_JOBS = 256
MAX_OUTPUT_BYTES = 1_000_000  # per job, all its outputs together, in UTF-16


def utf16_bytes(text: str) -> int:
    """The size GitHub counts an output at (UTF-16, two bytes per ASCII character)."""
    return len(text.encode("utf-16-le"))


def _relative(path: str | Path, checkout: Path, what: str, spec: JobSpec) -> str:
    p = Path(path)
    absolute = (p if p.is_absolute() else checkout / p).resolve()
    try:
        return absolute.relative_to(checkout.resolve()).as_posix()
    except ValueError:
        raise SweepOptionError(
            f"job {spec.dir_name}: its {what} {absolute} is outside the checkout {checkout}: "
            "a CI runner with its own checkout cannot open it",
            hint="run --emit github-matrix from the checkout's root, with every file inside "
                 "it") from None


def checkout_relative(spec: JobSpec, checkout: Path) -> JobSpec:
    """`spec` with its files named relative to `checkout` (refused when one is outside)."""
    update: dict = {k: _relative(v, checkout, k.replace("_", " "), spec)
                    for k in ("runner_config", "config_file")
                    if (v := getattr(spec, k)) is not None}
    if spec.options.trace:
        update["options"] = spec.options.model_copy(update={"trace": [
            Path(_relative(t, checkout, "trace", spec)) for t in spec.options.trace]})
    return spec.model_copy(update=update).portable()


def _entry(spec: JobSpec) -> dict:
    return {"name": spec.dir_name, "config-key": spec.config_key, "exp-name": spec.exp_name,
            "runner": spec.row.get("runner"), "gpus": Resources.of(spec).gpus,
            "fingerprint": spec.fingerprint}


def github_matrix(specs: Sequence[JobSpec], checkout: Path | None = None) -> dict:
    """One matrix, every job's spec inline (`run-job --job-json '${{ toJSON(matrix.job) }}'`);
    files named relative to `checkout` (default: the current directory)."""
    checkout = Path.cwd() if checkout is None else checkout
    return {"include": [{**_entry(s), "job": checkout_relative(s, checkout).to_json()}
                        for s in specs]}


def emit_github_matrix(specs: Sequence[JobSpec], *, checkout: Path,
                       emit_dir: Path | None = None) -> str:
    """The text to print: one inline matrix where it fits GitHub's limits; with `emit_dir`,
    the job files written there and GITHUB_OUTPUT lines naming them; otherwise refused."""
    if emit_dir is None:
        text = orjson.dumps(github_matrix(specs, checkout)).decode()
        size = utf16_bytes(f"matrix={text}")
        if len(specs) <= MAX_MATRIX_JOBS and size <= MAX_OUTPUT_BYTES:
            return text
        raise SweepOptionError(
            f"the matrix has {len(specs)} jobs and {size / 1e6:.2f} MB: beyond GitHub's "
            f"{MAX_MATRIX_JOBS} jobs per matrix or {MAX_OUTPUT_BYTES / 1e6:g} MB of outputs "
            "per job (UTF-16)",
            hint="--emit-dir DIR writes each job's spec there (upload it as an artifact) and "
                 f"prints matrices of at most {MAX_MATRIX_JOBS} jobs naming them "
                 "(docs/sweeps.md), or select fewer jobs")
    emit_dir = Path(emit_dir)
    emit_dir.mkdir(parents=True, exist_ok=True)
    rel_dir = _relative(emit_dir, checkout, "--emit-dir", specs[0]) if specs else "."
    entries = []
    for spec in specs:
        checkout_relative(spec, checkout).write(emit_dir / f"{spec.dir_name}.json")
        entries.append({**_entry(spec), "job-file": f"{rel_dir}/{spec.dir_name}.json"})
    chunks = [entries[i:i + MAX_MATRIX_JOBS] for i in range(0, len(entries), MAX_MATRIX_JOBS)]
    lines = [f"matrix_count={len(chunks)}"] + [
        f"matrix_{i}={orjson.dumps({'include': chunk}).decode()}"
        for i, chunk in enumerate(chunks)]
    text = "\n".join(lines)
    if utf16_bytes(text) > MAX_OUTPUT_BYTES:
        raise SweepOptionError(
            f"{len(specs)} jobs in {len(chunks)} matrices are {utf16_bytes(text) / 1e6:.2f} MB "
            f"of outputs: beyond GitHub's {MAX_OUTPUT_BYTES / 1e6:g} MB per job",
            hint="select fewer jobs per workflow run (--config-keys)")
    return text
