"""Experiment names, exactly as the reference generator spells them."""

from __future__ import annotations

from typing import Any

SEQ_LEN_NAMES = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}
SEQ_LENS = {name: pair for pair, name in SEQ_LEN_NAMES.items()}


def seq_len_name(isl: int, osl: int) -> str:
    return SEQ_LEN_NAMES.get((isl, osl), f"{isl}_{osl}")


def fixed_exp_name(prefix: str, isl: int, osl: int) -> str:
    return f"{prefix}_{seq_len_name(isl, osl)}"


def offload_suffix(kv_offloading: str, backend: dict[str, Any] | None) -> str:
    if kv_offloading == "none":
        return "kvnone"
    return f"kv{kv_offloading}-{backend['name']}"  # type: ignore[index]


def agentic_exp_name(prefix: str, tp: int, conc: int, kv_offloading: str,
                     backend: dict[str, Any] | None, spec_decoding: str) -> str:
    """`{prefix}_tp{tp}_conc{conc}_{kvnone|kvdram-<backend>}[_spec-<sd>]` (no ep/dp-attn)."""
    spec = f"_spec-{spec_decoding}" if spec_decoding != "none" else ""
    return f"{prefix}_tp{tp}_conc{conc}_{offload_suffix(kv_offloading, backend)}{spec}"


def _worker_tag(worker: dict[str, Any], role: str) -> str:
    tag = f"{role}{worker['num-worker']}x{worker['tp']}"
    ep = worker.get("ep", 1)
    if ep != 1:
        tag += f"ep{ep}"
    if worker.get("dp-attn", False):
        tag += "dpa"
    return tag


def multinode_agentic_exp_name(prefix: str, prefill: dict[str, Any], decode: dict[str, Any],
                               concs: list[int], kv_offloading: str,
                               backend: dict[str, Any] | None) -> str:
    """`{prefix}_p{n}x{tp}[ep{ep}][dpa]_d{n}x{tp}[...]_conc{c}[_kvdram-<backend>]`; rows
    without offload keep the historical name (no suffix)."""
    suffix = "" if kv_offloading == "none" else "_" + offload_suffix(kv_offloading, backend)
    return (
        f"{prefix}_{_worker_tag(prefill, 'p')}_{_worker_tag(decode, 'd')}"
        f"_conc{'x'.join(str(c) for c in concs)}{suffix}"
    )


def only_exp_names(rows: list, names: tuple[str, ...]) -> list:
    """The (key, row) pairs whose exp-name is one of `names`; each name must match exactly
    one row (the newer generator's --exp-names, inferencex-e2e/infx/matrix/generate.py
    `filter_exp_names` @fabe70b7)."""
    from collections import Counter

    from kvbench.errors import MatrixError

    if len(set(names)) != len(names):
        raise MatrixError(f"--exp-names repeats a name: {sorted(names)}")
    wanted = set(names)
    counts = Counter(row.get("exp-name") for _, row in rows if row.get("exp-name") in wanted)
    if missing := sorted(n for n in names if not counts[n]):
        raise MatrixError(f"--exp-names: no row is named {', '.join(missing)}",
                          hint="`kvbench matrix --format json` lists the rows' exp-name")
    if ambiguous := sorted(n for n in names if counts[n] > 1):
        raise MatrixError(f"--exp-names: several rows are named {', '.join(ambiguous)} (an "
                          f"exp-name omits the runner, ep and dp-attn)",
                          hint="narrow with --config-keys or --runner-type")
    return [(key, row) for key, row in rows if row.get("exp-name") in wanted]
