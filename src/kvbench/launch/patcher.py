"""Image modifications applied at server start (plan/image.py says which a row gets): each the
way the launcher does it, idempotent, and a refusal naming it where kvbench cannot.

An `edit` replaces an anchor block of lines with a replacement in one file of the installed
engine package. The order of checks is what makes it safe to run before every start:

1. the file carries this edit's marker comment        -> `already-applied` (no-op)
2. the upstream fix (default: the replacement) is in   -> `upstream-fixed` (no-op)
3. the anchor occurs exactly once                      -> `applied`, written atomically
4. otherwise                                           -> PatchError naming file and anchor

Blocks match line by line at any one indentation (the anchor's first line sets it), so an
edit written dedented in YAML finds code nested in a method; `within` confines the search
to one block (a line and what is indented under it), as the launcher's `sed` range does.

`pip` installs pinned packages (already applied when the pins are installed), `apt` system
packages (as root), `script` runs the launcher's own script from the row's InferenceX checkout
when its sha256 is the pinned one, `build` (a source build) is always a refusal. A user who
knows the image carries a modification names it in `skip` (`--skip-image-mod`): the outcome
says `skipped-by-user`."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
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


def _region(lines: list[str], within: Any, pid: str, path: Path) -> tuple[int, int]:
    """[start, end) of the block opened by the one line equal (stripped) to `within`: up to
    the next non-blank line indented no deeper; the whole file without `within`."""
    if not within:
        return 0, len(lines)
    heads = [i for i, line in enumerate(lines) if line.strip() == str(within).strip()]
    if len(heads) != 1:
        raise PatchError(f"patch {pid}: block {str(within).strip()!r} "
                         f"{'not found' if not heads else f'found {len(heads)} times'} in "
                         f"{path}: the engine source moved",
                         hint="check whether this engine version still needs the patch")
    start = heads[0]
    depth = len(_indent(lines[start]))
    end = next((j for j in range(start + 1, len(lines))
                if lines[j].strip() and len(_indent(lines[j])) <= depth), len(lines))
    return start, end


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
    lo, hi = _region(lines, patch.get("within"), pid, path)
    region = lines[lo:hi]
    fixed = find_block(region, _block(str(patch.get("upstream-fix") or patch["replacement"])))
    if fixed:
        return {**record, "status": "upstream-fixed", "line": lo + fixed[0] + 1}
    anchor = _block(str(patch["anchor"]))
    hits = [lo + h for h in find_block(region, anchor)]
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
                  roots: Mapping[str, Path] | None = None,
                  skip: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Apply each image modification in order (an entry without `kind` is an edit: a recipe
    `patches:` entry); `roots` maps a package name to the directory holding it (tests, or an
    engine outside this interpreter's path); `skip`: ids the user says the image carries."""
    out = []
    for mod in patches or []:
        kind = str(mod.get("kind") or "edit")
        record = {"id": str(mod["id"]), "kind": kind, "source": mod.get("source")}
        if mod["id"] in skip:
            out.append({**record, "status": "skipped-by-user"})
        elif kind == "edit":
            package = str(mod["file"]).split("/", 1)[0]
            out.append({"kind": kind, **apply_patch(mod, (roots or {}).get(package))})
        else:
            out.append({**record, **_APPLY[kind](mod)})
    return out


def _refuse(mod: Mapping[str, Any], why: str) -> PatchError:
    return PatchError(f"image modification {mod['id']} ({mod.get('source')}): {why}",
                      hint=f"make the image carry it and pass --skip-image-mod {mod['id']}")


def _installed(requirement: str) -> bool:
    """A requirement `name==version` (or a bare name) the environment already satisfies."""
    name, _, version = requirement.partition("==")
    try:
        have = importlib.metadata.version(name.strip())
    except importlib.metadata.PackageNotFoundError:
        return False
    return not version or have == version.strip()


def pip_command(mod: Mapping[str, Any]) -> list[str]:
    """The launcher's install (InferenceX benchmark_lib.sh agentic_pip_install: python3 -m
    pip install, with --break-system-packages where pip knows it) by this interpreter."""
    cmd = [sys.executable, "-m", "pip", "install"]
    help_text = subprocess.run([*cmd, "--help"], capture_output=True, text=True).stdout
    if "--break-system-packages" in help_text:
        cmd.append("--break-system-packages")
    return [*cmd, *map(str, mod.get("pip-args") or ()), *map(str, mod["packages"])]


def _run(mod: Mapping[str, Any], argv: list[str], cwd: Path | None = None) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise _refuse(mod, f"`{' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}` exited "
                           f"{done.returncode}: {' | '.join(tail)}")
    return {"status": "applied", "command": argv}


def _pip(mod: Mapping[str, Any]) -> dict[str, Any]:
    if all(_installed(str(r)) for r in mod["packages"]):
        return {"status": "already-applied"}
    return _run(mod, pip_command(mod))


def _apt(mod: Mapping[str, Any]) -> dict[str, Any]:
    if shutil.which(str(mod["provides"])):
        return {"status": "already-applied"}
    if os.geteuid() != 0:
        raise _refuse(mod, f"{mod['provides']} is not on PATH and installing "
                           f"{' '.join(mod['packages'])} with apt-get needs root")
    _run(mod, ["apt-get", "-y", "update"])
    return _run(mod, ["apt-get", "install", "-y", "--no-install-recommends",
                      *map(str, mod["packages"])])


def _script(mod: Mapping[str, Any]) -> dict[str, Any]:
    path = mod.get("script-file")
    if not path or not Path(path).is_file():
        raise _refuse(mod, f"{mod['path']} is not in the row's InferenceX checkout"
                           + (f" ({path})" if path else ""))
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if mod.get("sha256") != digest:
        raise _refuse(mod, f"{path} has sha256 {digest[:16]}..., not the pinned "
                           f"{str(mod.get('sha256'))[:16]}...: the script moved")
    runner = [sys.executable] if str(path).endswith(".py") else ["bash"]
    return _run(mod, [*runner, str(path)], cwd=Path(path).parent)


def _build(mod: Mapping[str, Any]) -> dict[str, Any]:
    raise _refuse(mod, f"kvbench does not build {mod['what']}")


_APPLY = {"pip": _pip, "apt": _apt, "script": _script, "build": _build}


def main(argv: Sequence[str]) -> int:
    """`python -m kvbench.launch.patcher MODS_JSON [SKIP_JSON]`: apply on this host (a
    multi-node worker's node), print the outcomes as JSON; exit 2 with one line on a
    PatchError."""
    import json

    try:
        skip = json.loads(argv[1]) if len(argv) > 1 else ()
        print(json.dumps(apply_patches(json.loads(argv[0]), skip=skip)))
    except PatchError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
