"""`--emit github-matrix`: the JSON a CI workflow feeds to `strategy.matrix`, one entry per
job; each entry carries its whole job spec, run with `kvbench run-job --job-json`."""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.sweep.slurm import Resources
from kvbench.sweep.spec import JobSpec


def github_matrix(specs: Sequence[JobSpec]) -> dict:
    include = []
    for spec in specs:
        res = Resources.of(spec)
        include.append({
            "name": spec.dir_name,
            "config-key": spec.config_key,
            "exp-name": spec.exp_name,
            "runner": spec.row.get("runner"),
            "gpus": res.gpus,
            "fingerprint": spec.fingerprint,
            "job": spec.portable().to_json(),
        })
    return {"include": include}
