"""The launcher half of an offload twin: the branch `kvbench recipe mirror` writes into the key's
InferenceX launcher when it has none, as seed 000's pull request wrote one (InferenceX
42692ef77, qwen3.5_fp4_mi355x_sglang_mtp.sh:13-15, 57-148, 190, 207):

- `check_env_vars` also requires KV_OFFLOADING and TOTAL_CPU_DRAM_GB;
- before the engine's argument arrays: `CACHE_ARGS=()`, the resident page size, and an
  `if require_agentic_kv_offload_backend <backend>` branch that sets the arm's page size,
  applies the twin's engine-image fix (this arm only, idempotent, refusing a moved anchor),
  sizes the pool from TOTAL_CPU_DRAM_GB (data/launcher_arms.yaml), refuses a size outside it
  and fills CACHE_ARGS with the planner's flags;
- the engine command passes `--page-size "$PAGE_SIZE"` and ends with `"${CACHE_ARGS[@]}"`.

Everything else in the file stays byte for byte. A launcher that already has a branch for the
backend is left alone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvbench import yamldoc
from kvbench.authoring.practice import KeyWhen
from kvbench.errors import RecipeError

DATA = Path(__file__).parent / "data" / "launcher_arms.yaml"
_STRICT = ConfigDict(extra="forbid", populate_by_name=True)
# the launcher's names for the expressions' variables
_BASH_NAMES = {"total_cpu_dram_gb": "TOTAL_CPU_DRAM_GB", "tp": "TP",
               "reserve_gb": "HICACHE_ALIGNMENT_RESERVE_GB", "hicache_size_gb": "HICACHE_SIZE_GB"}
_ENGINE_ARRAY = re.compile(r"^(?P<name>[A-Z_]*(?:SGLANG|SERVER|SERVE)[A-Z_]*_CMD)=\($")
# runner profile name -> the hardware part of launcher names (runners/launch_*.sh)
_LEGACY_HARDWARE = ("mi300x", "mi325x", "h100")


class Arm(BaseModel):
    model_config = _STRICT
    source: str
    when: KeyWhen
    backend: str
    reserve_gb: str = Field(alias="reserve-gb")
    size_gb: str = Field(alias="size-gb")
    projected_gb: str = Field(alias="projected-gb")
    why: list[str] = []


class _File(BaseModel):
    model_config = _STRICT
    arms: list[Arm]


@cache
def _arms() -> list[Arm]:
    try:
        return _File.model_validate(yamldoc.load_file(DATA, "launcher arms file",
                                                      RecipeError)).arms
    except ValueError as e:
        raise RecipeError(f"invalid launcher arms file {DATA}: {e}") from None


def arm_for(facts: dict[str, Any], backend: str) -> Arm | None:
    """The launcher branch data for `backend` twins of a key with these facts."""
    return next((a for a in _arms() if a.backend == backend and a.when.matches(facts)), None)


def bash_arithmetic(expr: str) -> str:
    """An arms-file expression as the launcher's $(( )) arithmetic (`//` truncates there)."""
    out = expr.replace("//", "/")
    for name, bash in _BASH_NAMES.items():
        out = re.sub(rf"\b{name}\b", bash, out)
    if re.search(r"\b[a-z_]+\b", out):
        raise RecipeError(f"{DATA}: {expr!r} uses a name the launcher does not have "
                          f"(allowed: {', '.join(_BASH_NAMES)})")
    return f"$(({out}))"


def launcher_path(root: Path, entry: dict[str, Any], hardware: str | None,
                  spec_decoding: str) -> Path | None:
    """The key's agentic launcher in the checkout at `root`, named as the runner scripts name
    it: <model-prefix>_<precision>_<hardware>[_<framework>][_mtp].sh."""
    if not hardware:
        return None
    base = f"{entry.get('model-prefix')}_{entry.get('precision')}_{hardware}"
    spec = "_mtp" if spec_decoding == "mtp" else ""
    folder = root / "benchmarks" / "single_node" / "agentic"
    names = [f"{base}_{entry.get('framework')}{spec}.sh", f"{base}{spec}.sh"]
    if hardware in _LEGACY_HARDWARE:
        names.reverse()
    return next((folder / n for n in names if (folder / n).is_file()), None)


def has_arm(text: str, backend: str) -> bool:
    return re.search(rf"require_agentic_kv_offload_backend\s+{re.escape(backend)}\b",
                     text) is not None


def _patch_script(patch: dict[str, Any], indent: str) -> list[str]:
    """A heredoc that applies an edit patch inside the image once: the file is found through
    the engine package as the image's python imports it; a second run finds the fix and does
    nothing; an anchor that is not there exactly once stops the launcher."""
    package, _, rest = patch["file"].partition("/")
    body = f'''import importlib.util
import pathlib
import sys

PATCH = {patch["id"]!r}
ANCHOR = {patch["anchor"].rstrip(chr(10)).split(chr(10))!r}
REPLACEMENT = {patch["replacement"].rstrip(chr(10)).split(chr(10))!r}
spec = importlib.util.find_spec({package!r})
if spec is None or spec.origin is None:
    sys.exit(f"{{PATCH}}: package {package} is not importable")
path = pathlib.Path(spec.origin).parent / {rest!r}
lines = path.read_text().splitlines(keepends=True)


def at(i, want):
    return [line.strip() for line in lines[i:i + len(want)]] == [w.strip() for w in want]


if any(at(i, REPLACEMENT) for i in range(len(lines))):
    print(f"{{PATCH}} already applied in {{path}}")
    sys.exit(0)
found = [i for i in range(len(lines)) if at(i, ANCHOR)]
if len(found) != 1:
    sys.exit(f"{{PATCH}}: expected its anchor once in {{path}}, found {{len(found)}}")
i = found[0]
pad = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
lines[i:i + len(ANCHOR)] = [pad + r + chr(10) for r in REPLACEMENT]
path.write_text("".join(lines))
print(f"{{PATCH}} applied to {{path}}")'''
    return [f"{indent}python3 - <<'KVBENCH_PATCH'", *body.split("\n"), "KVBENCH_PATCH"]


@dataclass(slots=True)
class ArmText:
    """What the branch runs: the offload page size, the engine flags (name, value or None)
    in order, the per-rank cap and the image patch (an edit patch's fields) if any."""

    backend: str
    page_size: int | None
    flags: list[tuple[str, str | None]]
    cap_gb_per_rank: float | None
    cap_source: str
    patch: dict[str, Any] | None
    settings_source: str


def _branch(arm: Arm, what: ArmText, resident_page: int | None) -> list[str]:
    i1, i2 = "", "    "
    out = [f"{i1}# The {what.backend} DRAM-offload arm, written by `kvbench recipe mirror`",
           f"{i1}# after {arm.source}.",
           f"{i1}# Its page size and flags: {what.settings_source}."]
    out.append(f"{i1}CACHE_ARGS=()")
    if what.page_size is not None and resident_page is not None:
        out.append(f"{i1}PAGE_SIZE={resident_page}")
    out.append(f"{i1}if require_agentic_kv_offload_backend {what.backend}; then")
    if what.page_size is not None and resident_page is not None:
        out.append(f"{i2}PAGE_SIZE={what.page_size}")
    if what.patch:
        out += ["", f"{i2}# {what.patch['id']} ({what.patch.get('source', '')}):",
                f"{i2}# this arm's image needs it; resident arms run the image untouched."]
        out += _patch_script(what.patch, i2)
    out.append("")
    out += [f"{i2}# {line}" for line in arm.why]
    size = bash_arithmetic(arm.size_gb)
    out += [
        f"{i2}HICACHE_ALIGNMENT_RESERVE_GB={bash_arithmetic(arm.reserve_gb)}",
        f'{i2}if [ "$((TOTAL_CPU_DRAM_GB - HICACHE_ALIGNMENT_RESERVE_GB))" -lt 1 ]; then',
        f'{i2}    echo "Error: no DRAM left for HiCache after the '
        f'${{HICACHE_ALIGNMENT_RESERVE_GB}} GB alignment reserve." >&2',
        f"{i2}    exit 1",
        f"{i2}fi",
        f"{i2}MAX_HICACHE_SIZE_GB={size}",
    ]
    if what.cap_gb_per_rank is not None:
        cap = f"{what.cap_gb_per_rank:g}"
        out += [f"{i2}# at most {cap} GB per rank:", f"{i2}# {what.cap_source}",
                f"{i2}HICACHE_MAX_SIZE_GB_PER_RANK=${{HICACHE_MAX_SIZE_GB_PER_RANK:-{cap}}}",
                f'{i2}if [ "$MAX_HICACHE_SIZE_GB" -gt "$HICACHE_MAX_SIZE_GB_PER_RANK" ]; then',
                f'{i2}    MAX_HICACHE_SIZE_GB="$HICACHE_MAX_SIZE_GB_PER_RANK"',
                f"{i2}fi"]
    out += [
        f'{i2}HICACHE_SIZE_GB="${{HICACHE_SIZE_GB:-$MAX_HICACHE_SIZE_GB}}"',
        f'{i2}if [ "$HICACHE_SIZE_GB" -lt 1 ] || [ "$HICACHE_SIZE_GB" -gt '
        f'"$MAX_HICACHE_SIZE_GB" ]; then',
        f'{i2}    echo "Error: HICACHE_SIZE_GB=$HICACHE_SIZE_GB outside '
        f'1..$MAX_HICACHE_SIZE_GB." >&2',
        f"{i2}    exit 1",
        f"{i2}fi",
        f"{i2}PROJECTED_HICACHE_TOTAL_GB={bash_arithmetic(arm.projected_gb)}",
        f'{i2}if [ "$PROJECTED_HICACHE_TOTAL_GB" -gt "$TOTAL_CPU_DRAM_GB" ]; then',
        f'{i2}    echo "Error: projected HiCache use ${{PROJECTED_HICACHE_TOTAL_GB}} GB exceeds '
        f'the ${{TOTAL_CPU_DRAM_GB}} GB budget." >&2',
        f"{i2}    exit 1",
        f"{i2}fi",
        f'{i2}echo "HiCache: ${{HICACHE_SIZE_GB}} GB per rank across TP=${{TP}}; projected '
        f'node total ${{PROJECTED_HICACHE_TOTAL_GB}} GB of ${{TOTAL_CPU_DRAM_GB}} GB."',
        "",
        f"{i2}CACHE_ARGS=(",
    ]
    for name, value in what.flags:
        out.append(f"{i2}    {name}" + ("" if value is None else f" {value}"))
    out += [f"{i2})", f"{i1}fi", ""]
    return out


def add_arm(text: str, where: str, arm: Arm, what: ArmText) -> str:
    """`text` (a launcher) with the offload branch written in; RecipeError naming the part
    of the launcher that is not where a launcher keeps it."""
    lines = text.split("\n")
    # 1. the variables the branch reads must be required
    start = next((n for n, line in enumerate(lines) if line.startswith("check_env_vars")),
                 None)
    if start is None:
        raise RecipeError(f"{where}: no check_env_vars call to add KV_OFFLOADING to")
    end = start
    while lines[end].rstrip().endswith("\\"):
        end += 1
    have = " ".join(lines[start:end + 1]).split()
    missing = [v for v in ("KV_OFFLOADING", "TOTAL_CPU_DRAM_GB") if v not in have]
    if missing:
        indent = re.match(r"\s*", lines[end]).group(0) if end > start else "    "
        lines[end] = lines[end].rstrip() + " \\"
        lines.insert(end + 1, indent + " ".join(missing))
    # 2. the engine command array: page size and CACHE_ARGS
    cmd = next((n for n, line in enumerate(lines) if _ENGINE_ARRAY.match(line)), None)
    if cmd is None:
        raise RecipeError(f"{where}: no engine command array (NAME_CMD=( ... )) to pass "
                          "CACHE_ARGS to")
    close = next((n for n in range(cmd + 1, len(lines)) if lines[n].strip() == ")"), None)
    if close is None:
        raise RecipeError(f"{where}: the engine command array at line {cmd + 1} never closes")
    resident_page, found_page = None, False
    page = re.compile(r"^(\s*)--page-size\s+(\d+)\s*$")
    for n in range(cmd + 1, close):
        m = page.match(lines[n])
        found_page = found_page or m is not None
        if m and what.page_size is not None and int(m.group(2)) != what.page_size:
            resident_page = int(m.group(2))
            lines[n] = f'{m.group(1)}--page-size "$PAGE_SIZE"'
    if what.page_size is not None and not found_page:  # the arm passes its own page size
        what.flags.insert(0, ("--page-size", str(what.page_size)))
    item_indent = re.match(r"\s*", lines[close - 1]).group(0) or "    "
    lines.insert(close, f'{item_indent}"${{CACHE_ARGS[@]}}"')
    # 3. the branch, before the argument arrays the command is built from
    first_array = next(n for n, line in enumerate(lines)
                       if re.match(r"^[A-Z_]+=\($", line) and n <= cmd + 1)
    lines[first_array:first_array] = _branch(arm, what, resident_page)
    return "\n".join(lines)
