"""Acceptance: for every single-node agentic row whose launcher exists at the pinned InferenceX
commit, `kvbench launch --dry-run --format json` starts what the launcher starts, or the
difference is on the allow-list with its proof (data/launcher_oracle_allow.yaml).

The launcher side is recorded, not written by hand: benchmarks/launcher_oracle/record.py ran
the launchers unmodified with every server program replaced by a recorder (see its docstring
and data/launcher_oracle/README.md). Both sides' command lines are read by the engines' own
parsers (tests/engines/oracle_parse.py: sglang's ServerArgs, `vllm serve`, the routers'
parse_router_args), so aliases and spellings meet in one name; TRT-LLM, Mooncake and LMCache
options by spelling. The comparison runs both ways: a flag, variable or file key only one side
has is a difference too.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.launcher_oracle import (
    ALLOW_FILE,
    ENGINE_OF_FRAMEWORK,
    Difference,
    Side,
    compare,
    kvbench_side,
    launcher_side,
    load_recordings,
    manifest,
    row_id,
    simple_options,
    take_files,
)

SRC = Path(__file__).resolve().parents[2] / "src"
PARSE = Path(__file__).with_name("oracle_parse.py")
PARSED_BY_ENGINE = {"sglang": "sglang", "vllm": "vllm"}
PARSED_ROUTERS = ("sglang-router", "vllm-router")
ALLOW = yaml.safe_load(ALLOW_FILE.read_text())


# ---- the two sides -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def recordings() -> list[dict[str, Any]]:
    return load_recordings()


@pytest.fixture(scope="module")
def launched() -> dict[tuple, dict[str, Any]]:
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--port", str(manifest()["port"]), "--host", "0.0.0.0",
           "--model-path", "{model_path}", "--scenario-type", "agentic-coding",
           "--runner-config", str(RUNNERS), "--config-files", *map(str, CONFIGS)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    # multi-node rows (a `workers` list) have their own oracle: test_launcher_oracle_disagg.py
    return {(s["config-key"], s["exp-name"], row_id(s["row"])): s for s in json.loads(out.stdout)
            if "workers" not in s}


def compared(recordings):
    return [r for r in recordings if r["launcher"] and r["row"]["framework"] in ENGINE_OF_FRAMEWORK]


def _pairs(recordings, launched) -> list[tuple[dict, dict]]:
    return [(r, launched[(r["config-key"], r["row"]["exp-name"], row_id(r["row"]))])
            for r in compared(recordings)]


# ---- canonical option sets by the engines' parsers ---------------------------------------

class Parsed:
    """Every command line to canonicalise, parsed in one subprocess (the engine imports are
    the slow part: sglang, vllm and both routers are imported once)."""

    def __init__(self) -> None:
        self.request: dict[str, list[list[str]]] = {k: [] for k in (*PARSED_BY_ENGINE,
                                                                   *PARSED_ROUTERS)}
        self.result: dict[str, list[dict[str, Any]]] = {}

    def add(self, kind: str, args: list[str]) -> None:
        if kind in self.request and args not in self.request[kind]:
            self.request[kind].append(args)

    def run(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC), "VLLM_TARGET_DEVICE": "cpu",
               "VLLM_LOGGING_LEVEL": "ERROR", "SGLANG_LOGGING_LEVEL": "ERROR"}
        out = subprocess.run([sys.executable, str(PARSE)], input=json.dumps(self.request),
                             capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        self.result = json.loads(out.stdout)

    def options(self, kind: str, args: list[str]) -> dict[str, Any]:
        if kind not in self.request:
            return simple_options(args)
        return dict(self.result[kind][self.request[kind].index(args)])


def _queue(parsed: Parsed, side: Side) -> None:
    parsed.add(side.engine, side.engine_args)
    if side.router:
        parsed.add(*side.router)


@pytest.fixture(scope="module")
def parsed(recordings, launched) -> Parsed:
    p = Parsed()
    for rec, spec in _pairs(recordings, launched):
        _queue(p, launcher_side(rec))
        _queue(p, kvbench_side(spec))
    for side in _perturbed_sides(recordings):
        _queue(p, side)
    p.run()
    return p


# ---- differences -------------------------------------------------------------------------

def differences(rec: dict[str, Any], ours: Side, theirs: Side, parsed: Parsed
                ) -> list[Difference]:
    row = rec["row"]
    out: list[Difference] = []

    def add(part: str, items) -> None:
        out.extend(Difference(rec["config-key"], row["exp-name"], row_id(row), part, n, a, b)
                   for n, a, b in items)

    if theirs.engine != ours.engine:
        add("program", [("engine", theirs.engine, ours.engine)])
        return out
    a = parsed.options(theirs.engine, theirs.engine_args)
    b = parsed.options(ours.engine, ours.engine_args)
    a_files, b_files = take_files(a, theirs.files), take_files(b, ours.files)
    add("engine", compare(a, b))
    a_env, b_env = dict(theirs.env), dict(ours.env)
    a_files.update(take_files(a_env, theirs.files))
    b_files.update(take_files(b_env, ours.files))
    add("env", compare(a_env, b_env))
    for role in sorted(set(a_files) | set(b_files)):
        add(f"file {role}", compare(a_files.get(role) or {}, b_files.get(role) or {}))
    add("program", [("launcher-wrapper", theirs.launcher_wrapper, ours.launcher_wrapper)]
        if theirs.launcher_wrapper != ours.launcher_wrapper else [])
    if theirs.router or ours.router:
        a_prog = theirs.router[0] if theirs.router else None
        b_prog = ours.router[0] if ours.router else None
        if a_prog != b_prog:
            add("program", [("router", a_prog, b_prog)])
        else:
            add("router", compare(parsed.options(*theirs.router), parsed.options(*ours.router)))
    add("image", compare(theirs.image or {}, ours.image or {}))
    for prog in sorted(set(theirs.services) | set(ours.services)):
        a_list, b_list = theirs.services.get(prog, []), ours.services.get(prog, [])
        if len(a_list) != len(b_list):
            add("program", [(f"{prog} count", len(a_list), len(b_list))])
        if a_list and b_list:
            add(f"service {prog}", compare(simple_options(a_list[0]), simple_options(b_list[0])))
    return out


def _matches(entry: dict[str, Any], d: Difference, row: dict[str, Any]) -> bool:
    if not fnmatch.fnmatchcase(d.part, entry["part"]):
        return False
    if not any(fnmatch.fnmatchcase(d.name, n) for n in entry["names"]):
        return False
    configs = entry.get("configs", "*")
    if configs != "*" and not any(fnmatch.fnmatchcase(d.config_key, c) for c in configs):
        return False
    offload = (row.get("kv-offload-backend") or {}).get("name") or "none"
    facts = {"offload": offload, "dp-attn": bool(row["dp-attn"]), "tp": row["tp"],
             "ep": row["ep"], "conc": row["conc"]}
    for key, want in (entry.get("when") or {}).items():
        if facts[key] not in (want if isinstance(want, list) else [want]):
            return False
    for side in ("launcher", "kvbench"):
        if side in entry and entry[side] != "*" and getattr(d, side) != entry[side]:
            return False
    return True


def classify(diffs: list[tuple[Difference, dict]]) -> tuple[list[Difference], Counter]:
    unexplained, used = [], Counter()
    for d, row in diffs:
        entry = next((e for e in ALLOW if _matches(e, d, row)), None)
        if entry is None:
            unexplained.append(d)
        else:
            used[entry["id"]] += 1
    return unexplained, used


@pytest.fixture(scope="module")
def all_differences(recordings, launched, parsed) -> list[tuple[Difference, dict]]:
    out = []
    for rec, spec in _pairs(recordings, launched):
        out += [(d, rec["row"]) for d in differences(rec, kvbench_side(spec),
                                                       launcher_side(rec), parsed)]
    return out


# ---- the tests ---------------------------------------------------------------------------

def test_the_recordings_cover_every_single_node_agentic_row(recordings, launched):
    """Every row the generator emits is recorded; every row with a launcher reached its
    replay (so every server it starts was recorded); kvbench launches each compared row."""
    m = manifest()
    assert m["inferencex-commit"].startswith("843c6254f")
    assert len(recordings) == m["rows"] == 482
    with_launcher = [r for r in recordings if r["launcher"]]
    assert not [r["row"]["exp-name"] for r in with_launcher if not r["reached-replay"]]
    rows = compared(recordings)
    assert len(rows) >= 467, len(rows)
    missing = [(r["config-key"], r["row"]["exp-name"]) for r in rows
               if (r["config-key"], r["row"]["exp-name"], row_id(r["row"])) not in launched]
    assert not missing, missing[:10]
    # the rest: the 15 qwen3.5 H100 rows without MTP, for which
    # runners/launch_h100-dgxc-slurm.sh finds no launcher at this commit
    others = Counter((r["row"]["framework"], bool(r["launcher"])) for r in recordings
                     if r not in rows)
    assert set(others) <= {("sglang", False)}, others
    assert sum(r["row"]["framework"] == "atom" for r in rows) == 18


def test_kvbench_launches_no_row_the_launchers_do_not(recordings, launched):
    recorded = {(r["config-key"], r["row"]["exp-name"], row_id(r["row"])) for r in recordings}
    assert not [k for k in launched if k not in recorded]


def test_every_difference_is_fixed_or_allowed_with_proof(all_differences):
    unexplained, used = classify(all_differences)
    report = [str(d) for d in unexplained]
    assert not report, "\n".join(report[:80]) + f"\n({len(report)} unexplained differences)"
    stale = [e["id"] for e in ALLOW if not used[e["id"]]]
    assert not stale, f"allow-list entries that match nothing: {stale}"
    for entry in ALLOW:
        assert entry.get("proof") and entry.get("line"), entry["id"]
        if entry["status"] == "unexplained, open":
            assert used[entry["id"]] == entry["count"], (entry["id"], used[entry["id"]])
        else:
            assert entry["status"] == "deliberate", entry["id"]


# ---- control: the comparison sees a changed flag, variable and config-file field ---------

QWEN = ("qwen3.5-fp8-b300-sglang-agentic-mtp", "qwen3.5_tp2_conc56_kvdram-hicache_spec-mtp")
CONTROL = {
    "flag": QWEN,
    "env": QWEN,
    "file": ("minimaxm3-fp4-b300-trtllm-agentic-mtp",
             "minimaxm3_tp2_conc20_kvdram-native_spec-mtp"),
    # the preamble: the launcher's sed -i on the image (qwen3.5_fp8_h100_mtp.sh:127-135) and
    # its pinned pip install (minimaxm3_fp8_h200_mtp.sh:121-123), each dropped in turn
    "sed": ("qwen3.5-fp8-h100-sglang-agentic-mtp", "qwen3.5_tp8_conc1_kvnone_spec-mtp"),
    "pip": ("minimaxm3-fp8-h200-vllm-agentic-mtp", "minimaxm3_tp8_conc12_kvdram-mooncake_spec-mtp"),
}


def _control_record(recordings, what: str) -> dict[str, Any]:
    key, exp = CONTROL[what]
    return next(r for r in recordings if r["config-key"] == key and r["row"]["exp-name"] == exp)


def _perturb(rec: dict[str, Any], what: str) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    engine = next(c for c in rec["calls"] if c["kind"] == "server")
    if what in ("sed", "pip"):
        kind, word = ("container-patch", "-i") if what == "sed" else ("install", "install")
        drop = next(c for c in rec["calls"] if c["kind"] == kind and word in c["argv"]
                    and "--help" not in c["argv"])
        rec["calls"].remove(drop)
    elif what == "flag":
        argv = engine["argv"]
        argv[argv.index("--mem-fraction-static") + 1] = "0.81"
    elif what == "env":
        engine["env-set"]["SGLANG_TIMEOUT_KEEP_ALIVE"] = "17"
    else:
        (path, text), = ((k, v) for k, v in engine["files"].items() if k.endswith(".yaml"))
        config = yaml.safe_load(text)
        config["kv_cache_config"]["tokens_per_block"] = 64
        engine["files"][path] = yaml.safe_dump(config)
    return rec


def _perturbed_sides(recordings) -> list[Side]:
    return [launcher_side(_perturb(_control_record(recordings, w), w)) for w in CONTROL]


@pytest.mark.parametrize(("what", "part", "name"), [
    ("flag", "engine", "mem_fraction_static"),
    ("env", "env", "SGLANG_TIMEOUT_KEEP_ALIVE"),
    ("file", "file config", "kv_cache_config.tokens_per_block"),
    ("sed", "image", "edit sglang/srt/managers/multi_tokenizer_mixin.py"),
    ("pip", "image", "pip mooncake-transfer-engine-cuda13==0.3.11.post1.args"),
    ("pip", "image", "pip mooncake-transfer-engine-cuda13==0.3.11.post1.packages"),
])
def test_the_comparison_catches_a_perturbed_launcher(recordings, launched, parsed, what, part,
                                                     name):
    rec = _control_record(recordings, what)
    spec = launched[(rec["config-key"], rec["row"]["exp-name"], row_id(rec["row"]))]
    before = differences(rec, kvbench_side(spec), launcher_side(rec), parsed)
    after = differences(_perturb(rec, what), kvbench_side(spec),
                        launcher_side(_perturb(rec, what)), parsed)
    new = [d for d in after if d not in before]
    assert (part, name) in [(d.part, d.name) for d in new], new
    assert {d.part for d in new} == {part}, new
    unexplained, _ = classify([(d, rec["row"]) for d in new])
    assert unexplained == new  # no allow-list entry swallows it
