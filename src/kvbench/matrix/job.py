"""A Job: one matrix row with the config key it came from; what later stages consume."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.matrix.generate import keyed_rows_and_sources
from kvbench.matrix.selection import Selection


@dataclass(frozen=True, slots=True)
class Job:
    config_key: str
    row: dict[str, Any]  # the exact reference row; treat as read-only
    scenario: str
    # the master config file the row comes from: its checkout holds the recipes a row names
    # (recipe/layout.py benchmark_folder); None for a row made elsewhere. Not the job's
    # identity: the same row read from a copy of the file is the same job.
    config_file: Path | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash((self.config_key, json.dumps(self.row, sort_keys=True)))

    @property
    def exp_name(self) -> str:
        return self.row["exp-name"]

    @property
    def short_id(self) -> str:
        """8 hex digits of the config key and row: unique where exp-names are not (the
        reference's exp-name omits the runner, ep, dp-attn and the config key)."""
        import hashlib

        key = json.dumps({"k": self.config_key, "row": self.row}, sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:8]

    @property
    def framework(self) -> str:
        return self.row["framework"]

    @property
    def model(self) -> str:
        return self.row["model"]

    @property
    def model_prefix(self) -> str:
        return self.row["model-prefix"]

    @property
    def precision(self) -> str:
        return self.row["precision"]

    @property
    def runner(self) -> str:
        return self.row["runner"]

    @property
    def is_multinode(self) -> bool:
        return "prefill" in self.row

    @property
    def conc(self) -> int:
        conc = self.row["conc"]
        return conc[0] if isinstance(conc, list) else conc

    @property
    def kv_offloading(self) -> str:
        return self.row.get("kv-offloading", "none")

    @property
    def offload_backend(self) -> str | None:
        backend = self.row.get("kv-offload-backend")
        return backend["name"] if backend else None

    @property
    def total_cpu_dram_gb(self) -> int:
        return self.row.get("total-cpu-dram-gb", 0)

    @property
    def gpus(self) -> int:
        """GPUs of one server: tp*pp*pcp-size (multi-node: all prefill + decode workers)."""
        if not self.is_multinode:
            return self.row["tp"] * self.row["pp"] * self.row["pcp-size"]
        return sum(
            w["num-worker"] * w["tp"] * w["pp"] * w["pcp-size"]
            for w in (self.row["prefill"], self.row["decode"])
        )


def select_jobs(selection: Selection) -> list[Job]:
    """The selected rows as Jobs, in the reference generator's order."""
    rows, sources = keyed_rows_and_sources(selection)
    return [
        Job(config_key=key, row=row, scenario=row.get("scenario-type", "fixed-seq-len"),
            config_file=sources.get(key))
        for key, row in rows
    ]
