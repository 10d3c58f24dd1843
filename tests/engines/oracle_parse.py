"""Canonical form of command lines by the engines' own parsers (run as a subprocess).

stdin: {"sglang": [argv, ...], "vllm": [...], "sglang-router": [...], "vllm-router": [...]},
each argv without its program (`python3 -m sglang.launch_server`, `vllm serve`, ...).
stdout: the same shape, each argv replaced by {dest: value} for the options whose parsed value
differs from the parser's default, so that aliases (`--tp`/`--tp-size`), `--x=v`/`--x v` and
`--flag`/`--flag true` meet in one name and passing a default equals passing nothing.
Options the installed parser does not know (the image may be newer) stay by their spelling,
prefixed with `?`. Parsers: `ServerArgs.add_cli_args` (sglang), the `vllm serve` subparser
(`ServeSubcommand.subparser_init`), `parse_router_args` of sglang-router and vllm-router.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any

from kvbench.launch.stand_in import router_parser


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump(mode="json", exclude_defaults=True))
    return str(value)


def _unknown(rest: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if eq:
                out["?" + name] = value
            elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                out["?" + name] = rest[i + 1]
                i += 1
            else:
                out["?" + name] = True
        else:
            out.setdefault("?positional", []).append(token)
        i += 1
    return out


# Spellings the installed release dropped but the images' releases still parse, each with the
# release and line that maps it: sglang 0.5.16 python/sglang/srt/server_args.py:7201-7205
# declares `--cuda-graph-max-bs` a deprecated alias of `--cuda-graph-max-bs-decode`
# (dest cuda_graph_max_bs_decode); 0.5.23, installed here, no longer lists it. Unique prefixes
# (the launchers' `--tp`, `--dp`) resolve as argparse resolves them in every release.
# `--cuda-graph-bs` (a list of decode batch sizes) is what the v0.5.17 image of the
# multi-node SGLang rows parses (amd_utils/server_sglang.sh DECODE_MODE_FLAGS, the recorded
# launch); 0.5.23 splits it per phase and rejects the old name as ambiguous
# (--cuda-graph-bs-decode / --cuda-graph-bs-prefill): read it as the decode list.
OLDER_ALIASES = {"sglang": {"--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
                            "--cuda-graph-bs": "--cuda-graph-bs-decode"}}


def lenient(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser as a name resolver only: no choices, no value conversion beyond numbers.
    Whether a value is accepted is the engine-parser tests' question; the image may accept
    what the installed release does not (sglang-router's `consistent_hashing`)."""
    for action in parser._actions:
        action.choices = None
        if action.type not in (int, float):
            action.type = None
        action.required = False
    return parser


def canonical(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    defaults = {a.dest: a.default for a in parser._actions}
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            try:  # parse_args first: vLLM's parser rewrites -O3, -cc.x=y and friends there
                ns, rest = parser.parse_args(argv), []
            except SystemExit:
                ns, rest = parser.parse_known_args(argv)
    except SystemExit:
        return {"!parse-error": err.getvalue().strip().splitlines()[-1:]}
    out = {k: _plain(v) for k, v in vars(ns).items() if k not in defaults or defaults[k] != v}
    out.update(_unknown(rest))
    return out


def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def vllm_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    subs = root.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subs)
    return subs.choices["serve"]


PARSERS = {"sglang": sglang_parser, "vllm": vllm_parser,
           "sglang-router": lambda: router_parser("sglang_router.launch_router"),
           "vllm-router": lambda: router_parser("vllm_router.launch_router")}


def main() -> None:
    request = json.load(sys.stdin)
    out = {}
    for kind, argvs in request.items():
        if not argvs:
            out[kind] = []
            continue
        parser = lenient(PARSERS[kind]())
        aliases = OLDER_ALIASES.get(kind, {})
        out[kind] = [canonical(parser, [aliases.get(a, a) for a in argv]) for argv in argvs]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
