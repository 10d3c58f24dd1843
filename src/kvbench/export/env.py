"""The environment InferenceX's benchmark workflow gives its agentic aggregator for one point:
a matrix row's fields as the workflow passes them (InferenceX 843c6254f,
.github/workflows/benchmark-tmpl.yml:158-198 and :277-285 single-node,
benchmark-multinode-tmpl.yml:225-280 multi-node; the e2e dispatch hands `kv-offload-backend`
and `router` over as JSON, e2e-tests.yml:298, :416). A kvbench result carries its row, so the
export writes this environment beside the files (`inferencex_env.json`) and builds the
aggregate's header from it exactly as process_agentic_result.py does."""

from __future__ import annotations

import json
from typing import Any

from kvbench.matrix.fingerprint import recipe_fingerprint

# the fields of `kv-offload-backend` InferenceX's aggregator accepts
# (utils/agentic/aggregation/process_agentic_result.py:57-76); kvbench's own (size-gb-per-rank,
# write-policy) stay in kvbench's result
BACKEND_FIELDS = ("name", "version")


def _flag(value: Any) -> str:
    """A workflow input as GitHub renders it into the environment: booleans lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def backend_metadata(row: dict[str, Any]) -> tuple[dict[str, str] | None, list[str]]:
    """The row's offload backend as InferenceX records it, and the fields left out."""
    backend = row.get("kv-offload-backend")
    if not isinstance(backend, dict):
        return None, []
    kept = {k: str(backend[k]) for k in BACKEND_FIELDS if backend.get(k) not in (None, "")}
    return kept or None, sorted(k for k in backend if k not in BACKEND_FIELDS)


def _router(router: Any) -> str:
    """The router as the aggregator accepts it: exactly a name and a version
    (process_agentic_result.py:39-54); anything else is left out."""
    if not isinstance(router, dict) or not router.get("name") or not router.get("version"):
        return ""
    return json.dumps({"name": str(router["name"]), "version": str(router["version"])})


def workflow_env(row: dict[str, Any], runner: str) -> dict[str, str]:
    """The aggregator's environment for `row` run on `runner` (the row's runner label)."""
    backend, _ = backend_metadata(row)
    env = {
        "RUNNER_TYPE": runner, "CONC": _flag(row.get("conc")), "IMAGE": _flag(row.get("image")),
        "RECIPE_FINGERPRINT": recipe_fingerprint(row), "MODEL": _flag(row.get("model")),
        "MODEL_PREFIX": _flag(row.get("model-prefix")),
        "FRAMEWORK": _flag(row.get("framework")), "PRECISION": _flag(row.get("precision")),
        "SPEC_DECODING": _flag(row.get("spec-decoding", "none")),
        "DISAGG": _flag(bool(row.get("disagg", False))),
        "KV_OFFLOADING": _flag(row.get("kv-offloading", "none")),
        "KV_OFFLOAD_BACKEND": backend["name"] if backend else "",
        "KV_OFFLOAD_BACKEND_METADATA": json.dumps(backend) if backend else "",
        "ROUTER_METADATA": _router(row.get("router")),
        "TOTAL_CPU_DRAM_GB": _flag(row.get("total-cpu-dram-gb", 0)),
        "EXP_NAME": _flag(row.get("exp-name")),
    }
    prefill, decode = row.get("prefill"), row.get("decode")
    if isinstance(prefill, dict) and isinstance(decode, dict):
        env["IS_MULTINODE"] = "true"
        for side, block in (("PREFILL", prefill), ("DECODE", decode)):
            env.update({
                f"{side}_NUM_WORKERS": _flag(block.get("num-worker", 0)),
                f"{side}_TP": _flag(block.get("tp", 0)),
                f"{side}_PP_SIZE": _flag(block.get("pp", 1)),
                f"{side}_DCP_SIZE": _flag(block.get("dcp-size", 1)),
                f"{side}_PCP_SIZE": _flag(block.get("pcp-size", 1)),
                f"{side}_EP": _flag(block.get("ep", 1)),
                f"{side}_DP_ATTN": _flag(bool(block.get("dp-attn", False))),
            })
        if row.get("kv-p2p-transfer"):
            env["KV_P2P_TRANSFER"] = _flag(row["kv-p2p-transfer"])
    else:
        env.update({"IS_MULTINODE": "false", "TP": _flag(row.get("tp", 1)),
                    "EP_SIZE": _flag(row.get("ep", 1)),
                    "DP_ATTENTION": _flag(bool(row.get("dp-attn", False))),
                    "PP_SIZE": _flag(row.get("pp", 1)),
                    "DCP_SIZE": _flag(row.get("dcp-size", 1)),
                    "PCP_SIZE": _flag(row.get("pcp-size", 1))})
    return env


def result_filename(env: dict[str, str], repeat: int = 0) -> str:
    """RESULT_FILENAME as the single-node workflow composes it (benchmark-tmpl.yml:278-285).
    GitHub's runner.name reads `kvbench` (`kvbench-r<N>` for repeat N, so repeats of a point
    keep apart as two CI runs would); multi-node rows keep exp name, framework and conc."""
    runner_name = f"kvbench-r{repeat}" if repeat else "kvbench"
    if env.get("IS_MULTINODE") == "true":
        base = (f"{env['EXP_NAME']}_{env['PRECISION']}_{env['FRAMEWORK']}_conc{env['CONC']}"
                f"_{runner_name}")
    else:
        base = (f"{env['EXP_NAME']}_{env['PRECISION']}_{env['FRAMEWORK']}_tp{env['TP']}"
                f"-pp{env['PP_SIZE']}-dcp{env['DCP_SIZE']}-pcp{env['PCP_SIZE']}"
                f"-ep{env['EP_SIZE']}-dpa{env['DP_ATTENTION']}_disagg-{env['DISAGG']}"
                f"_spec-{env['SPEC_DECODING']}_conc{env['CONC']}_{runner_name}")
    return f"{base}_recipe-{env['RECIPE_FINGERPRINT'][:16]}"


def _int(env: dict[str, str], name: str, default: int = 0) -> int:
    value = env.get(name)
    return default if value in (None, "") else int(value)


def _on(env: dict[str, str], name: str) -> bool:
    return (env.get(name) or "").lower() in ("1", "true", "yes", "on")


def agg_header(env: dict[str, str]) -> tuple[dict[str, Any], int]:
    """The aggregate's identity and topology fields from the environment, and the GPU count
    per-GPU throughput divides by (process_agentic_result.py:98-191 `_gpu_shape`, :215-246)."""
    metadata = json.loads(env["KV_OFFLOAD_BACKEND_METADATA"]) \
        if env.get("KV_OFFLOAD_BACKEND_METADATA") else None
    out: dict[str, Any] = {
        "hw": env.get("RUNNER_TYPE", ""), "conc": _int(env, "CONC"),
        "image": env.get("IMAGE", ""), "recipe_fingerprint": env.get("RECIPE_FINGERPRINT", ""),
        "model": env.get("MODEL", ""), "infmax_model_prefix": env.get("MODEL_PREFIX", ""),
        "framework": env.get("FRAMEWORK", ""), "precision": env.get("PRECISION", ""),
        "spec_decoding": env.get("SPEC_DECODING", "none"), "disagg": _on(env, "DISAGG"),
        "scenario_type": "agentic-coding", "is_multinode": _on(env, "IS_MULTINODE"),
        "kv_offloading": env["KV_OFFLOADING"], "kv_offload_backend": metadata,
        "allocated_cpu_dram_gb": _int(env, "TOTAL_CPU_DRAM_GB"),
    }
    if not out["is_multinode"]:
        pp, pcp = _int(env, "PP_SIZE", 1), _int(env, "PCP_SIZE", 1)
        tp = _int(env, "TP", 1)
        out.update(tp=tp, ep=_int(env, "EP_SIZE", 1),
                   dp_attention=env.get("DP_ATTENTION", "false"), pp=pp,
                   dcp_size=_int(env, "DCP_SIZE", 1), pcp_size=pcp)
        gpus = tp * pp * pcp
    else:
        sides = {}
        for side in ("prefill", "decode"):
            up = side.upper()
            sides[side] = {
                "num_workers": _int(env, f"{up}_NUM_WORKERS"), "tp": _int(env, f"{up}_TP"),
                "pp": _int(env, f"{up}_PP_SIZE", 1), "dcp_size": _int(env, f"{up}_DCP_SIZE", 1),
                "pcp_size": _int(env, f"{up}_PCP_SIZE", 1), "ep": _int(env, f"{up}_EP", 1),
                "dp_attention": env.get(f"{up}_DP_ATTN", "false")}
        p, d = sides["prefill"], sides["decode"]
        p["gpu"] = p["num_workers"] * p["tp"] * p["pp"] * p["pcp_size"]
        d["gpu"] = d["num_workers"] * d["tp"] * d["pp"] * d["pcp_size"]
        gpus = p["gpu"] + d["gpu"]
        if d["gpu"] <= 0:  # aggregated worker rows: no separate decode GPUs
            d.update(tp=0, ep=0, pp=1, dcp_size=1, pcp_size=1)
        out.update(tp=p["tp"] + d["tp"], ep=max(p["ep"], d["ep"]),
                   dp_attention="true" if _on(env, "PREFILL_DP_ATTN")
                   or _on(env, "DECODE_DP_ATTN") else "false")
        for side, v in sides.items():
            out.update({f"{side}_{k}": v[k] for k in ("num_workers", "tp", "pp", "dcp_size",
                                                       "pcp_size", "ep", "dp_attention")})
            out[f"num_{side}_gpu"] = v["gpu"]
    if env.get("ROUTER_METADATA"):
        out["router"] = json.loads(env["ROUTER_METADATA"])
    if env.get("KV_P2P_TRANSFER"):
        out["kv_p2p_transfer"] = env["KV_P2P_TRANSFER"]
    return out, gpus
