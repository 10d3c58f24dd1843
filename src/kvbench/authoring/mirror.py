"""Mirror arms: for every GPU-resident agentic row of a config key, the offload row with the
same parallelism, speculative setting and concurrency list, planned before it is written.

This is what the seed pull requests did by hand (a `kv-offloading: dram` +
`kv-offload-backend: { name: hicache }` twin written right under each resident row). Each
twin is expanded into its matrix jobs and planned; a twin any of whose concurrencies the
planner refuses is reported with the planner's reason and not written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbench.authoring.practice import patch_lines, twin_practice
from kvbench.authoring.rowtext import (
    KV_OFFLOAD_BACKEND,
    KV_OFFLOADING,
    RowText,
    agentic_rows,
    load_round_trip,
    offload_twin,
    plain,
)
from kvbench.errors import KvbenchError, RecipeError
from kvbench.recipe import KV_OFFLOAD_BACKENDS, Runners

# Fields a twin may differ in from its resident row; everything else is its shape.
_ARM_FIELDS = frozenset({KV_OFFLOADING, KV_OFFLOAD_BACKEND, "conc-list", "conc-start",
                         "conc-end"})


@dataclass(slots=True)
class ArmOutcome:
    """What happened to one resident row: `added`, `refused` or `present` (a twin exists)."""

    config_key: str
    block: int
    index: int
    status: str
    line: int  # 1-based line of the resident row
    exp_names: list[str] = field(default_factory=list)
    host_gb_per_rank: list[float] = field(default_factory=list)  # planned, per job
    reasons: list[str] = field(default_factory=list)
    # the twin's offload settings as planned (HiCache page / policy / io / layout, size cap)
    settings: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.config_key}.agentic-coding[{self.block}].search-space[{self.index}]"


@dataclass(slots=True)
class MirrorResult:
    text: str
    outcomes: list[ArmOutcome]
    # `patches:` entries written (config key, patch id), and fixes a key needs but keeps
    # out of its own patches list (a warning naming the fix)
    patched: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def added(self) -> list[ArmOutcome]:
        return [o for o in self.outcomes if o.status == "added"]


def _shape(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _ARM_FIELDS}


def _is_resident(row: dict[str, Any]) -> bool:
    return row.get(KV_OFFLOADING, "none") == "none" and KV_OFFLOAD_BACKEND not in row


def _has_twin(row: RowText, rows: list[RowText], backend: str) -> bool:
    return any(
        other.block == row.block and other.data.get(KV_OFFLOADING) == "dram"
        and (other.data.get(KV_OFFLOAD_BACKEND) or {}).get("name") == backend
        and _shape(other.data) == _shape(row.data)
        for other in rows
    )


@dataclass(slots=True)
class _Planned:
    names: list[str]
    sizes: list[float]
    refusals: list[str]
    hicache_size_gb: list[int] = field(default_factory=list)  # --hicache-size, per job
    settings: list[str] = field(default_factory=list)


def _plan_twin(key: str, raw: dict[str, Any], block: dict[str, Any], twin: dict[str, Any],
               runners: Runners) -> _Planned:
    """Expand the twin into its matrix jobs and plan each: exp names, GB/rank, refusals,
    and the offload settings the planner gives them."""
    from kvbench.matrix.agentic import agentic_rows as matrix_rows
    from kvbench.matrix.entry import EntryContext
    from kvbench.matrix.job import Job
    from kvbench.matrix.selection import Selection
    from kvbench.plan.planner import plan_job
    from kvbench.units import GB

    entry = dict(raw, scenarios={"agentic-coding": [dict(block, **{"search-space": [twin]})]})
    ctx = EntryContext(key, entry, (raw["runner"],))
    try:
        rows = list(matrix_rows(ctx, Selection(config_files=()), runners))
    except KvbenchError as e:
        return _Planned([], [], [e.message])
    out = _Planned([], [], [])
    refusals: dict[str, list[str]] = {}
    for row in rows:
        # a twin is a new arm no launcher sizes: the planner's budget sizing
        plan = plan_job(Job(key, row, "agentic-coding"), runners, sizing="budget")
        out.names.append(plan.exp_name)
        inside = sum(p.bytes_per_rank for p in plan.host_pools if p.inside_configured_size)
        out.sizes.append(round(inside / GB, 2))
        args = plan.engine_args
        if "--hicache-size" in args:
            out.hicache_size_gb.append(int(args[args.index("--hicache-size") + 1]))
        settings = _settings_text(plan)
        if settings and settings not in out.settings:
            out.settings.append(settings)
        if plan.is_refused or not plan.within_budget:
            reason = "; ".join(plan.errors) or "projected host footprint exceeds the budget"
            refusals.setdefault(reason, []).append(plan.exp_name)
    out.refusals = [f"{reason} ({len(jobs)} of {len(rows)} jobs, first {jobs[0]})"
                    for reason, jobs in refusals.items()]
    return out


def _settings_text(plan: Any) -> str:
    """The HiCache settings a plan runs, as its flags name them."""
    args = plan.engine_args
    if "--enable-hierarchical-cache" not in args:
        return ""
    parts = [f"page {plan.page_size_tokens}"]
    for flag in ("--hicache-write-policy", "--hicache-io-backend", "--hicache-mem-layout"):
        if flag in args:
            parts.append(args[args.index(flag) + 1])
    return ", ".join(parts)


def _key_end(doc: Any, key: str, lines: list[str]) -> tuple[int, str]:
    """Where a new field of the config key's mapping goes (after its last non-blank line)
    and the indentation of its fields."""
    keys = [str(k) for k in doc]
    start = doc.lc.key(key)[0]
    following = [doc.lc.key(k)[0] for k in keys if doc.lc.key(k)[0] > start]
    stop = min(following) if following else len(lines)
    while stop > start + 1 and (not lines[stop - 1].strip()
                                or lines[stop - 1].lstrip().startswith("#")):
        stop -= 1
    child = next(line for line in lines[start + 1:stop] if line.strip())
    return stop, child[:len(child) - len(child.lstrip())]


def mirror_text(text: str, where: str, keys: Sequence[str], backend: str,
                runners: Runners, size_gb_per_rank: float | None = None) -> MirrorResult:
    """The master file `text` with an offload twin under every resident agentic row of
    `keys`, and what happened to each resident row."""
    if backend not in KV_OFFLOAD_BACKENDS:
        raise RecipeError(f"--backend {backend!r} is not an offload backend (allowed: "
                          f"{', '.join(KV_OFFLOAD_BACKENDS)})")
    doc = load_round_trip(text, where)
    lines = text.split("\n")
    spec: dict[str, Any] = {"name": backend}
    if size_gb_per_rank is not None:
        spec["size-gb-per-rank"] = size_gb_per_rank
    outcomes: list[ArmOutcome] = []
    inserts: list[tuple[int, list[str]]] = []
    patched: list[tuple[str, str]] = []
    warnings: list[str] = []
    for key in keys:
        if key not in doc:
            import difflib

            close = difflib.get_close_matches(key, [str(k) for k in doc], n=3)
            raise RecipeError(f"{where}: config key {key!r} is not in the file",
                              hint=f"did you mean {', '.join(close)}?" if close else None)
        rows = agentic_rows(doc, key, lines)
        if not rows:
            raise RecipeError(f"{where}: {key} has no agentic-coding rows to mirror")
        raw = plain(doc[key])
        practice = twin_practice(raw, backend)
        added = False
        for row in rows:
            if not _is_resident(row.data):
                continue
            outcome = ArmOutcome(key, row.block, row.index, "present", row.start + 1)
            outcomes.append(outcome)
            if _has_twin(row, rows, backend):
                continue
            block = raw["scenarios"]["agentic-coding"][row.block]
            row_spec = dict(spec)
            planned = _plan_twin(key, raw, block, {**row.data, KV_OFFLOADING: "dram",
                                                   KV_OFFLOAD_BACKEND: row_spec}, runners)
            cap = practice.max_size_gb_per_rank
            if (cap is not None and size_gb_per_rank is None
                    and any(h > cap for h in planned.hicache_size_gb)):
                # the seed's cap: the twin asks for it, and the planner still checks it
                row_spec["size-gb-per-rank"] = int(cap) if cap == int(cap) else cap
                planned = _plan_twin(key, raw, block, {**row.data, KV_OFFLOADING: "dram",
                                                       KV_OFFLOAD_BACKEND: row_spec}, runners)
            outcome.exp_names, outcome.host_gb_per_rank = planned.names, planned.sizes
            outcome.reasons = planned.refusals
            outcome.settings = list(planned.settings)
            if "size-gb-per-rank" in row_spec and size_gb_per_rank is None:
                outcome.settings.append(f"size-gb-per-rank {row_spec['size-gb-per-rank']:g} "
                                        f"({practice.max_size_source})")
            outcome.status = "refused" if outcome.reasons else "added"
            if outcome.status == "added":
                added = True
                inserts.append((row.stop, offload_twin(row, lines, row_spec)))
        if added and practice.patches:
            have = raw.get("patches")
            ids = {p.get("id") for p in have or []}
            needed = [p for p in practice.patches if p["id"] not in ids]
            if needed and have is None:
                at, indent = _key_end(doc, key, lines)
                body = [f"{indent}patches:"]
                for patch in needed:
                    body += patch_lines(patch, indent + "  ")
                    patched.append((key, patch["id"]))
                inserts.append((at, body))
            for patch in needed if have is not None else []:
                warnings.append(
                    f"{key}: its {backend} twins need engine patch {patch['id']} "
                    f"({patch['source']}), which its own patches: list lacks; add it "
                    f"(docs/authoring.md, 'Engine-image patches')")
    # bottom up; at one position the later insert first, so the earlier lands above it
    # (a key's last twin, then its patches: block)
    for _, at, new in sorted(((n, at, new) for n, (at, new) in enumerate(inserts)),
                             key=lambda i: (i[1], i[0]), reverse=True):
        lines[at:at] = new
    return MirrorResult("\n".join(lines), outcomes, patched, warnings)
