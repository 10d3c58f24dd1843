"""`kvbench calibrate`: measure the local GPU and write a hardware profile."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvbench.cli.app import app
from kvbench.cli.console import check_format
from kvbench.errors import CalibrateError


def _points(values: list[str], flag: str) -> tuple[tuple[int, int], ...]:
    out = []
    for v in values:
        try:
            batch, tokens = (int(x) for x in v.lower().replace("x", ":").split(":"))
        except ValueError as e:
            raise CalibrateError(
                f"{flag} {v!r} is not BATCH:TOKENS", hint=f"for example {flag} 8:2048"
            ) from e
        if batch < 1 or tokens < 1:
            raise CalibrateError(f"{flag} {v!r}: batch and tokens must be >= 1")
        out.append((batch, tokens))
    return tuple(out)


@app.command()
def calibrate(
    output: Annotated[str, typer.Option("--output", "-o", help="profile YAML to write")],
    name: Annotated[str, typer.Option(help="profile name")] = "measured",
    base: Annotated[str | None, typer.Option(
        help="datasheet profile for what one machine cannot measure (gpus per node)")] = None,
    model: Annotated[str | None, typer.Option(
        help="model profile whose layer and KV pages to time (kvbench.models)")] = None,
    num_layers: Annotated[int | None, typer.Option(help="shape override")] = None,
    hidden_size: Annotated[int | None, typer.Option(help="shape override")] = None,
    num_heads: Annotated[int | None, typer.Option(help="shape override")] = None,
    num_kv_heads: Annotated[int | None, typer.Option(help="shape override")] = None,
    head_dim: Annotated[int | None, typer.Option(help="shape override")] = None,
    intermediate_size: Annotated[int | None, typer.Option(help="shape override")] = None,
    page_size: Annotated[list[int] | None, typer.Option(
        help="KV page size in tokens (repeatable)")] = None,
    prefill: Annotated[list[str] | None, typer.Option(
        help="prefill point BATCH:NEW_TOKENS (repeatable)")] = None,
    decode: Annotated[list[str] | None, typer.Option(
        help="decode point BATCH:CONTEXT (repeatable)")] = None,
    device: Annotated[str, typer.Option(help="torch device")] = "cuda:0",
    fmt: Annotated[str, typer.Option("--format", help="text | json")] = "text",
) -> None:
    """Measure HBM, matmul FLOP/s, host links, KV page copies, pinning and per-layer times."""
    import shlex

    from kvbench.calibrate import (
        CalibrationConfig,
        build_profile,
        run_calibration,
        write_profile,
    )
    from kvbench.calibrate.runner import DEFAULT_DECODE, DEFAULT_PREFILL
    from kvbench.calibrate.shape import resolve_shape
    from kvbench.hardware import load_hardware

    check_format(fmt, ("text", "json"), CalibrateError)
    if page_size and min(page_size) < 1:
        raise CalibrateError(f"--page-size must be >= 1, got {min(page_size)}")
    shape = resolve_shape(model, {
        "num_layers": num_layers, "hidden_size": hidden_size, "num_attention_heads": num_heads,
        "num_kv_heads": num_kv_heads, "head_dim": head_dim,
        "intermediate_size": intermediate_size,
    })
    base_profile = load_hardware(base) if base else None
    config = CalibrationConfig(
        shape=shape,
        device=device,
        page_sizes_tokens=tuple(page_size or (64,)),
        prefill_points=_points(prefill, "--prefill") if prefill else DEFAULT_PREFILL,
        decode_points=_points(decode, "--decode") if decode else DEFAULT_DECODE,
    )
    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cal = run_calibration(config, progress=say)
    command = "kvbench " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "kvbench calibrate"
    profile = build_profile(cal, name=name, command=command, base=base_profile)
    path = write_profile(profile, output)
    if fmt == "json":
        from kvbench.files import print_json

        print_json(profile.model_dump(mode="json"))
    else:
        print(f"wrote {path}")
