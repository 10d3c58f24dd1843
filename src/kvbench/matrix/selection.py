"""Which recipe rows to expand: the filters of the reference generator's `full-sweep`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Selection:
    config_files: tuple[Path, ...]
    runner_config: Path | None = None
    scenario_types: tuple[str, ...] = ("agentic-coding",)
    model_prefixes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    runner_types: tuple[str, ...] = ()
    seq_lens: tuple[str, ...] = ()
    step_size: int = 2
    min_conc: int | None = None
    max_conc: int | None = None
    max_tp: int | None = None
    max_ep: int | None = None
    single_node: bool = False
    multi_node: bool = False
    no_evals: bool = False
    config_keys: tuple[str, ...] = field(default=())
    # Reference flags beyond full-sweep's; the API takes them, the shared CLI flags may follow.
    evals_only: bool = False
    all_evals: bool = False
    runner_node_filter: str | None = None
