"""The matrix selection flags, shared by `matrix`, `plan`, `launch` and `run`.

`with_selection` appends the flags to a command's signature and hands the command one
`Selection`, so every command that selects jobs spells the flags exactly alike."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

from kvbench.matrix.selection import Selection

_PANEL = "Selection (as the reference generator's full-sweep)"


def _selection_params() -> list[inspect.Parameter]:
    def opt(name: str, annotation: object, default: object, help: str) -> inspect.Parameter:
        # A bool flag gets only its positive form: `--no-evals`, never `--no-no-evals`.
        decls = ["--" + name.replace("_", "-")] if annotation is bool else []
        option = typer.Option(*decls, help=help, rich_help_panel=_PANEL)
        return inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[annotation, option],
            default=default,
        )

    return [
        opt("config_files", list[Path], None, "Master config YAML files (recipes; default: "
            "the configs/*master*.yaml of the InferenceX checkout here, either layout)."),
        opt("runner_config", Path | None, None, "runners.yaml with labels and hardware "
            "(default: beside the first config file)."),
        opt("scenario_type", list[str], None, "fixed-seq-len and/or agentic-coding."),
        opt("model_prefix", list[str], None, "Keep rows of these model prefixes."),
        opt("precision", list[str], None, "Keep rows of these precisions."),
        opt("framework", list[str], None, "Keep rows of these frameworks."),
        opt("runner_type", list[str], None, "Keep rows of these runner types."),
        opt("seq_lens", list[str], None, "Fixed-seq-len only: 1k1k and/or 8k1k."),
        opt("step_size", int, 2, "Multiplier of conc-start..conc-end ranges (> 1)."),
        opt("min_conc", int | None, None, "Drop concurrencies below this."),
        opt("max_conc", int | None, None, "Drop concurrencies above this."),
        opt("max_tp", int | None, None, "Drop rows with a larger tp."),
        opt("max_ep", int | None, None, "Drop rows with a larger ep."),
        opt("single_node", bool, False, "Single-node rows only."),
        opt("multi_node", bool, False, "Multi-node rows only."),
        opt("no_evals", bool, False, "Do not mark eval rows."),
        opt("config_keys", list[str], None, "Keep these config keys (fnmatch globs)."),
        opt("evals_only", bool, False, "Only the eval rows (agentic evals included)."),
        opt("all_evals", bool, False, "Mark every 8k1k and agentic row as an eval."),
        opt("runner_node_filter", str | None, None,
            "Expand each runner label to its nodes containing this substring."),
    ]


# Options that take several values after one flag, like the reference's argparse nargs='+'.
MULTI_VALUE_OPTIONS = frozenset({
    "--config-files", "--scenario-type", "--model-prefix", "--precision", "--framework",
    "--runner-type", "--seq-lens", "--config-keys",
})


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


class SelectionCommand(TyperCommand):
    """A command whose selection options accept several values after one flag."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, spread_multi_values(list(args)))


def checkout_config_files() -> tuple[Path, ...]:
    """The master configs of the InferenceX checkout at (or around) the working directory:
    `configs/` at a classic root, `inferencex-e2e/configs/` at a newer one; none elsewhere
    (the command then asks for --config-files)."""
    from kvbench.recipe.layout import find_checkout

    checkout = find_checkout()
    return tuple(checkout.master_configs()) if checkout is not None else ()


def with_selection(fn):
    """Decorate a command whose signature has a `selection: Selection` parameter."""
    params = _selection_params()
    names = [p.name for p in params]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        raw = {n: kwargs.pop(n) for n in names}
        kwargs["selection"] = Selection(
            config_files=tuple(raw["config_files"] or checkout_config_files()),
            runner_config=raw["runner_config"],
            scenario_types=tuple(raw["scenario_type"] or ("agentic-coding",)),
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
        )
        return fn(*args, **kwargs)

    sig = inspect.signature(fn)
    # Resolve the command's own (string) annotations with their Annotated metadata; typer
    # reads the signature, and would otherwise drop each option's help via get_type_hints.
    # `Selection` is often imported only under TYPE_CHECKING by the command's module.
    hints = typing.get_type_hints(fn, localns={"Selection": Selection}, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in sig.parameters.values() if p.name != "selection"]
    wrapper.__signature__ = sig.replace(parameters=own + params)
    if hints:
        wrapper.__annotations__ = {}
    del wrapper.__wrapped__  # typer must read the new signature, not the original
    return wrapper


def selected_jobs(selection: Selection, error: type) -> list:
    """The selection's jobs; none is an error of the calling command's kind (`error`, a
    KvbenchError class), with the one message every command gives."""
    from kvbench.matrix import select_jobs

    jobs = select_jobs(selection)
    if not jobs:
        raise error("the selection matched no jobs",
                    hint="check the recipe files and the selection flags")
    return jobs
