"""Reading recipe YAML: C-accelerated when available, duplicate keys reported (PyYAML would
silently keep the last one), and YAML paths mapped back to line numbers for messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvbench import yamldoc
from kvbench.errors import RecipeError
from kvbench.files import read_bounded

_Base = yamldoc.BaseLoader


class _Loader(yamldoc.BoundedLoader):  # type: ignore[misc, valid-type]
    """Bounded safe loader that notes duplicate mapping keys instead of dropping them."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                self.duplicates.append((key, key_node.start_mark.line + 1))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def decode_text(raw: bytes, path: Path) -> str:
    """UTF-8 text (a UTF-8 BOM is fine); any other encoding is named, with its place."""
    for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                      (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
        if raw.startswith(bom):
            raise RecipeError(f"{path}: the file is {name}-encoded; recipes are UTF-8",
                              hint=f"convert it: iconv -f {name} -t UTF-8 {path}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise RecipeError(
            f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            "recipes are UTF-8",
            hint=f"convert it, e.g. from Latin-1: iconv -f LATIN1 -t UTF-8 {path}") from None


def read_text(path: Path) -> str:
    """A recipe file's text, every failure a RecipeError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise RecipeError(f"{path}: is a directory, not a YAML file",
                          hint=f"name the files in it, e.g. {path}/*.yaml")
    raw = read_bounded(path, yamldoc.MAX_FILE_BYTES, "YAML file", RecipeError)
    if not raw.strip():
        raise RecipeError(f"{path}: the file is empty",
                          hint="a master config maps config keys to entries")
    return decode_text(raw, path)


def read_yaml(path: Path) -> tuple[Any, list[str]]:
    """The document and a list of problems (duplicate keys) found while reading."""
    loader = _Loader(read_text(path))
    data = yamldoc.construct(loader, path, RecipeError)
    problems = [f"{path}:{line}: duplicate key {key!r} (YAML keeps only the last)"
                for key, line in loader.duplicates]
    return data, problems


class LineFinder:
    """Maps a key path to the line it was written on; composes the file lazily, on the
    first error, because valid files never need it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._root: yaml.Node | None = None

    def line(self, loc: tuple[str | int, ...]) -> int | None:
        if self._root is None:
            try:
                self._root = yaml.compose(read_text(self.path), Loader=_Base)
            except (RecipeError, yaml.YAMLError):
                return None
        node = self._root
        line = None
        for part in loc:
            child = _child(node, part)
            if child is None:
                break
            key_node, node = child
            line = (key_node or node).start_mark.line + 1
        return line

    def where(self, loc: tuple[str | int, ...]) -> str:
        line = self.line(loc)
        return f"{self.path}:{line}" if line else str(self.path)


def _child(node: yaml.Node | None, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == str(part):
                return key_node, value_node
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return None, node.value[part]
    return None
