"""Reading recipe YAML: C-accelerated when available, duplicate keys reported (PyYAML would
silently keep the last one), and YAML paths mapped back to line numbers for messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvbench import bounds, yamldoc
from kvbench.errors import RecipeError
from kvbench.files import read_bounded

_Base = yamldoc.BaseLoader


class _Loader(yamldoc.BoundedLoader):  # type: ignore[misc, valid-type]
    """Bounded safe loader that notes duplicate mapping keys instead of dropping them."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        # The implicit tag of a node, as PyYAML's Resolver.resolve gives it, without its
        # per-node work where the answer is fixed: a plain scalar whose first character no
        # implicit resolver is registered for (most strings), and lists and mappings when no
        # path resolver exists. A third of composing a master config went there.
        if kind is yaml.ScalarNode:
            if implicit[0] and value and value[0] not in self.yaml_implicit_resolvers \
                    and None not in self.yaml_implicit_resolvers \
                    and not self.yaml_path_resolvers:
                return self.DEFAULT_SCALAR_TAG
        elif not self.yaml_path_resolvers:
            if kind is yaml.MappingNode:
                return self.DEFAULT_MAPPING_TAG
            if kind is yaml.SequenceNode:
                return self.DEFAULT_SEQUENCE_TAG
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                self.duplicates.append((key, key_node.start_mark.line + 1))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _int_in_range(loader: yaml.BaseConstructor, node: yaml.ScalarNode) -> int:
    """YAML ints, refusing absurd lengths before Python converts them (past 4,300 digits
    `int()` raises; no recipe number needs more than 64 bits)."""
    value = str(node.value)
    if len(value) <= yamldoc.MAX_INT_DIGITS:
        if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):
            return yamldoc.int_in_range(int(value), node)  # a leading 0 is YAML 1.1 octal
        return yamldoc.int_in_range(loader.construct_yaml_int(node), node)
    digits = sum(c.isalnum() for c in value)
    if digits > yamldoc.MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits is out of range (at most "
            f"{yamldoc.MAX_INT_DIGITS})", node.start_mark)
    return yamldoc.int_in_range(loader.construct_yaml_int(node), node)


_Loader.add_constructor("tag:yaml.org,2002:int", _int_in_range)


_STR, _INT, _FLOAT, _BOOL, _NULL = (
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null"))
_KEY_TAGS = (_STR, _INT, _BOOL, _NULL)


class _NotPlain(Exception):
    """The document uses more than plain JSON-like YAML (anchors, aliases, explicit tags, merge
    keys, complex keys, several documents), or does not parse: the general path decides."""


def _plain(loader: _Loader) -> Any:
    """The document built straight from the parser's events, for the JSON-like YAML recipes
    are (strings, numbers, booleans, nulls, lists, mappings). Composing nodes first (PyYAML's
    composer builds a Python Node per value, then resolves and constructs each one) was about
    two thirds of reading a master config with the parse cache cold; events carry the same
    values. Scalars get the tag the composer would resolve for them (`Resolver.resolve`:
    quoted ones are strings, plain ones by the implicit resolvers); the duplicate-key notes
    and the integer bound are the same. Anything else raises _NotPlain and takes the general
    path, whose messages stay the reference."""
    if loader.yaml_path_resolvers:
        raise _NotPlain
    resolvers = loader.yaml_implicit_resolvers
    wildcard = resolvers.get(None, [])
    get = loader.get_event
    try:
        if type(get()) is not yaml.StreamStartEvent:
            raise _NotPlain
        event = get()
        if type(event) is yaml.StreamEndEvent:
            return None
        if type(event) is not yaml.DocumentStartEvent:
            raise _NotPlain
        # one frame per open collection: [container, the key awaiting its value or _NO_KEY]
        stack: list[list[Any]] = []
        root: Any = _NO_KEY
        while True:
            event = get()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _NotPlain
                text = event.value
                tag = _STR
                if event.implicit[0]:
                    for tag_, regexp in resolvers.get(text[0] if text else "", []) + wildcard:
                        if regexp.match(text):
                            tag = tag_
                            break
                if tag == _STR:
                    value: Any = text
                elif tag == _INT:
                    if len(text) < yamldoc.MAX_INT_DIGITS and text.isascii() and \
                            text.isdigit() and (text[0] != "0" or len(text) == 1):
                        value = int(text)  # plain decimal below 10**18, as _int_in_range
                    else:
                        value = _int_in_range(loader, yaml.ScalarNode(
                            tag, text, event.start_mark, event.end_mark))
                elif tag == _FLOAT:
                    value = loader.construct_yaml_float(yaml.ScalarNode(tag, text))
                elif tag == _BOOL:
                    value = loader.bool_values[text.lower()]
                elif tag == _NULL:
                    value = None
                else:  # timestamps, merge keys, `=`: PyYAML's constructors
                    raise _NotPlain
                if stack:
                    frame = stack[-1]
                    container = frame[0]
                    if type(container) is list:
                        container.append(value)
                    elif frame[1] is _NO_KEY:
                        if tag not in _KEY_TAGS:
                            raise _NotPlain  # float keys: PyYAML's rules
                        if value in container:  # noted before the value, as the composer does
                            loader.duplicates.append((text, event.start_mark.line + 1))
                        frame[1] = value
                    else:
                        container[frame[1]] = value
                        frame[1] = _NO_KEY
                    continue
                root = value
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _NotPlain
                if stack and type(stack[-1][0]) is dict and stack[-1][1] is _NO_KEY:
                    raise _NotPlain  # a collection as a key
                stack.append([{} if kind is yaml.MappingStartEvent else [], _NO_KEY])
                continue
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                value = stack.pop()[0]
                if stack:
                    frame = stack[-1]
                    if type(frame[0]) is list:
                        frame[0].append(value)
                    else:
                        frame[0][frame[1]] = value
                        frame[1] = _NO_KEY
                    continue
                root = value
            else:  # an alias (the general path bounds its expansion)
                raise _NotPlain
            # the root value is complete: one document, then the end of the stream
            if type(get()) is not yaml.DocumentEndEvent or \
                    type(get()) is not yaml.StreamEndEvent:
                raise _NotPlain
            return root
    except yaml.YAMLError:
        raise _NotPlain from None


_NO_KEY = object()


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
    text = read_text(path)
    loader = _Loader(text)
    try:
        data = _plain(loader)
    except _NotPlain:
        pass
    else:
        return _bounded_text(data, path), _duplicate_problems(path, loader)
    finally:
        loader.dispose()
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None and yamldoc.expanded_size(node, yamldoc.MAX_NODES) > \
                yamldoc.MAX_NODES:
            raise yamldoc.alias_bomb_error(path, RecipeError)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        raise yamldoc.yaml_error(e, path, RecipeError) from None
    finally:
        loader.dispose()
    return _bounded_text(data, path), _duplicate_problems(path, loader)


def _bounded_text(data: Any, path: Path) -> Any:
    """`data`, or one line naming the file, line and YAML path of a string past
    bounds.MAX_TEXT_CHARS (every pattern, message and dashboard that meets it stays fast)."""
    found = bounds.long_text(data)
    if found is None:
        return data
    loc, length = found
    raise RecipeError(f"{LineFinder(path).where(loc)}: {bounds.path_text(loc)}: "
                      f"{bounds.text_problem(length)}")


def _duplicate_problems(path: Path, loader: _Loader) -> list[str]:
    return [f"{path}:{line}: duplicate key {key!r} (YAML keeps only the last)"
            for key, line in loader.duplicates]


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
