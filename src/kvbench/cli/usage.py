"""Command-line usage errors as one line and a hint.

typer 0.29 vendors its own click (`typer._click`), whose exceptions are not plain click's;
older typer uses plain click. Both kinds are recognised by class name in either module, so the
boundary holds whichever typer pip installs."""

from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass

_MODULES = ("typer._click.exceptions", "typer.exceptions", "click.exceptions")
_NO_COMMAND = re.compile(r"No such command '([^']+)'")


def _classes(name: str) -> tuple[type, ...]:
    found = []
    for module_name in _MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, name, None)
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


def is_exit(e: BaseException) -> bool:
    return isinstance(e, _classes("Exit"))


def is_abort(e: BaseException) -> bool:
    return isinstance(e, _classes("Abort"))


def is_help_request(e: BaseException) -> bool:
    """`kvbench` or a group with no arguments: click raises its help text as an error."""
    return isinstance(e, _classes("NoArgsIsHelpError"))


@dataclass(frozen=True, slots=True)
class Usage:
    message: str
    hint: str


def usage_error(e: BaseException, argv: list[str]) -> Usage | None:
    """The one-line message and hint for a click/typer usage or parameter error, else None.
    `argv` is what was parsed: click does not keep the bad value of a parameter."""
    if not isinstance(e, _classes("ClickException")):
        return None
    ctx = getattr(e, "ctx", None)
    path = getattr(ctx, "command_path", None) or "kvbench"
    message = " ".join(e.format_message().split())
    help_hint = f"see `{path} --help`"
    if isinstance(e, _classes("NoSuchOption")):
        close = list(getattr(e, "possibilities", None) or [])
        if not close and ctx is not None:
            close = difflib.get_close_matches(e.option_name, _option_names(ctx), n=3, cutoff=0.6)
        return Usage(f"{path}: no such option {e.option_name}", _did_you_mean(close, help_hint))
    missing = _NO_COMMAND.search(message)
    if missing and ctx is not None:
        commands = ctx.command.list_commands(ctx) if hasattr(ctx.command, "list_commands") else []
        close = difflib.get_close_matches(missing.group(1), commands, n=3, cutoff=0.5)
        return Usage(f"{path}: no such command {missing.group(1)!r}",
                     _did_you_mean(close, help_hint))
    param = getattr(e, "param", None)
    if isinstance(e, _classes("BadParameter")) and param is not None and not isinstance(
            e, _classes("MissingParameter")):
        opts = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("-")]
        name = "/".join(opts) or param.human_readable_name
        bad = _value_in(argv, opts)
        got = f" (got {_show(bad)})" if bad is not None else ""
        return Usage(f"{path}: invalid value for {name}{got}: {e.message}", help_hint)
    return Usage(f"{path}: {message}", help_hint)


def _value_in(argv: list[str], opts: list[str]) -> str | None:
    """The last value given to any of `opts` (`--opt VALUE` or `--opt=VALUE`)."""
    found = None
    for i, arg in enumerate(argv):
        for opt in opts:
            if arg == opt and i + 1 < len(argv):
                found = argv[i + 1]
            elif arg.startswith(opt + "="):
                found = arg[len(opt) + 1:]
    return found


def _show(value: str) -> str:
    return repr(value) if len(value) <= 60 else repr(value[:57]) + "..."


def _option_names(ctx) -> list[str]:
    return [name for p in ctx.command.params for name in (*p.opts, *p.secondary_opts)
            if name.startswith("-")]


def _did_you_mean(close: list[str], otherwise: str) -> str:
    if not close:
        return otherwise
    return "did you mean " + " or ".join(f"`{c}`" for c in sorted(close)[:3]) + f"? ({otherwise})"
