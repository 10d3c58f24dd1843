"""The recipe reader's event-built documents equal PyYAML's composed and constructed ones
(same values, same errors), and its duplicate-key notes are the ones the node walk it replaced
gave: keys compared as built (`1` and `true` are one key, as in the dict), depth first, each
key noted before its value is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvbench.errors import RecipeError
from kvbench.recipe import source

DATA = Path(__file__).resolve().parents[1] / "data" / "inferencex"

DUPLICATES = {
    "a: 1\na: 2\n": [("a", 2)],
    "a: {b: 1, b: 2}\na: 3\n": [("b", 1), ("a", 2)],
    "a: 1\nb:\n  c: 2\n  c: 3\n  d: {e: 1, e: 2}\nb: 4\n": [("c", 4), ("e", 5), ("b", 6)],
    "True: 1\n1: 2\ntrue: 3\nnull: 4\n~: 5\n": [("1", 2), ("true", 3), ("~", 5)],
}

SNIPPETS = [
    "x: &a 1\ny: *a\n",
    "<<: {a: 1}\nb: 2\n",
    "1.5: x\n",
    "? [a]\n: 1\n",
    "a: 0o17\nb: 017\nc: 0x1F\nd: 1_000\ne: 0\nf: 00\ng: -5\nh: +5\ni: 9223372036854775807\n",
    "a: 12345678901234567890123\n",
    "a: 1e3\nb: .inf\nc: -.NaN\nd: 1.5\ne: 5e-1\nf: 1_0.5\n",
    "a: yes\nb: No\nc: ~\nd:\ne: null\nf: ''\ng: \"\"\n",
    "a: 2020-01-01\n",
    "a: !!str 1\nb: ! x\n",
    "a: !foo x\n",
    "a: =\n",
    "- 1\n- [2, {x: y}]\n- []\n- {}\n",
    "---\na: 1\n---\nb: 2\n",
    "'a': \"1\"\nb: '2'\nc: |\n  text\n",
    "a: [1, 2\n",
    "a: b: c\n",
    "plain\n",
    "\"q\"\n",
    "# only a comment\n",
    "---\n...\n",
    "[1, 2]: x\n",
]


def _general(path: Path) -> tuple[object, list[str]]:
    """PyYAML's own composition and construction with the same loader (the reference)."""
    loader = source._Loader(source.read_text(path))
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        raise RecipeError(str(e)) from None
    finally:
        loader.dispose()
    return data, source._duplicate_problems(path, loader)


def _outcome(read, path: Path) -> tuple:
    try:
        return ("ok", *read(path))
    except RecipeError:
        return ("error",)


@pytest.mark.parametrize("text", SNIPPETS)
def test_snippet_reads_as_pyyaml_composes_it(tmp_path, text):
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    assert repr(_outcome(source.read_yaml, path)) == repr(_outcome(_general, path))


@pytest.mark.parametrize("text", DUPLICATES)
def test_duplicate_keys_are_noted_in_document_order(tmp_path, text):
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    data, problems = source.read_yaml(path)
    assert data == _general(path)[0]
    assert problems == [f"{path}:{line}: duplicate key {key!r} (YAML keeps only the last)"
                        for key, line in DUPLICATES[text]]


@pytest.mark.parametrize("name", ["amd-master.yaml", "nvidia-master.yaml", "runners.yaml"])
def test_real_configs_read_as_pyyaml_composes_them(name):
    path = DATA / name
    loader = source._Loader(source.read_text(path))
    try:
        assert source._plain(loader) is not None  # the fast path, not the fallback
    finally:
        loader.dispose()
    assert source.read_yaml(path) == _general(path)
