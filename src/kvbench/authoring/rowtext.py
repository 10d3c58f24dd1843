"""Search-space rows as text: where each row sits in a master YAML, and an offload twin of a
row written in the row's own style.

The file is read with ruamel.yaml's round-trip loader, which keeps every node's line and
column. The twin is produced by editing a copy of the row's own lines at those positions and
inserting it right after the row, so every other byte of the file stays as it was (a full
ruamel dump would respace every flow mapping: `{ tp: 8 }` becomes `{tp: 8}`)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from kvbench.errors import RecipeError

KV_OFFLOADING = "kv-offloading"
KV_OFFLOAD_BACKEND = "kv-offload-backend"


@dataclass(frozen=True, slots=True)
class RowText:
    """One search-space row: its data and the 0-based line span [start, stop) it occupies."""

    block: int
    index: int
    data: dict[str, Any]
    node: Any  # the ruamel CommentedMap (positions)
    start: int
    stop: int
    flow: bool


def load_round_trip(text: str, where: str) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="rt").load(io.StringIO(text))
    except YAMLError as e:
        raise RecipeError(f"{where}: not valid YAML: {str(e).splitlines()[0]}") from None


def plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _row_stop(lines: list[str], start: int, dash_col: int) -> int:
    """A block row runs while lines are indented deeper than its dash; blank lines and
    comments after its last content line belong to what follows."""
    stop = start + 1
    last_content = start + 1
    while stop < len(lines):
        line = lines[stop]
        if line.strip() and _indent(line) <= dash_col:
            break
        stop += 1
        if line.strip() and not line.lstrip().startswith("#"):
            last_content = stop
    return last_content


def _flow_stop(lines: list[str], start: int) -> int:
    """A flow row ends on the line where its braces balance (one line in every real file)."""
    depth = 0
    for n in range(start, len(lines)):
        depth += lines[n].count("{") - lines[n].count("}")
        if depth <= 0:
            return n + 1
    return len(lines)


def agentic_rows(doc: Any, key: str, lines: list[str]) -> list[RowText]:
    """Every agentic-coding search-space row of `key`, with its text span."""
    entry = doc.get(key)
    blocks = ((entry or {}).get("scenarios") or {}).get("agentic-coding") or []
    out = []
    for b, block in enumerate(blocks):
        rows = block.get("search-space") or []
        for r, node in enumerate(rows):
            line, col = rows.lc.item(r)
            flow = bool(node.fa.flow_style())
            stop = _flow_stop(lines, line) if flow else _row_stop(lines, line, col - 2)
            out.append(RowText(b, r, plain(node), node, line, stop, flow))
    return out


def shared_text(doc: Any, key: str) -> str | None:
    """Where `key`'s agentic rows are spelled with YAML anchors, aliases or merge keys, or
    None. The twin is written as text right under its row's own lines; an anchored row
    written once and aliased elsewhere, or a field a merge key brings in from other lines,
    has no lines of its own to edit, and an edit there would land in (or miss) another
    place: such a file is refused, not edited wrongly."""
    entry = doc.get(key)
    scenarios = (entry or {}).get("scenarios") or {}
    blocks = scenarios.get("agentic-coding") or []
    nodes = [(key, entry), (f"{key}.scenarios", scenarios),
             (f"{key}.agentic-coding", blocks)]
    for b, block in enumerate(blocks):
        rows = block.get("search-space") or []
        nodes += [(f"{key}.agentic-coding[{b}]", block),
                  (f"{key}.agentic-coding[{b}].search-space", rows)]
        for r, row in enumerate(rows):
            nodes.append((at := f"{key}.agentic-coding[{b}].search-space[{r}]", row))
            # a value inside the row (tp: &t 2, conc-list: &c [...]): the twin copies the
            # row's text, and a second &t is not YAML
            nodes += [(f"{at}.{field}", value) for field, value in
                      (row.items() if isinstance(row, dict) else ())]
    for where, node in nodes:
        anchor = getattr(getattr(node, "anchor", None), "value", None)
        if anchor is not None:
            return f"{where} is the YAML anchor &{anchor} (aliased as *{anchor})"
        if getattr(node, "merge", None):
            return f"{where} takes fields from a YAML merge key (<<: *...)"
    return None


def _flow_backend(backend: dict[str, Any]) -> str:
    parts = [f"{k}: {_scalar(v)}" for k, v in backend.items()]
    return "{ " + ", ".join(parts) + " }"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        # versions such as "0.3.2" must stay strings; names are plain words
        return value if value.replace("-", "").replace("_", "").isalnum() and not \
            value[0].isdigit() else f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def offload_twin(row: RowText, lines: list[str], backend: dict[str, Any]) -> list[str]:
    """The row's lines with `kv-offloading: dram` and `kv-offload-backend: {...}` written in
    where the resident row says `kv-offloading: none` (or, when it leaves the field out,
    at its end), in the row's own flow or block style."""
    text = lines[row.start:row.stop]
    flow_backend = _flow_backend(backend)
    node = row.node
    if KV_OFFLOADING in node:
        vline, vcol = node.lc.value(KV_OFFLOADING)
        i = vline - row.start
        old = text[i]
        if not old[vcol:].startswith("none"):
            raise RecipeError(f"line {vline + 1}: expected 'none' at column {vcol + 1}, found "
                              f"{old[vcol:vcol + 12]!r}")
        rest = old[vcol + len("none"):]
        if row.flow:
            text[i] = f"{old[:vcol]}dram, {KV_OFFLOAD_BACKEND}: {flow_backend}{rest}"
        else:
            kcol = node.lc.key(KV_OFFLOADING)[1]
            text[i] = f"{old[:vcol]}dram{rest}"
            text.insert(i + 1, f"{' ' * kcol}{KV_OFFLOAD_BACKEND}: {flow_backend}")
        return text
    if row.flow:
        last = text[-1]
        close = last.rindex("}")
        text[-1] = (f"{last[:close].rstrip()}, {KV_OFFLOADING}: dram, {KV_OFFLOAD_BACKEND}: "
                    f"{flow_backend} {last[close:]}")
        return text
    kcol = node.lc.col
    return [*text, f"{' ' * kcol}{KV_OFFLOADING}: dram",
            f"{' ' * kcol}{KV_OFFLOAD_BACKEND}: {flow_backend}"]
