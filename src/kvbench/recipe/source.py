"""Reading recipe YAML: C-accelerated when available, duplicate keys reported (PyYAML would
silently keep the last one), and YAML paths mapped back to line numbers for messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvbench.errors import RecipeError

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """Safe loader that notes duplicate mapping keys instead of dropping them."""

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


def read_yaml(path: Path) -> tuple[Any, list[str]]:
    """The document and a list of problems (duplicate keys) found while reading."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise RecipeError(f"{path}: file not found") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read: {e.strerror}") from None
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise RecipeError(f"{where}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
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
                self._root = yaml.compose(self.path.read_text(), Loader=_Base)
            except (OSError, yaml.YAMLError):
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
