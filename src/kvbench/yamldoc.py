"""Reading YAML that a user may have written (recipes, runners files, engine, hardware and
model profiles, engine rules): C-accelerated when available, the file's size capped, YAML
aliases capped after expansion (a billion-laughs document is refused, measured in linear
time) and integers past 64 bits refused before Python converts them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kvbench.bounds import check_document_text
from kvbench.errors import KvbenchError
from kvbench.files import read_bounded
from kvbench.units import MiB

BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_INT_DIGITS = 19  # 2**63 has 19 digits
# Bounded by value too: `0xfffffffffffffffff` is 19 characters and 2**68.
MAX_INT = (1 << 63) - 1
MAX_NODES = 500_000  # after alias expansion; the real nvidia-master.yaml has about 21,000
# The real nvidia-master.yaml is 0.3 MB; 64 MiB is far past any config and still reads fast.
MAX_FILE_BYTES = 64 * MiB


def _int_in_range(loader: yaml.BaseConstructor, node: yaml.ScalarNode) -> int:
    """YAML ints, refusing absurd lengths before Python converts them (past 4,300 digits
    `int()` raises; no config number needs more than 64 bits)."""
    digits = sum(c.isalnum() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits is out of range (at most "
            f"{MAX_INT_DIGITS})", node.start_mark)
    return int_in_range(loader.construct_yaml_int(node), node)


def int_in_range(value: int, node: yaml.Node) -> int:
    """`value`, or a YAML error at its node when it is past 64 bits (hexadecimal, octal,
    binary and sexagesimal integers are short to write and long in value)."""
    if -MAX_INT - 1 <= value <= MAX_INT:
        return value
    raise yaml.constructor.ConstructorError(
        None, None, f"the integer {node.value} is out of range (at most 64 bits)",
        node.start_mark)


class BoundedLoader(BaseLoader):  # type: ignore[misc, valid-type]
    """The safe loader with the integer bound."""


BoundedLoader.add_constructor("tag:yaml.org,2002:int", _int_in_range)
# YAML 1.1 reads `1e3` and `5e-1` (no dot) as strings; a user means numbers, and a string that
# a lax number field accepts is read differently further on (validate passed size-gb-per-rank
# "1e3"; plan crashed on int("1e3")). Read them as YAML 1.2 does: floats.
BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def expanded_size(node: yaml.Node, limit: int) -> int:
    """Nodes the document would have with every alias expanded (memoised per node, so a
    billion-laughs document is measured in linear time); stops counting past `limit`."""
    memo: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        if id(n) in memo:
            return memo[id(n)]
        memo[id(n)] = 1  # a recursive alias counts once
        total = 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        elif isinstance(n, yaml.SequenceNode):
            for v in n.value:
                total += size(v)
                if total > limit:
                    break
        memo[id(n)] = total
        return total

    return size(node)


def alias_bomb_error(where: object, error: type[KvbenchError]) -> KvbenchError:
    return error(f"{where}: YAML aliases expand to more than {MAX_NODES:,} nodes",
                 hint="an alias (*name) repeats its anchor's whole value; the real master "
                 "configs expand to about 21,000 nodes")


def construct(loader: yaml.BaseLoader, where: object, error: type[KvbenchError]) -> Any:
    """The loader's one document, alias expansion bounded; YAML errors as `error` with the
    line."""
    try:
        node = loader.get_single_node()
        if node is not None and expanded_size(node, MAX_NODES) > MAX_NODES:
            raise alias_bomb_error(where, error)
        doc = loader.construct_document(node) if node is not None else None
        return check_document_text(doc, str(where), error)
    except yaml.YAMLError as e:
        raise yaml_error(e, where, error) from None
    finally:
        loader.dispose()


def yaml_error(e: yaml.YAMLError, where: object, error: type[KvbenchError]) -> KvbenchError:
    """A YAML parse error as `error`, with the file and line where PyYAML found it."""
    mark = getattr(e, "problem_mark", None)
    at = f"{where}:{mark.line + 1}" if mark else str(where)
    problem = getattr(e, "problem", None) or str(e)
    return error(f"{at}: not valid YAML: {problem}")


def load_text(text: str, where: object, error: type[KvbenchError] = KvbenchError) -> Any:
    return construct(BoundedLoader(text), where, error)


def read_text(path: str | Path, what: str, error: type[KvbenchError] = KvbenchError) -> str:
    """A YAML file's text: bounded (a regular file of at most MAX_FILE_BYTES) and UTF-8."""
    raw = read_bounded(path, MAX_FILE_BYTES, what, error)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at offset "
                    f"{e.start})") from None


def load_file(path: str | Path, what: str, error: type[KvbenchError] = KvbenchError) -> Any:
    """A user-given YAML file's document, every limit applied, every failure `error`."""
    return load_text(read_text(path, what, error), path, error)
