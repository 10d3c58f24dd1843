"""Option values that cannot mean anything, refused where the command line is parsed.

No kvbench option takes NaN or an infinity as a number (`--gpu-tokens inf` is a word, parsed by
its command), yet click's float type accepts both and its ranges let NaN through (every
comparison with NaN is false), after which they reach `int()` or a sleep. Every parameter of
every command therefore gets a callback, after its own, that refuses a non-finite float value
as a usage error naming the option (exit 2). The check is on the converted value, so it holds
whichever click typer vendors (typer 0.29 has no click types on its parameters)."""

from __future__ import annotations

import math
from typing import Any


def _bad_parameter() -> type:
    from kvbench.cli.usage import _classes

    return _classes("BadParameter")[0]


def _non_finite(value: Any) -> float | None:
    values = value if isinstance(value, list | tuple) else (value,)
    return next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)


def _finite_callback(own: Any) -> Any:
    def callback(ctx: Any, param: Any, value: Any) -> Any:
        if own is not None:
            value = own(ctx, param, value)
        bad = _non_finite(value)
        if bad is not None:
            raise _bad_parameter()(f"{bad!r} is not a finite number", ctx=ctx, param=param)
        return value

    callback.kvbench_finite = True  # type: ignore[attr-defined]
    return callback


def harden(command: Any) -> Any:
    """Give every parameter of `command` and its subcommands the finite-value check."""
    stack = [command]
    while stack:
        cmd = stack.pop()
        for param in getattr(cmd, "params", ()):
            if not getattr(param.callback, "kvbench_finite", False):
                param.callback = _finite_callback(param.callback)
        stack.extend(getattr(cmd, "commands", {}).values())
    return command
