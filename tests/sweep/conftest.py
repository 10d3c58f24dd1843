from __future__ import annotations

from fixtures.slurm import slurm_cluster, slurm_cluster_2n  # noqa: F401  (session fixtures)
