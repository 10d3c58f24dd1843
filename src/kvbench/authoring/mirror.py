"""Mirror arms: for every GPU-resident agentic row of a config key, the offload row with the
same parallelism, speculative setting and concurrency list, planned before it is written, and
what the key's launcher needs to run it.

This is what an upstream offload-arm pull request contains (seed 000, InferenceX 42692ef77):
a `kv-offloading: dram` + `kv-offload-backend: { name: hicache }` twin right under each
resident row, with nothing InferenceX's validation refuses (no `size-gb-per-rank`, no
`patches:`: utils/matrix_logic/validation.py forbids extra fields); the pool's sizing, its cap
and the image fix go into the launcher's offload branch (authoring/launcher.py). Each twin is
expanded into its matrix jobs and planned at the size that branch will pass; a twin any of
whose concurrencies the planner refuses is reported with the planner's reason and not
written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbench.authoring.launcher import DATA as LAUNCHER_ARMS
from kvbench.authoring.launcher import Arm, ArmText, arm_for
from kvbench.authoring.practice import facts_of, twin_practice
from kvbench.authoring.rowtext import (
    KV_OFFLOAD_BACKEND,
    KV_OFFLOADING,
    RowText,
    agentic_rows,
    load_round_trip,
    offload_twin,
    plain,
    shared_text,
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
class KeyArm:
    """What the key's launcher runs for its new twins: the arms-file sizing and the text
    facts of the branch (page, flags, cap, image patch), or None for `arm` where no
    launcher branch data covers the key (then the launcher is left as it is)."""

    config_key: str
    entry: dict[str, Any]
    facts: dict[str, Any]
    arm: Arm | None
    text: ArmText


@dataclass(slots=True)
class MirrorResult:
    text: str
    outcomes: list[ArmOutcome]
    # per config key with twins added: the launcher branch they need
    arms: list[KeyArm] = field(default_factory=list)
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
    args: list[str] = field(default_factory=list)  # the first job's engine arguments
    page: int | None = None


def _plan_twin(key: str, raw: dict[str, Any], block: dict[str, Any], twin: dict[str, Any],
               runners: Runners, size_of: Any = None) -> _Planned:
    """Expand the twin into its matrix jobs and plan each: exp names, GB/rank, refusals,
    and the offload settings the planner gives them. `size_of(row)`: the host pool GB per
    rank the key's launcher will pass that job (the planner checks that size), or None."""
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
    out.args = []
    refusals: dict[str, list[str]] = {}
    for row in rows:
        size = size_of(row) if size_of else None
        if size is not None:  # planning only: the row written carries no size
            row = {**row, KV_OFFLOAD_BACKEND: {**row[KV_OFFLOAD_BACKEND],
                                               "size-gb-per-rank": size}}
        # a twin is a new arm no launcher sizes: the planner's budget sizing
        plan = plan_job(Job(key, row, "agentic-coding"), runners, sizing="budget")
        out.names.append(plan.exp_name)
        inside = sum(p.bytes_per_rank for p in plan.host_pools if p.inside_configured_size)
        out.sizes.append(round(inside / GB, 2))
        args = plan.engine_args
        if not out.args:
            out.args, out.page = list(args), plan.page_size_tokens
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


def _launcher_size(arm: Arm, cap: float | None):
    """size_of(row): the --hicache-size the branch computes for a job of the row."""
    from kvbench.expr import evaluate

    def size_of(row: dict[str, Any]) -> float | None:
        values = {"total_cpu_dram_gb": int(row.get("total-cpu-dram-gb") or 0),
                  "tp": int(row.get("tp") or 1)}
        values["reserve_gb"] = evaluate(arm.reserve_gb, values, str(LAUNCHER_ARMS))
        size = evaluate(arm.size_gb, values, str(LAUNCHER_ARMS))
        return min(size, cap) if cap is not None else size
    return size_of


def _branch_flags(args: list[str]) -> list[tuple[str, str | None]]:
    """The planned HiCache flags in seed 000's order, the size as the branch's variable."""
    out: list[tuple[str, str | None]] = [("--enable-hierarchical-cache", None),
                                         ("--hicache-size", '"$HICACHE_SIZE_GB"')]
    for flag in ("--hicache-io-backend", "--hicache-mem-layout", "--hicache-write-policy"):
        if flag in args:
            out.append((flag, args[args.index(flag) + 1]))
    return out


def mirror_text(text: str, where: str, keys: Sequence[str], backend: str,
                runners: Runners, size_gb_per_rank: float | None = None) -> MirrorResult:
    """The master file `text` with an offload twin under every resident agentic row of
    `keys`, and what happened to each resident row."""
    if backend not in KV_OFFLOAD_BACKENDS:
        raise RecipeError(f"--backend {backend!r} is not an offload backend (allowed: "
                          f"{', '.join(KV_OFFLOAD_BACKENDS)})")
    doc = load_round_trip(text, where)
    lines = text.split("\n")
    outcomes: list[ArmOutcome] = []
    inserts: list[tuple[int, list[str]]] = []
    arms: list[KeyArm] = []
    warnings: list[str] = []
    for key in keys:
        if key not in doc:
            import difflib

            close = difflib.get_close_matches(key, [str(k) for k in doc], n=3)
            raise RecipeError(f"{where}: config key {key!r} is not in the file",
                              hint=f"did you mean {', '.join(close)}?" if close else None)
        if (shared := shared_text(doc, key)) is not None:
            raise RecipeError(f"{where}: {shared}: an edit there changes every place that "
                              "shares it, so recipe mirror leaves the file as it is",
                              hint="spell the rows out (no anchors or merge keys) under the "
                              "key to mirror, then rerun")
        rows = agentic_rows(doc, key, lines)
        if not rows:
            raise RecipeError(f"{where}: {key} has no agentic-coding rows to mirror")
        raw = plain(doc[key])
        practice = twin_practice(raw, backend)
        facts = facts_of(raw)
        arm = arm_for(facts, backend)
        cap = size_gb_per_rank if size_gb_per_rank is not None else \
            practice.max_size_gb_per_rank
        size_of = _launcher_size(arm, cap) if arm is not None else (
            (lambda _row: size_gb_per_rank) if size_gb_per_rank is not None else None)
        if arm is not None and size_gb_per_rank is not None and \
                not float(size_gb_per_rank).is_integer():
            # the branch compares whole GB in bash (`[ A -gt B ]`): 40.5 there is an
            # "integer expression expected" error, the test false, and the cap never applied
            raise RecipeError(f"--size {size_gb_per_rank:g}: {key}'s launcher branch caps the "
                              f"pool in whole GB (bash integer arithmetic) (allowed: a whole "
                              f"number of GB per rank)")
        if arm is None and size_gb_per_rank is not None:
            warnings.append(f"{key}: --size {size_gb_per_rank:g} is planned but written "
                            f"nowhere: InferenceX's rows take no size and no launcher branch "
                            f"data covers the key")
        spec: dict[str, Any] = {"name": backend}
        planned_args: list[str] = []
        page: int | None = None
        for row in rows:
            if not _is_resident(row.data):
                continue
            outcome = ArmOutcome(key, row.block, row.index, "present", row.start + 1)
            outcomes.append(outcome)
            if _has_twin(row, rows, backend):
                continue
            block = raw["scenarios"]["agentic-coding"][row.block]
            planned = _plan_twin(key, raw, block, {**row.data, KV_OFFLOADING: "dram",
                                                   KV_OFFLOAD_BACKEND: dict(spec)},
                                 runners, size_of)
            outcome.exp_names, outcome.host_gb_per_rank = planned.names, planned.sizes
            outcome.reasons = planned.refusals
            outcome.settings = list(planned.settings)
            if cap is not None and arm is not None:
                why = "--size" if size_gb_per_rank is not None else practice.max_size_source
                outcome.settings.append(f"at most {cap:g} GB per rank in the launcher ({why})")
            outcome.status = "refused" if outcome.reasons else "added"
            if outcome.status == "added":
                planned_args, page = planned_args or planned.args, page or planned.page
                inserts.append((row.stop, offload_twin(row, lines, spec)))
        if not planned_args:
            continue
        patch = practice.patches[0] if practice.patches else None
        if len(practice.patches) > 1:
            warnings.append(f"{key}: only the first of its {backend} twins' image patches "
                            f"is written into the launcher")
        arms.append(KeyArm(key, raw, facts, arm, ArmText(
            backend=backend, page_size=page, flags=_branch_flags(planned_args),
            cap_gb_per_rank=cap if arm is not None else None,
            cap_source="--size" if size_gb_per_rank is not None else practice.max_size_source,
            patch=patch, settings_source="kvbench's planner settings for the arm "
                                         "(plan/data/settings.yaml)")))
        if arm is None:
            warnings.append(f"{key}: no launcher branch data for {backend} twins of "
                            f"{facts.get('framework')} {facts.get('model_prefix')} on "
                            f"{facts.get('hardware')} (authoring/data/launcher_arms.yaml): "
                            f"the rows are written, the launcher must run the arm itself")
    # bottom up; at one position the later insert first, so the earlier lands above it
    # (a key's last twin, then its patches: block)
    for _, at, new in sorted(((n, at, new) for n, (at, new) in enumerate(inserts)),
                             key=lambda i: (i[1], i[0]), reverse=True):
        lines[at:at] = new
    return MirrorResult("\n".join(lines), outcomes, arms, warnings)
