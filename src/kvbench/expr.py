"""`${...}` templates in data files (the engine adapters' `engines/data/*.yaml`, the planner's
`plan/data/launcher_sizing.yaml`): small arithmetic over a job's numbers (`${min(conc, 64)}`,
`${2 * conc}`, `http://${host}:${engine_port}`), evaluated without `eval` so a data file can
compute but not execute. A base module: both layers read it."""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Mapping
from typing import Any

from kvbench.errors import EngineError

_TEMPLATE = re.compile(r"\$\{([^}]+)\}")
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
def capture_sizes(tokens_per_seq: int, max_seqs: int, *extra: int) -> list[int]:
    """CUDA-graph capture sizes in tokens for speculative decoding: one graph per decode batch
    of 1..max_seqs sequences, each verifying tokens_per_seq tokens (vLLM rounds sizes up to
    multiples of 1 + num_speculative_tokens, vllm/config/compilation.py), plus `extra` sizes
    for mixed batches; sorted, each once (the launchers' `sort -n -u`)."""
    return sorted({tokens_per_seq * k for k in range(1, int(max_seqs) + 1)} | set(extra))


def json_text(value: Any) -> str:
    """A value as one compact JSON token (`[1,2,4]`): a list would otherwise become several
    argv tokens."""
    return json.dumps(value, separators=(",", ":"))


def above(limit: int, *values: int) -> list[int]:
    """The `values` greater than `limit`, in order: fixed sizes a launcher appends past its
    dense capture list (kimik3_fp4_b300_vllm_mtp.sh: 64 .. 8192 above the last dense size)."""
    return [v for v in values if v > limit]


_FUNCS = {"min": min, "max": max, "int": int, "round": round, "ceil": math.ceil,
          "floor": math.floor, "capture_sizes": capture_sizes, "json_text": json_text,
          "above": above}


def evaluate(expr: str, names: Mapping[str, Any], where: str) -> Any:
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise EngineError(f"{where}: cannot parse ${{{expr}}}: {e.msg}") from None
    return _eval(tree.body, names, where, expr)


def _eval(node: ast.AST, names: Mapping[str, Any], where: str, expr: str) -> Any:
    def ev(n: ast.AST) -> Any:
        return _eval(n, names, where, expr)

    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise EngineError(f"{where}: unknown name {node.id!r} in ${{{expr}}}",
                              hint=f"known names: {', '.join(sorted(names))}")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        return _CMPOPS[type(node.ops[0])](ev(node.left), ev(node.comparators[0]))
    if isinstance(node, ast.IfExp):
        return ev(node.body) if ev(node.test) else ev(node.orelse)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS and not node.keywords):
        return _FUNCS[node.func.id](*[ev(a) for a in node.args])
    raise EngineError(f"{where}: unsupported expression in ${{{expr}}}",
                      hint="use numbers, job names, + - * / // %, comparisons, "
                      "`a if c else b` and " + ", ".join(_FUNCS))


def expand(value: Any, names: Mapping[str, Any], where: str) -> tuple[Any, list[str]]:
    """Expand templates in `value` (recursing into lists and dicts). Returns the value and the
    formulas used, for provenance. A string that is exactly one template keeps the type of its
    result (an int stays an int)."""
    used: list[str] = []

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            whole = _TEMPLATE.fullmatch(v.strip())
            if whole:
                used.append(whole.group(1).strip())
                return evaluate(whole.group(1), names, where)

            def sub(m: re.Match[str]) -> str:
                used.append(m.group(1).strip())
                return str(evaluate(m.group(1), names, where))

            return _TEMPLATE.sub(sub, v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(value), used
