"""The matrix selection flags as data: one table that both the typer commands
(cli/selection.py) and the typer-free short paths (cli/fast.py) read, so the two spell and
convert every flag alike. Light: no typer, no pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.matrix.selection import Selection

# (parameter name, kind, default, help); kind: paths / strs / ints (several values after one
# flag), path? / str? / int / int? (one value), bool (a flag).
SELECTION_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("config_files", "paths", None, "Master config YAML files (recipes; default: the "
     "configs/*master*.yaml of the InferenceX checkout here, either layout)."),
    ("runner_config", "path?", None, "runners.yaml with labels and hardware (default: beside "
     "the first config file)."),
    ("scenario_type", "strs", None, "fixed-seq-len and/or agentic-coding (default: both for "
     "`matrix`, as the generator prints them; agentic-coding for the commands that plan or "
     "run jobs)."),
    ("model_prefix", "strs", None, "Keep rows of these model prefixes."),
    ("precision", "strs", None, "Keep rows of these precisions."),
    ("framework", "strs", None, "Keep rows of these frameworks."),
    ("runner_type", "strs", None, "Keep rows of these runner types."),
    ("seq_lens", "strs", None, "Fixed-seq-len only: 1k1k and/or 8k1k."),
    ("step_size", "int", 2, "Multiplier of conc-start..conc-end ranges (> 1)."),
    ("min_conc", "int?", None, "Drop concurrencies below this."),
    ("max_conc", "int?", None, "Drop concurrencies above this."),
    ("max_tp", "int?", None, "Drop rows with a larger tp."),
    ("max_ep", "int?", None, "Drop rows with a larger ep."),
    ("single_node", "bool", False, "Single-node rows only."),
    ("multi_node", "bool", False, "Multi-node rows only."),
    ("no_evals", "bool", False, "Do not mark eval rows."),
    ("config_keys", "strs", None, "Keep these config keys (fnmatch globs), as the generator's "
     "test-config."),
    ("evals_only", "bool", False, "Only the eval rows (agentic evals included)."),
    ("all_evals", "bool", False, "Mark every 8k1k and agentic row as an eval."),
    ("runner_node_filter", "str?", None,
     "Expand each runner label to its nodes containing this substring (with --config-keys, "
     "as test-config: the label itself too when it contains it)."),
    ("conc", "ints", None, "Only these concurrencies (test-config's --conc)."),
    ("exp_names", "strs", None, "Only the rows of these exp-names, each matching one row "
     "(newer generator)."),
    ("trim_conc", "bool", False, "Each curve at its lowest concurrency (newer generator)."),
    ("smoke", "bool", False, "Each curve's lowest concurrency once as a benchmark and once "
     "as an eval (newer generator; not with eval flags or --trim-conc)."),
)

# Options that take several values after one flag, like the reference's argparse nargs='+'.
MULTI_VALUE_OPTIONS = frozenset(
    "--" + name.replace("_", "-") for name, kind, _, _ in SELECTION_FLAGS
    if kind in ("paths", "strs", "ints"))


def spread_multi_values(args: list[str]) -> list[str]:
    """`--config-files a b --x` -> `--config-files a --config-files b --x` (click takes one
    value per flag; users of the reference generator write several)."""
    out: list[str] = []
    current: str | None = None
    for arg in args:
        if arg == "--":
            current = None
            out.append(arg)
        elif arg.startswith("-"):
            current = arg if arg in MULTI_VALUE_OPTIONS else None
            out.append(arg)
        elif current is not None and out and out[-1] != current:
            out.extend([current, arg])
        else:
            out.append(arg)
    return out


def checkout_config_files() -> tuple[Path, ...]:
    """The master configs of the InferenceX checkout at (or around) the working directory:
    `configs/` at a classic root, `inferencex-e2e/configs/` at a newer one; none elsewhere
    (the command then asks for --config-files)."""
    from kvbench.recipe.layout import find_checkout

    checkout = find_checkout()
    return tuple(checkout.master_configs()) if checkout is not None else ()


AGENTIC_ONLY = ("agentic-coding",)
BOTH_SCENARIOS = ("fixed-seq-len", "agentic-coding")


def selection_from(raw: dict[str, Any], discover: bool = True,
                   scenarios: tuple[str, ...] = AGENTIC_ONLY) -> Selection:
    """The Selection of the flags' values (parameter name -> value, as typer passes them);
    without --config-files, the checkout's master configs unless `discover` is off (a
    command given recipe files of its own); without --scenario-type, `scenarios`."""
    given = tuple(raw["config_files"] or ())
    return Selection(
        config_files=given or (checkout_config_files() if discover else ()),
        runner_config=raw["runner_config"],
        scenario_types=tuple(raw["scenario_type"] or scenarios),
        model_prefixes=tuple(raw["model_prefix"] or ()),
        precisions=tuple(raw["precision"] or ()),
        frameworks=tuple(raw["framework"] or ()),
        runner_types=tuple(raw["runner_type"] or ()),
        seq_lens=tuple(raw["seq_lens"] or ()),
        step_size=raw["step_size"],
        min_conc=raw["min_conc"],
        max_conc=raw["max_conc"],
        max_tp=raw["max_tp"],
        max_ep=raw["max_ep"],
        single_node=raw["single_node"],
        multi_node=raw["multi_node"],
        no_evals=raw["no_evals"],
        config_keys=tuple(raw["config_keys"] or ()),
        evals_only=raw["evals_only"],
        all_evals=raw["all_evals"],
        runner_node_filter=raw["runner_node_filter"],
        concs=tuple(raw["conc"] or ()),
        exp_names=tuple(raw["exp_names"] or ()),
        trim_conc=raw["trim_conc"],
        smoke=raw["smoke"],
    )
