"""Acceptance: `kvbench launch --dry-run --format json` over the real InferenceX configs runs
the server the seed launchers run, for every single-node agentic row.

The expected flags are a checked-in table read by hand from the launchers at InferenceX
843c6254f (data/seed_launchers.yaml); a difference is allowed only where the table lists it
under `deliberate` with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS

from kvbench.matrix import Selection, select_jobs

TABLE = yaml.safe_load((Path(__file__).parent / "data" / "seed_launchers.yaml").read_text())
SRC = Path(__file__).resolve().parents[2] / "src"
ENGINE_OF = {"sglang": "sglang", "vllm": "vllm", "trt": "trtllm"}


@pytest.fixture(scope="module")
def launched() -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--port", str(TABLE["port"]), "--scenario-type", "agentic-coding",
           "--runner-config", str(RUNNERS), "--config-files", *map(str, CONFIGS)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], dict[str, Any]]:
    jobs = select_jobs(Selection(config_files=CONFIGS, runner_config=RUNNERS,
                                 single_node=True))
    # exp-names do not say DP attention (dsv4_tp8_conc32 is a TP and a DP row): key on it too
    return {(j.config_key, j.exp_name, bool(j.row.get("dp-attn"))): j.row for j in jobs}


def _dp_attention(argv: list[str]) -> bool:
    flags = argv_flags(argv)
    return "--enable-dp-attention" in flags or int(flags.get("--data-parallel-size", 1)) > 1


def _entries(flags: list[Any]):
    for entry in flags:
        if isinstance(entry, list):
            yield from _entries(entry)
        else:
            yield entry


def _holds(when: dict[str, Any], row: dict[str, Any]) -> bool:
    offload = (row.get("kv-offload-backend") or {}).get("name") or "none"
    facts = {"offload": offload, "dp-attn": bool(row.get("dp-attn")), "tp": row["tp"]}
    for key, want in when.items():
        if key == "conc-min":
            if row["conc"] < want:
                return False
        elif facts[key] not in (want if isinstance(want, list) else [want]):
            return False
    return True


def _expand(value: Any, row: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.count("${"):
        head, rest = value.split("${", 1)
        expr, tail = rest.split("}", 1)
        names = {"tp": row["tp"], "port": TABLE["port"]}
        return head + str(eval(expr, {"__builtins__": {}}, names)) + tail  # table is ours
    return value


def expected_flags(key: str, row: dict[str, Any]) -> dict[str, Any]:
    want: dict[str, Any] = {}
    for entry in _entries(TABLE["configs"][key].get("flags", [])):
        if _holds(entry.get("when", {}), row):
            want.update({k: _expand(v, row) for k, v in entry.get("args", {}).items()})
    return want


def argv_flags(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = True
        i += 1
    return out


def same(want: Any, got: Any) -> bool:
    if want == "*":
        return got is not None
    if want is None or got is None:
        return want is None and got is None
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got or str(want).lower() == str(got).lower()
    try:
        return float(want) == float(got)
    except (TypeError, ValueError):
        pass
    if str(want).startswith("{"):
        return json.loads(str(want)) == json.loads(str(got))
    return str(want) == str(got)


def _deliberate(key: str, flag: str) -> bool:
    for d in TABLE["deliberate"]:
        if flag in d["flags"] and (d["configs"] == "*" or key in d["configs"]):
            return True
    return False


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def differences(spec: dict[str, Any], row: dict[str, Any]) -> list[str]:
    key = spec["config-key"]
    engine = spec["engine"]
    defaults = TABLE["engine-defaults"].get(engine, {})
    got = argv_flags(spec["argv"])
    out = []
    for flag, want in expected_flags(key, row).items():
        value = got.get(flag)
        if want is None and value is not None and same(defaults.get(flag), value):
            continue  # passing the engine's default is passing nothing
        if not same(want, value):
            out.append(f"{flag}: launcher {want!r}, kvbench {value!r}")
    if "config" in TABLE["configs"][key]:
        config = yaml.safe_load(next(iter(spec["files"].values())))
        for dotted, want in TABLE["configs"][key]["config"].items():
            value = _config_value(config, dotted)
            if not same(want, value):
                out.append(f"{dotted}: launcher {want!r}, kvbench {value!r}")
    return [d for d in out if not _deliberate(key, d.split(":", 1)[0])]


def test_every_single_node_agentic_row_is_in_the_table(launched):
    keys = {spec["config-key"] for spec in launched}
    assert keys, "the dry run launched nothing"
    assert keys <= set(TABLE["configs"]), sorted(keys - set(TABLE["configs"]))


def test_dry_run_matches_the_seed_launchers(launched, rows):
    checked, report = 0, []
    for spec in launched:
        key = spec["config-key"]
        if TABLE["configs"][key]["launcher"] is None:
            continue
        row = rows[(key, spec["exp-name"], _dp_attention(spec["argv"]))]
        assert ENGINE_OF[row["framework"]] == spec["engine"]
        checked += 1
        report += [f"{key} {spec['exp-name']}: {d}" for d in differences(spec, row)]
    # 464 single-node agentic rows have an adapter; the 15 qwen3.5-fp8-h100-sglang-agentic
    # rows (no speculative decoding) have no launcher at 843c6254f
    assert checked == 449
    assert not report, "\n".join(report[:60]) + f"\n({len(report)} differences)"


def test_comparison_catches_a_wrong_flag(rows):
    """The comparison itself: a changed memory fraction and a missing HiCache policy fail."""
    key = "qwen3.5-fp8-b300-sglang-agentic-mtp"
    row = next(r for (k, _, _), r in rows.items()
               if k == key and (r.get("kv-offload-backend") or {}).get("name") == "hicache")
    spec = {"config-key": key, "engine": "sglang", "files": {},
            "argv": ["python3", "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.82",
                     "--enable-hierarchical-cache", "--hicache-size", "100"]}
    found = differences(spec, row)
    assert "--mem-fraction-static: launcher 0.8, kvbench '0.82'" in found
    assert "--hicache-write-policy: launcher 'write_through_selective', kvbench None" in found
    assert not any(d.startswith("--hicache-size") for d in found)
