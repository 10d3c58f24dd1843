"""The recipe format's rules beyond each field's own type and bounds, as plain functions.

Each takes a validated value (a field's value, or an object with the model's fields as
attributes) and returns it, or raises ValueError (RuleError to point below the model). The
pydantic models attach them as their validators (`field_validator(...)(rule)`,
`model_validator(mode="after")(rule)`), and the plain schema (recipe/plain.py) runs the same
functions, so a rule and its message are stated once. No pydantic here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from kvbench import bounds
from kvbench.errors import shown
from kvbench.recipe.arms import PATCH_ARMS
from kvbench.recipe.fields import CLUSTER_LABEL_PREFIX
from kvbench.units import MAX_SESSION_LANES

PARTITION_LABEL_PREFIX = "partition:"
# The power-measurement rollout covers one shape only (InferenceX inferencex-e2e/infx/matrix/
# generate.py, _fixed_sequence_entries).
POWER_SEQ_LEN = (8192, 1024)


class RuleError(ValueError):
    """A cross-field rule broken below the model that checks it; `loc` is the path from that
    model to the offending place, so the message can point at the exact row."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc


# --- file rules --------------------------------------------------------------------------

def config_key_problem(key: Any, seen: Mapping[str, Any]) -> str | None:
    """What is wrong with a master config's top-level key (`seen`: key -> the file that
    defined it first), or None."""
    if not isinstance(key, str) or "*" in key or "?" in key:
        return (f"config key {shown(key)} must be a string without '*' or '?' (those are reserved "
                "for key globs)")
    if key in seen:
        return f"config key {shown(key)} is already defined in {seen[key]}"
    return None


def is_multinode_entry(value: Any) -> bool:
    """Whether a config key's mapping is validated as a multi-node entry: only with
    `multinode: true` exactly (anything else meets the single-node entry's own check)."""
    return isinstance(value, dict) and value.get("multinode", False) is True


# --- field rules -------------------------------------------------------------------------

def _within(rng: bounds.Range) -> Any:
    """A field rule: the value (None passes), or ValueError naming `rng` and its reason."""
    def rule(value: Any) -> Any:
        if value is not None and (problem := rng.problem(value)) is not None:
            raise ValueError(f"{shown(value)}: {problem}")
        return value
    return rule


# the physical range of each numeric recipe field (kvbench/bounds.py says why)
parallelism = _within(bounds.PARALLELISM)  # tp, pp, dcp-size, pcp-size, ep
worker_count = _within(bounds.WORKER_COUNT)
node_count = _within(bounds.NODES)
prompt_tokens = _within(bounds.CONTEXT_TOKENS)  # isl
output_tokens = _within(bounds.OUTPUT_TOKENS)  # osl
host_gb_per_rank = _within(bounds.HOST_GB_PER_RANK)
host_mib = _within(bounds.HOST_MIB)
gpus_per_node = _within(bounds.GPUS_PER_NODE)


def not_an_image(version: str | None) -> str | None:
    """A version must name the component's own release; image tags hide what actually ran."""
    if version is not None and version.startswith("image:"):
        raise ValueError(
            f"version {shown(version)} must be a release, package version or source commit, "
            "not an image reference"
        )
    return version


def key_value_settings(settings: list[str]) -> list[str]:
    bad = [s for s in settings if "=" not in s or s.startswith("=")]
    if bad:
        raise ValueError(f"additional-settings entries must look like KEY=VALUE (got {shown(bad)})")
    return settings


def patch_file(file: str) -> str:
    path = PurePosixPath(file)
    if path.is_absolute() or ".." in path.parts or len(path.parts) < 2:
        raise ValueError(f"file {shown(file)} must be a relative path inside the engine "
                         "package, starting with the package (e.g. "
                         "sglang/srt/configs/model_config.py)")
    if path.suffix != ".py":
        raise ValueError(f"file {shown(file)} must be a Python source file (.py): the patcher "
                         "marks what it applied with a '#' comment")
    return file


def patch_arms(arms: list[str]) -> list[str]:
    bad = [a for a in arms if a not in PATCH_ARMS]
    if bad:
        raise ValueError(f"arms {shown(bad)} are not arms (allowed: {', '.join(PATCH_ARMS)})")
    return arms


def runner_labels(labels: dict[str, list[str]]) -> dict[str, list[str]]:
    empty = [label for label, nodes in labels.items() if not nodes]
    if empty:
        raise ValueError(f"runner labels need at least one runner name (empty: {shown(empty)})")
    return labels


# --- model rules -------------------------------------------------------------------------

def check_concurrency(row: Any) -> None:
    """A row gives `conc-list` or both `conc-start` and `conc-end`, all positive."""
    start, end, values = row.conc_start, row.conc_end, row.conc_list
    has_range = start is not None or end is not None
    has_list = bool(values)
    if has_range and has_list:
        raise ValueError(
            "give either 'conc-list' or 'conc-start'/'conc-end', not both "
            f"(got conc-list={shown(values)}, conc-start={start}, conc-end={end})"
        )
    if not has_range and not has_list:
        raise ValueError("a row needs 'conc-list' or both 'conc-start' and 'conc-end'")
    if has_range:
        if start is None or end is None:
            missing = "conc-end" if end is None else "conc-start"
            raise ValueError(f"'conc-start' and 'conc-end' go together: '{missing}' is missing")
        if start <= 0 or end <= 0:
            raise ValueError(
                f"'conc-start' and 'conc-end' must be > 0 (got {start} and {end})"
            )
        if start > end:
            raise ValueError(f"'conc-start' ({start}) must be <= 'conc-end' ({end})")
        if end > MAX_SESSION_LANES:
            raise ValueError(f"'conc-end' {end} is above the most session lanes kvbench runs "
                             f"({MAX_SESSION_LANES:,})")
    if has_list:
        bad = [c for c in values if c <= 0]
        if bad:
            raise ValueError(f"'conc-list' entries must be > 0 (got {shown(bad)})")
        big = [c for c in values if c > MAX_SESSION_LANES]
        if big:
            raise ValueError(f"'conc-list' entries must be at most {MAX_SESSION_LANES:,}, the "
                             f"most session lanes kvbench runs (got {shown(big)})")


def check_dcp_divides_tp(row: Any) -> Any:
    """Decode context parallelism splits the TP group, so it must divide it."""
    tp, dcp = row.tp, row.dcp_size
    if tp is not None and tp % dcp != 0:
        raise ValueError(f"'tp' ({tp}) must be divisible by 'dcp-size' ({dcp})")
    return row


def check_kv_offload(row: Any) -> None:
    """`kv-offload-backend` is required with `dram`, forbidden with `none` or unset."""
    mode, backend = row.kv_offloading, row.kv_offload_backend
    if mode is None:
        if backend is not None:
            raise ValueError("'kv-offload-backend' requires 'kv-offloading: dram'")
        return
    if mode == "none" and backend is not None:
        raise ValueError(
            f"'kv-offload-backend' ({backend.name}) is only allowed with "
            "'kv-offloading: dram', not 'none'"
        )
    if mode != "none" and backend is None:
        raise ValueError(f"'kv-offloading: {mode}' requires 'kv-offload-backend' (name, version?)")


def check_worker_hardware_pair(row: Any) -> None:
    """Prefill and decode name their hardware together or not at all."""
    prefill, decode = row.prefill, row.decode
    if prefill is None or decode is None:
        return
    if bool(prefill.hardware) != bool(decode.hardware):
        raise ValueError(
            "'hardware' must be given for both 'prefill' and 'decode', or neither "
            f"(got prefill={shown(prefill.hardware)}, decode={shown(decode.hardware)})"
        )


def check_multinode_topology(row: Any) -> None:
    """`worker` (aggregated) or both `prefill` and `decode`; `num-nodes` goes with `worker`."""
    worker, prefill, decode = row.worker, row.prefill, row.decode
    has_pair = prefill is not None and decode is not None
    if (worker is not None) == (prefill is not None or decode is not None) or (
            worker is None and not has_pair):
        raise ValueError("a multi-node row gives either 'worker' (aggregated) or both "
                         "'prefill' and 'decode'")
    if worker is not None and row.num_nodes is None:
        raise ValueError("an aggregated 'worker' row needs 'num-nodes' (the nodes its "
                         "allocation takes)")
    if worker is None and row.num_nodes is not None:
        raise ValueError("'num-nodes' is only valid with an aggregated 'worker' (a prefill/"
                         "decode row's node count follows from its workers)")
    if has_pair:
        check_worker_hardware_pair(row)


def backend_write_policy(backend: Any) -> Any:
    if backend.write_policy is not None and backend.name != "hicache":
        raise ValueError(f"write-policy is a HiCache setting; backend {shown(backend.name)} "
                         "has none")
    return backend


def patch_changes_something(patch: Any) -> Any:
    if patch.anchor.strip() == patch.replacement.strip():
        raise ValueError("replacement equals anchor: the patch would change nothing")
    return patch


def fixed_single_node_row(row: Any) -> Any:
    check_concurrency(row)
    check_dcp_divides_tp(row)
    return row


def fixed_multi_node_row(row: Any) -> Any:
    check_concurrency(row)
    check_multinode_topology(row)
    return row


def agentic_row(row: Any) -> Any:
    check_concurrency(row)
    check_kv_offload(row)
    has_workers = row.prefill is not None and row.decode is not None
    topologies = (row.tp is not None) + has_workers + (row.worker is not None)
    if topologies != 1 or (
        not has_workers and (row.prefill is not None or row.decode is not None)
    ):
        raise ValueError(
            "an agentic row gives exactly one topology: 'tp' (single node), both "
            "'prefill' and 'decode', or 'worker' (multi-node)"
        )
    if row.tp is not None:
        if row.num_nodes is not None:
            raise ValueError("'num-nodes' is only valid with an aggregated 'worker'")
        if row.kv_offloading is None:
            raise ValueError(
                "single-node agentic rows must set 'kv-offloading' (allowed: none, dram)"
            )
        check_dcp_divides_tp(row)
        return row
    explicit = [
        alias
        for name, alias in (("pp", "pp"), ("dcp_size", "dcp-size"), ("pcp_size", "pcp-size"))
        if name in row.model_fields_set
    ]
    if explicit:
        raise ValueError(
            f"multi-node agentic rows cannot set {', '.join(explicit)} at row level; "
            "set them inside 'prefill'/'decode'"
        )
    check_multinode_topology(row)
    return row


def power_shape(block: Any) -> Any:
    if block.require_power and (block.isl, block.osl) != POWER_SEQ_LEN:
        raise ValueError(f"'require-power' is supported only for isl {POWER_SEQ_LEN[0]} / osl "
                         f"{POWER_SEQ_LEN[1]} (got {block.isl}/{block.osl})")
    return block


def dram_needs_utilization(block: Any) -> Any:
    dram_rows = [i for i, row in enumerate(block.search_space) if row.kv_offloading == "dram"]
    if dram_rows and block.dram_utilization is None:
        raise ValueError(
            f"search-space rows {shown(dram_rows)} use 'kv-offloading: dram', so the block needs "
            "'dram-utilization' in (0, 1]"
        )
    return block


def some_scenario(scenarios: Any) -> Any:
    if not scenarios.fixed_seq_len and not scenarios.agentic_coding:
        raise ValueError("give at least one scenario: fixed-seq-len or agentic-coding")
    return scenarios


def entry_rows(entry: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every search-space row of an entry with its path below `scenarios`."""
    scenarios = entry.scenarios
    for name, blocks in (
        ("fixed-seq-len", scenarios.fixed_seq_len),
        ("agentic-coding", scenarios.agentic_coding),
    ):
        for b, block in enumerate(blocks or []):
            for r, row in enumerate(block.search_space):
                yield ("scenarios", name, b, "search-space", r), row


def master_entry(entry: Any) -> Any:
    """The rules across one config key's fields and rows."""
    multinode = entry.multinode
    if entry.scenarios.agentic_coding and not entry.runner.startswith(CLUSTER_LABEL_PREFIX):
        raise RuleError(
            f"agentic-coding entries must run on a '{CLUSTER_LABEL_PREFIX}<name>' runner so "
            f"every point runs on one known hardware fleet (got runner {shown(entry.runner)})",
            ("runner",),
        )
    if not multinode and entry.kv_p2p_transfer is not None:
        raise RuleError(
            "'kv-p2p-transfer' is only valid with 'multinode: true'", ("kv-p2p-transfer",)
        )
    ids = [p.id for p in entry.patches or []]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise RuleError(f"patch id {shown(dup)} is used twice; give each patch its own id",
                        ("patches", ids.index(dup), "id"))
    rows = list(entry_rows(entry))
    for field, attr in (("router", "router"), ("kv-p2p-transfer", "kv_p2p_transfer")):
        if getattr(entry, attr) is None:
            continue
        for loc, row in rows:
            if getattr(row, attr, None) is not None:
                raise RuleError(
                    f"'{field}' is declared at the top level and in this row; declare it "
                    "in one place only",
                    (*loc, field),
                )
    for loc, row in rows:
        if not multinode and getattr(row, "kv_p2p_transfer", None) is not None:
            raise RuleError(
                "'kv-p2p-transfer' is only valid with 'multinode: true'",
                (*loc, "kv-p2p-transfer"),
            )
        if entry.disagg and getattr(row, "worker", None) is not None:
            raise RuleError(
                "'disagg: true' rows give 'prefill' and 'decode'; an aggregated 'worker' "
                "(with 'num-nodes') needs 'disagg: false'", (*loc, "worker"))
        # an agentic row is multi-node when it has no `tp` (AgenticRow.is_multinode)
        if loc[1] == "agentic-coding" and (row.tp is None) != multinode:
            want = "'prefill' and 'decode'" if multinode else "'tp'"
            raise RuleError(
                f"rows of a 'multinode: {str(multinode).lower()}' entry use {want}", loc
            )
    if entry.disagg and entry.kv_p2p_transfer is None:
        missing = [loc for loc, row in rows if getattr(row, "kv_p2p_transfer", None) is None]
        if missing or not rows:
            raise RuleError(
                "'disagg: true' requires 'kv-p2p-transfer' at the top level or in every "
                "search-space row",
                missing[0] if missing else ("disagg",),
            )
    return entry


def cluster_partitions(cluster_id: str, cluster: Any) -> set[str]:
    """The Slurm partitions a `clusters:` record declares (`slurm.partition`, and the list
    `slurm.partitions`)."""
    slurm = cluster.slurm or {}
    listed = slurm.get("partitions") or []
    if not isinstance(listed, list) or any(isinstance(n, list | dict) for n in listed):
        raise RuleError(f"'partitions' is a list of Slurm partition names (got "
                        f"{shown(listed)})", ("clusters", cluster_id, "slurm", "partitions"))
    names = {str(n) for n in listed}
    if slurm.get("partition"):
        names.add(str(slurm["partition"]))
    return names


def runners_layout(runners: Any) -> Any:
    """One layout per file; in the newer one, every cluster has its label, every label its
    cluster, every runner one cluster, and a partition label names a declared partition."""
    if runners.hardware and runners.clusters:
        raise ValueError("give 'hardware' (classic layout) or 'clusters' (inferencex-e2e "
                         "layout), not both")
    if runners.clusters:
        _check_inventory(runners)
    return runners


def _check_inventory(runners: Any) -> None:
    labels, clusters = runners.labels, runners.clusters
    owned = {label.removeprefix(CLUSTER_LABEL_PREFIX): names
             for label, names in labels.items() if label.startswith(CLUSTER_LABEL_PREFIX)}
    if unlabeled := sorted(clusters.keys() - owned.keys()):
        raise ValueError(f"clusters without a '{CLUSTER_LABEL_PREFIX}<id>' label: "
                         f"{shown(unlabeled)}")
    if undefined := sorted(owned.keys() - clusters.keys()):
        raise ValueError(f"'{CLUSTER_LABEL_PREFIX}<id>' labels without a clusters entry: "
                         f"{shown(undefined)}")
    owner: dict[str, list[str]] = {}
    for cluster_id, names in owned.items():
        for runner in names:
            owner.setdefault(runner, []).append(cluster_id)
    if shared := {r: ids for r, ids in owner.items() if len(ids) > 1}:
        raise ValueError(f"runners listed under several clusters: {shown(shared)}")
    if orphans := sorted({r for rs in labels.values() for r in rs} - owner.keys()):
        raise ValueError(f"runners without a '{CLUSTER_LABEL_PREFIX}<id>' label: "
                         f"{shown(orphans)}")
    for label, names in labels.items():
        if not label.startswith(PARTITION_LABEL_PREFIX):
            continue
        name = label.removeprefix(PARTITION_LABEL_PREFIX)
        for cluster_id in sorted({owner[r][0] for r in names}):
            known = cluster_partitions(cluster_id, clusters[cluster_id])
            if name not in known:
                raise ValueError(
                    f"label {shown(label)} selects partition {shown(name)}, which cluster "
                    f"{shown(cluster_id)} does not declare (its slurm partitions: "
                    f"{', '.join(sorted(known)) or 'none'})")
