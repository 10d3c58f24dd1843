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

from kvbench.cli.flags import AGENTIC_ONLY, SELECTION_FLAGS, selection_from, spread_multi_values
from kvbench.matrix.selection import Selection

__all__ = ["SelectionCommand", "selected_jobs", "spread_multi_values", "with_selection"]

_PANEL = "Selection (as the reference generator's full-sweep)"


_ANNOTATIONS = {"paths": list[Path], "path?": Path | None, "strs": list[str],
                "ints": list[int], "int": int,
                "int?": int | None, "str?": str | None, "bool": bool}


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

    return [opt(name, _ANNOTATIONS[kind], default, help)
            for name, kind, default, help in SELECTION_FLAGS]


class SelectionCommand(TyperCommand):
    """A command whose selection options accept several values after one flag."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, spread_multi_values(list(args)))


def with_selection(fn=None, *, scenarios: tuple[str, ...] = AGENTIC_ONLY):
    """Decorate a command whose signature has a `selection: Selection` parameter; without
    --scenario-type it selects `scenarios`."""
    if fn is None:
        return functools.partial(with_selection, scenarios=scenarios)
    params = _selection_params()
    names = [p.name for p in params]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        raw = {n: kwargs.pop(n) for n in names}
        # `kvbench run RECIPE...` names its recipes: the checkout's are not added to them
        kwargs["selection"] = selection_from(raw, discover=not kwargs.get("recipes"),
                                             scenarios=scenarios)
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
