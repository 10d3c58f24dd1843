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
import itertools
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
# Flags with a value that the dynamo-sglang rows' images parse (their srt-slurm recipes pass
# them) and 0.5.23 does not define (no file of the installed package names nsa_decode_backend,
# nsa_prefill_backend or mamba_scheduler_strategy).
SGLANG_IMAGE_ONLY_VALUES = ("--nsa-decode-backend", "--nsa-prefill-backend",
                            "--mamba-scheduler-strategy")
# JSON keys the dynamo-vllm rows' images read that the installed vLLM 0.33.0 does not define:
# the DeepSeek-V4 recipes' --attention-config use_fp4_indexer_cache (their
# vllm/vllm-openai:dsv4-* builds; vllm/config/attention.py AttentionConfig of 0.33.0 has no
# such field, and pydantic rejects the unexpected keyword).
VLLM_IMAGE_ONLY_KEYS = {"--attention-config": ("use_fp4_indexer_cache",)}
# Values the dynamo-vllm rows' images accept that 0.33.0's choices lack, read as the installed
# release's nearest: the DeepSeek-V4 MXFP4 MegaMoE images' (vllm/vllm-openai:dsv4-megamoe-
# mxfp4-*) --moe-backend deep_gemm_amxf4_mega_moe as 0.33.0's deep_gemm_mega_moe.
VLLM_IMAGE_VALUES = {("--moe-backend", "deep_gemm_amxf4_mega_moe"): "deep_gemm_mega_moe"}
# Bare flags the recipes' Dynamo (1.2.1 to 1.4.0.dev: the recipes' dynamo.version / wheel)
# defines and the installed ai-dynamo 1.6.1 no longer does: --router-reset-states
# (ai-dynamo 1.3.1 dynamo/common/configuration/groups/kv_router_args.py:368).
DYNAMO_FRONTEND_IMAGE_ONLY = ("--router-reset-states",)
# sglang-router 0.3.2 (the recipes' router) has the `consistent_hashing` policy; the
# installed release's --policy choices lack it: accepted as a value of that one flag.
ROUTER_IMAGE_CHOICES = {"policy": ("consistent_hashing",)}
# What each check reports back from the parsed arguments (sglang's ServerArgs fields).
SGLANG_FIELDS = ("disaggregation_mode", "disaggregation_transfer_backend", "tp_size",
                 "page_size", "mem_fraction_static", "enable_hierarchical_cache", "port",
                 "host", "model_path")
# ... and from `vllm serve`'s
VLLM_SERVE_FIELDS = ("model_tag", "host", "port", "headless", "nnodes", "node_rank",
                     "master_addr", "tensor_parallel_size", "pipeline_parallel_size",
                     "data_parallel_size", "served_model_name")


class StandIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: str  # a CHECKS key
    argv: list[str]  # the real command line
    program_len: int  # argv[:program_len] is the program (python3 -m sglang.launch_server)
    serve: list[str] | None = None  # the embedded engine's argv; None: check only
    check_path: str


def check_sglang(args: list[str]) -> dict[str, Any]:
    """SGLang's `prepare_server_args` on the engine arguments: {'ok': True, fields...} or
    {'ok': False, 'error': the parser's last line}."""
    from sglang.srt.server_args import prepare_server_args

    args, dropped = _without(args, SGLANG_IMAGE_ONLY, SGLANG_IMAGE_ONLY_VALUES)
    renamed = sorted({a for a in args if a in SGLANG_RENAMED})
    mapped = [SGLANG_RENAMED.get(a, a) for a in args]
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


def _vllm_release_args(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """vLLM engine arguments as the installed release reads them: (args, dropped, renamed)
    (VLLM_IMAGE_ONLY_KEYS, VLLM_IMAGE_VALUES)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's parser on a CPU-only host
    args, dropped = _without_json_keys(args, VLLM_IMAGE_ONLY_KEYS)
    renamed = sorted({f"{a} {b}" for a, b in itertools.pairwise(args)
                      if (a, b) in VLLM_IMAGE_VALUES})
    args = [VLLM_IMAGE_VALUES.get(pair, pair[1]) for pair in itertools.pairwise(["", *args])]
    return args, dropped, renamed


def check_vllm(args: list[str]) -> dict[str, Any]:
    """`vllm serve`'s own parser (vllm/entrypoints/cli/serve.py ServeSubcommand: the model
    positional, the API server's flags and AsyncEngineArgs), on MODEL and the rest."""
    args, dropped, renamed = _vllm_release_args(args)
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(root.add_subparsers(dest="subparser"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = root.parse_args(["serve", *args])
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    return {"ok": True, "dropped": dropped, "renamed": renamed,
            "args": {k: _plain(getattr(ns, k, None)) for k in VLLM_SERVE_FIELDS}}


def check_dynamo_vllm(args: list[str]) -> dict[str, Any]:
    """`python3 -m dynamo.vllm`'s own parsing (ai-dynamo dynamo/vllm/args.py `parse_args`:
    Dynamo's runtime and vLLM-worker groups, then vLLM's AsyncEngineArgs on the rest, then
    Dynamo's cross-checks), without fetching the model."""
    args, dropped, renamed = _vllm_release_args(args)
    from dynamo.vllm.args import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            config = parse_args(args)
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    except ValueError as e:  # Dynamo's validation (args.py update_dynamo_config_with_engine)
        return {"ok": False, "error": str(e).splitlines()[0]}
    engine = config.engine_args
    transfer = engine.kv_transfer_config
    return {"ok": True, "dropped": dropped, "renamed": renamed, "args": {
        "disaggregation_mode": _plain(getattr(config.disaggregation_mode, "value",
                                              config.disaggregation_mode)),
        "request_plane": config.request_plane, "served_model_name": config.served_model_name,
        "model": config.model, "tensor_parallel_size": engine.tensor_parallel_size,
        "kv_connector": getattr(transfer, "kv_connector", None),
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "block_size": engine.block_size}}


def check_dynamo_sglang(args: list[str]) -> dict[str, Any]:
    """`python3 -m dynamo.sglang`'s split (ai-dynamo dynamo/sglang/args.py:555-604 `parse_args`:
    Dynamo's runtime and SGLang-worker groups take their flags, SGLang's ServerArgs parser the
    rest). dynamo.sglang.args itself imports SGLang's engine, which needs a CUDA stack: its
    two Dynamo groups are used as it uses them, and the rest goes to SGLang's own parser
    (`check_sglang`)."""
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.sglang.backend_args import DynamoSGLangArgGroup

    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoSGLangArgGroup().add_arguments(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            dynamo, rest = parser.parse_known_args(args)
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    out = check_sglang(rest)
    if out["ok"]:
        out["args"]["request_plane"] = _plain(getattr(dynamo, "request_plane", None))
    return out


def check_dynamo_frontend(args: list[str]) -> dict[str, Any]:
    """`python3 -m dynamo.frontend`'s parser (ai-dynamo dynamo/frontend/main.py `parse_args`,
    which reads sys.argv: FrontendArgGroup, then FrontendConfig.validate; unknown flags exit
    1)."""
    import logging

    from dynamo.frontend import main as frontend

    args, dropped = _without(args, DYNAMO_FRONTEND_IMAGE_ONLY, ())
    saved = sys.argv
    sys.argv = ["dynamo.frontend", *args]
    err = io.StringIO()
    # it reports unknown flags through its logger before exiting (main.py parse_args)
    said = logging.StreamHandler(err)
    log = logging.getLogger(frontend.__name__)
    log.addHandler(said)
    try:
        with contextlib.redirect_stderr(err):
            config, _, _ = frontend.parse_args()
    except SystemExit:
        return {"ok": False, "error": _last(err)}
    except ValueError as e:
        return {"ok": False, "error": str(e).splitlines()[0]}
    finally:
        sys.argv = saved
        log.removeHandler(said)
    return {"ok": True, "dropped": dropped,
            "args": {k: _plain(getattr(config, k, None))
                     for k in ("http_port", "router_mode", "namespace")}}


CHECKS = {"sglang": check_sglang, "sglang-router": check_router, "vllm": check_vllm,
          "dynamo-vllm": check_dynamo_vllm, "dynamo-sglang": check_dynamo_sglang,
          "dynamo-frontend": check_dynamo_frontend}
# The check of each program a recipe row starts, by the program's last word (`python3 -m X`:
# X; `vllm serve`: serve); dynamo.trtllm has none (its parser imports TensorRT-LLM, which has
# no CPU build).
PROGRAM_CHECKS = {"sglang.launch_server": "sglang", "sglang_router.launch_router":
                  "sglang-router", "serve": "vllm", "dynamo.vllm": "dynamo-vllm",
                  "dynamo.sglang": "dynamo-sglang", "dynamo.frontend": "dynamo-frontend"}


def check_of(argv: list[str], program_len: int) -> str | None:
    """The CHECKS key of a command line's program, None where no parser here reads it."""
    return PROGRAM_CHECKS.get(argv[program_len - 1]) if program_len else None


def _without(args: list[str], bare: tuple[str, ...], valued: tuple[str, ...]
             ) -> tuple[list[str], list[str]]:
    """`args` less the image-only flags (`valued` ones with their value), and what went."""
    out, dropped, skip = [], [], False
    for a in args:
        if skip:
            dropped[-1] += f" {a}"
            skip = False
        elif a in bare or a in valued:
            dropped.append(a)
            skip = a in valued
        else:
            out.append(a)
    return out, dropped


def _without_json_keys(args: list[str], keys: dict[str, tuple[str, ...]]
                       ) -> tuple[list[str], list[str]]:
    """`args` with the image-only keys taken out of JSON flag values, and what went."""
    out, dropped = list(args), []
    for i, a in enumerate(out[:-1]):
        if a in keys:
            try:
                value = json.loads(out[i + 1])
            except ValueError:
                continue
            if isinstance(value, dict):
                gone = [k for k in keys[a] if k in value]
                dropped += [f"{a} {k}" for k in gone]
                out[i + 1] = json.dumps({k: v for k, v in value.items() if k not in gone})
    return out, dropped


def _last(err: io.StringIO) -> str:
    """The parser's message: from argparse's `error:` line on (a pydantic error of a JSON
    flag spans lines), else the last line."""
    lines = [ln for ln in err.getvalue().strip().splitlines()
             if ln.strip() and "errors.pydantic.dev" not in ln]
    if not lines:
        return "rejected (no message)"
    at = max((i for i, ln in enumerate(lines) if ": error:" in ln), default=len(lines) - 1)
    return " ".join(ln.strip() for ln in lines[at:])[:500]


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
