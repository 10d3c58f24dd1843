"""Option values that cannot mean anything, refused where the command line is parsed.

No kvbench option takes NaN or an infinity as a number (`--gpu-tokens inf` is a word, parsed by
its command), yet click's float type accepts both and its ranges let NaN through (every
comparison with NaN is false), after which they reach `int()` or a sleep. Every parameter of
every command therefore gets a callback, after its own, that refuses a non-finite float value
as a usage error naming the option (exit 2). The check is on the converted value, so it holds
whichever click typer vendors (typer 0.29 has no click types on its parameters).

Every numeric option also has its physical range (kvbench/bounds.py OPTION_RANGES, by the
option's long name): a value outside it is the same one-line usage error, naming the range
and its reason, before any work starts (a --max-requests of 2^31 once reached a list
allocation, a --time-scale of 1e-300 a sleep that never ended)."""

from __future__ import annotations

import math
from typing import Any

from kvbench.bounds import option_range


def _bad_parameter() -> type:
    from kvbench.cli.usage import _classes

    return _classes("BadParameter")[0]


def _non_finite(value: Any) -> float | None:
    values = value if isinstance(value, list | tuple) else (value,)
    return next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)


def _finite_callback(own: Any, bound: Any = None) -> Any:
    def callback(ctx: Any, param: Any, value: Any) -> Any:
        if own is not None:
            value = own(ctx, param, value)
        bad = _non_finite(value)
        if bad is not None:
            raise _bad_parameter()(f"{bad!r} is not a finite number", ctx=ctx, param=param)
        if bound is not None:
            for v in value if isinstance(value, list | tuple) else (value,):
                problem = bound.problem(v) if isinstance(v, int | float) else None
                if problem is not None:  # the usage error quotes the value given
                    raise _bad_parameter()(problem, ctx=ctx, param=param)
        return value

    callback.kvbench_finite = True  # type: ignore[attr-defined]
    return callback


def harden(command: Any) -> Any:
    """Give every parameter of `command` and its subcommands the finite-value check."""
    stack = [("", command)]
    while stack:
        path, cmd = stack.pop()
        for param in getattr(cmd, "params", ()):
            if not getattr(param.callback, "kvbench_finite", False):
                long = max(getattr(param, "opts", None) or [""], key=len)
                param.callback = _finite_callback(param.callback, option_range(path, long))
        stack.extend((f"{path} {name}".strip(), sub)
                     for name, sub in getattr(cmd, "commands", {}).items())
    return command
