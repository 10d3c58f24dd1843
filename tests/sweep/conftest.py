from __future__ import annotations

from fixtures.slurm import slurm_cluster  # noqa: F401  (the session fixture)
