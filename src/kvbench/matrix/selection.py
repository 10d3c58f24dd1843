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
    # test-config's --conc (InferenceX 843c6254f generate_sweep_configs.py:1405-1411): only
    # these concurrencies, a row with none of them dropped
    concs: tuple[int, ...] = ()
    # the newer generator's (inferencex-e2e/infx/matrix/generate.py @fabe70b7, main):
    # --exp-names keeps those rows, --trim-conc the lowest concurrency per curve, --smoke one
    # trimmed benchmark and one trimmed eval row per curve
    exp_names: tuple[str, ...] = ()
    trim_conc: bool = False
    smoke: bool = False
