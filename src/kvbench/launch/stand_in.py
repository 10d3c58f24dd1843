"""A stand-in server: the real engine's own argument parser checks the command line that
would have run, then the embedded engine (`kvbench serve-sim`) serves in its place. This is
how a multi-node row runs end to end where the engines' hardware is absent (no GPUs, CI,
a test cluster): every command line is the one the real run would start, checked by the
installed engine's parser, and the job still serves, replays and writes a result.

`python -m kvbench.launch.stand_in FILE` runs one: FILE is a JSON `StandIn`. The check's
outcome goes to `check_path` (JSON); a rejected command line exits 2 with the parser's
message, else the process becomes the embedded engine (exec, so signals reach it).

The parser is the installed release's. The image may be older: flags it spells otherwise or
no longer defines are mapped or dropped here, each reported in the check's `dropped` or
`renamed` so nothing is silently skipped."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

# The v0.5.17 image's spelling, split per phase by the installed 0.5.23
# (sglang/srt/server_args.py --cuda-graph-bs-decode / --cuda-graph-bs-prefill).
SGLANG_RENAMED = {"--cuda-graph-bs": "--cuda-graph-bs-decode",
                  "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode"}
# Bare flags the image's SGLang parses and 0.5.23 no longer defines (no file of the
# installed package names prefill_round_robin_balance).
SGLANG_IMAGE_ONLY = ("--prefill-round-robin-balance",)
# sglang-router 0.3.2 (the recipes' router) has the `consistent_hashing` policy; the
# installed release's --policy choices lack it: accepted as a value of that one flag.
ROUTER_IMAGE_CHOICES = {"policy": ("consistent_hashing",)}
# What each check reports back from the parsed arguments (sglang's ServerArgs fields).
SGLANG_FIELDS = ("disaggregation_mode", "disaggregation_transfer_backend", "tp_size",
                 "page_size", "mem_fraction_static", "enable_hierarchical_cache", "port",
                 "host", "model_path")


class StandIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: str  # "sglang" | "sglang-router"
    argv: list[str]  # the real command line
    program_len: int  # argv[:program_len] is the program (python3 -m sglang.launch_server)
    serve: list[str] | None = None  # the embedded engine's argv; None: check only
    check_path: str


def check_sglang(args: list[str]) -> dict[str, Any]:
    """SGLang's `prepare_server_args` on the engine arguments: {'ok': True, fields...} or
    {'ok': False, 'error': the parser's last line}."""
    from sglang.srt.server_args import prepare_server_args

    dropped = [a for a in args if a in SGLANG_IMAGE_ONLY]
    renamed = sorted({a for a in args if a in SGLANG_RENAMED})
    mapped = [SGLANG_RENAMED.get(a, a) for a in args if a not in SGLANG_IMAGE_ONLY]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = prepare_server_args(mapped)
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    return {"ok": True, "dropped": dropped, "renamed": renamed,
            "args": {f: _plain(getattr(parsed, f, None)) for f in SGLANG_FIELDS}}


def router_parser(module: str = "sglang_router.launch_router") -> argparse.ArgumentParser:
    """A router's own parser (sglang-router's and vllm-router's `launch_router` build it
    inline in `parse_router_args`: take it as it parses)."""
    import importlib

    mod = importlib.import_module(module)
    captured: dict[str, argparse.ArgumentParser] = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, args=None, namespace=None):
        captured["parser"] = self
        return real(self, [], namespace)

    argparse.ArgumentParser.parse_args = grab  # type: ignore[method-assign]
    try:
        with contextlib.suppress(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            mod.parse_router_args([])
    finally:
        argparse.ArgumentParser.parse_args = real  # type: ignore[method-assign]
    return captured["parser"]


def check_router(args: list[str]) -> dict[str, Any]:
    parser = router_parser()
    for action in parser._actions:
        if action.dest in ROUTER_IMAGE_CHOICES and action.choices is not None:
            action.choices = [*action.choices, *ROUTER_IMAGE_CHOICES[action.dest]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(args)
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    return {"ok": True, "args": {k: _plain(v) for k, v in vars(ns).items()
                                 if k in ("pd_disaggregation", "prefill", "decode", "policy",
                                          "host", "port")}}


CHECKS = {"sglang": check_sglang, "sglang-router": check_router}


def _last(err: io.StringIO) -> str:
    lines = err.getvalue().strip().splitlines()
    return lines[-1] if lines else "rejected (no message)"


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool, type(None))) else (
        [_plain(x) for x in v] if isinstance(v, (list, tuple)) else str(v))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kvbench.launch.stand_in STAND_IN.json", file=sys.stderr)
        return 2
    spec = StandIn.model_validate_json(Path(args[0]).read_text())
    if spec.engine not in CHECKS:
        print(f"stand-in engine {spec.engine!r}: allowed: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    result = {"engine": spec.engine, "argv": spec.argv,
              **CHECKS[spec.engine](spec.argv[spec.program_len:])}
    Path(spec.check_path).write_text(json.dumps(result, indent=1) + "\n")
    if not result["ok"]:
        print(f"{spec.engine} rejects the command line: {result['error']}", file=sys.stderr)
        return 2
    print(f"{spec.engine}'s parser accepts the command line ({len(spec.argv)} words)",
          file=sys.stderr, flush=True)
    if spec.serve:
        os.execv(spec.serve[0], spec.serve)  # the embedded engine takes this process over
    return 0


if __name__ == "__main__":
    sys.exit(main())
