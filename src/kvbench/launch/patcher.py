"""Engine-image patches applied at server start: idempotent, and loud when the source moved.

A patch (the recipe's `patches:` entry, recipe/patches.py) replaces an anchor block of lines
with a replacement in one file of the installed engine package. The order of checks is what
makes it safe to run before every start:

1. the file carries this patch's marker comment      -> `already-applied` (no-op)
2. the upstream fix (default: the replacement) is in   -> `upstream-fixed` (no-op)
3. the anchor occurs exactly once                      -> `applied`, written atomically
4. otherwise                                           -> PatchError naming file and anchor

Blocks match line by line at any one indentation (the anchor's first line sets it), so a
patch written dedented in YAML finds code nested in a method."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvbench.errors import PatchError

MARKER = "# kvbench patch "


def _block(text: str) -> list[str]:
    return [line.rstrip() for line in textwrap.dedent(text).strip("\n").split("\n")]


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def find_block(lines: Sequence[str], block: Sequence[str]) -> list[int]:
    """0-based line indexes where `block` starts, at any one indentation."""
    hits = []
    first = block[0].strip()
    for i, line in enumerate(lines):
        if line.strip() != first or i + len(block) > len(lines):
            continue
        indent = _indent(line)
        if all((lines[i + j].strip() == "") if not want else
               (lines[i + j].rstrip() == indent + want) for j, want in enumerate(block)):
            hits.append(i)
    return hits


def package_root(package: str) -> Path:
    """The directory holding `package` for this interpreter (its site-packages, or a source
    checkout on sys.path), found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise PatchError(f"engine package {package!r} is not importable here, so its "
                         f"patches cannot be applied",
                         hint="install the engine in this environment (kvbench runs beside "
                              "the engine, inside its image)")
    return Path(locations[0]).parent


def _write_keeping_mode(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def apply_patch(patch: Mapping[str, Any], root: Path | None = None) -> dict[str, Any]:
    """Apply one patch (kebab-case keys as in the recipe) under `root` (default: where the
    file's package is installed); the outcome record for command.json and result.json."""
    pid, file = str(patch["id"]), str(patch["file"])
    base = root if root is not None else package_root(file.split("/", 1)[0])
    path = base / file
    record = {"id": pid, "file": str(path), "source": patch.get("source"),
              "arms": list(patch.get("arms") or ["all"])}
    try:
        text = path.read_text()
    except OSError as e:
        raise PatchError(f"patch {pid}: cannot read {path}: {e.strerror}",
                         hint="the engine package no longer has this file; update the "
                              "recipe's patches") from None
    lines = text.split("\n")
    marker = f"{MARKER}{pid}"
    if any(line.strip().startswith(marker) for line in lines):
        return {**record, "status": "already-applied"}
    fixed = find_block(lines, _block(str(patch.get("upstream-fix") or patch["replacement"])))
    if fixed:
        return {**record, "status": "upstream-fixed", "line": fixed[0] + 1}
    anchor = _block(str(patch["anchor"]))
    hits = find_block(lines, anchor)
    if len(hits) != 1:
        where = "not found" if not hits else \
            f"found {len(hits)} times (lines {', '.join(str(h + 1) for h in hits)})"
        raise PatchError(
            f"patch {pid}: anchor {anchor[0].strip()!r} ({len(anchor)} line"
            f"{'s' * (len(anchor) != 1)}) {where} in {path}: the engine source moved",
            hint="check whether this engine version still needs the patch; if so, update "
                 "the patch's anchor, otherwise set upstream-fix or drop the patch")
    at = hits[0]
    indent = _indent(lines[at])
    note = f"{marker}" + (f": {patch['source']}" if patch.get("source") else "")
    new = [indent + note, *(indent + line if line else "" for line in
                            _block(str(patch["replacement"])))]
    lines[at:at + len(anchor)] = new
    _write_keeping_mode(path, "\n".join(lines))
    return {**record, "status": "applied", "line": at + 1}


def apply_patches(patches: Sequence[Mapping[str, Any]] | None,
                  roots: Mapping[str, Path] | None = None) -> list[dict[str, Any]]:
    """Apply each patch in order; `roots` maps a package name to the directory holding it
    (tests, or an engine outside this interpreter's path)."""
    out = []
    for patch in patches or []:
        package = str(patch["file"]).split("/", 1)[0]
        out.append(apply_patch(patch, (roots or {}).get(package)))
    return out


def main(argv: Sequence[str]) -> int:
    """`python -m kvbench.launch.patcher PATCHES_JSON`: apply on this host (a multi-node
    worker's node), print the outcomes as JSON; exit 2 with one line on a PatchError."""
    import json
    import sys

    try:
        print(json.dumps(apply_patches(json.loads(argv[0]))))
    except PatchError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
