"""Acceptance for the multi-node SGLang PD-disaggregation rows: `kvbench launch --dry-run
--format json` starts, node by node, what InferenceX's AMD launch chain starts (recorded by
benchmarks/launcher_oracle/record_disagg.py into data/launcher_oracle_disagg/), or the
difference is on data/launcher_oracle_disagg_allow.yaml with its proof; every worker's command
line is accepted by SGLang's own parser (`prepare_server_args`); each worker has its own plan
and a row whose workers would oversubscribe a node is refused with the arithmetic.

Compared both ways, per row: which servers run on which node (prefill, decode, router),
each server's options by the engine's parser (sglang's ServerArgs, sglang-router's
parse_router_args, read leniently: names only), and each worker's environment (the command's
own `NAME=value` words and what the node's launcher shell exported)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.launcher_oracle import classify_rows, compare, program_of

SRC = Path(__file__).resolve().parents[2] / "src"
DATA = Path(__file__).with_name("data")
ORACLE = DATA / "launcher_oracle_disagg"
ALLOW = yaml.safe_load((DATA / "launcher_oracle_disagg_allow.yaml").read_text())
PARSE = Path(__file__).with_name("oracle_parse.py")
PORT = 8888


def _recordings() -> list[dict[str, Any]]:
    out = []
    for path in sorted(ORACLE.glob("*.json")):
        if path.name != "manifest.json":
            out.extend(json.loads(path.read_text()))
    return out


def _dry_run(*extra: str) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--port", str(PORT), "--host", "0.0.0.0", "--model-path", "{model_path}",
           "--scenario-type", "agentic-coding", "--runner-config", str(RUNNERS),
           "--config-files", *map(str, CONFIGS), "--framework", "sglang-disagg", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def recordings() -> list[dict[str, Any]]:
    return _recordings()


@pytest.fixture(scope="module")
def launched() -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["config-key"], s["exp-name"]): s for s in _dry_run()}


# ---- the two sides, as servers per node ------------------------------------------------

def _role(argv: list[str]) -> str:
    program, args = program_of(argv)
    if program == "sglang-router":
        return "router"
    return args[args.index("--disaggregation-mode") + 1]


def launcher_servers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """(role, node, program, options, env) of each server the launcher starts, in order."""
    out = []
    for call in rec["calls"]:
        program, args = program_of(call["argv"])
        out.append({"role": _role(call["argv"]), "node": call["node-rank"],
                    "program": program, "args": args,
                    "env": {} if program == "sglang-router" else
                    {**call["node-env"], **call["env-set"]}})
    return out


def kvbench_servers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for w in spec["workers"]:
        program, args = program_of(w["argv"])
        out.append({"role": w["role"], "node": w["nodes"][0], "program": program,
                    "args": args, "env": w["env"]})
        if w["role"] == "prefill" and w["index"] == 0:  # the router runs on node 0
            program, args = program_of(spec["argv"])
            out.append({"role": "router", "node": w["nodes"][0], "program": program,
                        "args": args, "env": {}})
    return out


class Parsed:
    """Every server's options by its own parser, in one subprocess (sglang is slow to import)."""

    def __init__(self, sides: list[list[dict[str, Any]]]) -> None:
        request: dict[str, list[list[str]]] = {"sglang": [], "sglang-router": []}
        for servers in sides:
            for s in servers:
                if s["args"] not in request[s["program"]]:
                    request[s["program"]].append(s["args"])
        env = {**os.environ, "PYTHONPATH": str(SRC), "SGLANG_LOGGING_LEVEL": "ERROR"}
        out = subprocess.run([sys.executable, str(PARSE)], input=json.dumps(request),
                             capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        self.request, self.result = request, json.loads(out.stdout)

    def options(self, server: dict[str, Any]) -> dict[str, Any]:
        kind = server["program"]
        return dict(self.result[kind][self.request[kind].index(server["args"])])


def differences(rec: dict[str, Any], theirs: list[dict[str, Any]],
                ours: list[dict[str, Any]], parsed: Parsed) -> list[tuple[str, str, Any, Any]]:
    """(part, name, launcher, kvbench) for every disagreement; parts `program`,
    `<role> <i> engine`, `<role> <i> env`, `router`."""
    out: list[tuple[str, str, Any, Any]] = []
    layout_a = [(s["role"], s["node"]) for s in theirs]
    layout_b = [(s["role"], s["node"]) for s in ours]
    if sorted(layout_a) != sorted(layout_b):
        return [("program", "servers per node", layout_a, layout_b)]
    seen: Counter = Counter()
    for a in theirs:
        b = next(s for s in ours if (s["role"], s["node"]) == (a["role"], a["node"]))
        part = "router" if a["role"] == "router" else f"{a['role']} {seen[a['role']]}"
        seen[a["role"]] += 1
        out += [(part if part == "router" else f"{part} engine", n, x, y)
                for n, x, y in compare(parsed.options(a), parsed.options(b))]
        out += [(f"{part} env", n, x, y) for n, x, y in compare(a["env"], b["env"])
                if part != "router"]
    return out


def classify(rows: list[tuple[dict[str, Any], list[tuple]]]) -> tuple[list[str], Counter]:
    return classify_rows(ALLOW, rows)


@pytest.fixture(scope="module")
def sides(recordings, launched):
    out = []
    for rec in recordings:
        spec = launched[(rec["config-key"], rec["row"]["exp-name"])]
        out.append((rec, launcher_servers(rec), kvbench_servers(spec)))
    return out


@pytest.fixture(scope="module")
def parsed(sides) -> Parsed:
    perturbed = launcher_servers(_perturbed(sides[0][0]))
    return Parsed([s for _, a, b in sides for s in (a, b)] + [perturbed])


# ---- the tests ---------------------------------------------------------------------------

def test_every_recorded_disagg_row_is_launched_and_no_other(recordings, launched):
    manifest = json.loads((ORACLE / "manifest.json").read_text())
    assert manifest["inferencex-commit"].startswith("843c6254f")
    assert len(recordings) == manifest["rows"] == 12
    recorded = {(r["config-key"], r["row"]["exp-name"]) for r in recordings}
    assert recorded == set(launched)
    for rec in recordings:  # the launcher reached every server: prefill, decode, router
        assert Counter(_role(c["argv"]) for c in rec["calls"]) == {
            "prefill": 1, "decode": 1, "router": 1}, rec["row"]["exp-name"]


def test_every_difference_is_fixed_or_allowed_with_proof(sides, parsed):
    rows = [(rec, differences(rec, a, b, parsed)) for rec, a, b in sides]
    unexplained, used = classify(rows)
    assert not unexplained, "\n".join(unexplained[:60]) + f"\n({len(unexplained)} unexplained)"
    assert not [e["id"] for e in ALLOW if not used[e["id"]]], "stale allow-list entries"
    for entry in ALLOW:
        assert entry["status"] == "deliberate" and entry.get("proof") and entry.get("line"), \
            entry["id"]


def _perturbed(rec: dict[str, Any]) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    call = next(c for c in rec["calls"] if "decode" in c["argv"])
    call["argv"][call["argv"].index("--mem-fraction-static") + 1] = "0.81"
    call["env-set"]["SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] = "64"
    return rec


def test_the_comparison_catches_a_perturbed_decode(sides, parsed):
    rec, theirs, ours = sides[0]
    before = differences(rec, theirs, ours, parsed)
    after = differences(rec, launcher_servers(_perturbed(rec)), ours, parsed)
    new = [d[:2] for d in after if d not in before]
    assert new == [("decode 0 engine", "mem_fraction_static"),
                   ("decode 0 env", "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK")], new
    unexplained, _ = classify([(rec, [d for d in after if d not in before])])
    assert len(unexplained) == 2  # no allow-list entry swallows them


CHECK = textwrap.dedent("""
    import contextlib, io, json, sys
    from sglang.srt.server_args import prepare_server_args
    specs = json.load(sys.stdin)
    # the v0.5.17 image's list spelling, split per phase by the installed 0.5.23
    # (tests/engines/oracle_parse.py OLDER_ALIASES)
    older = {"--cuda-graph-bs": "--cuda-graph-bs-decode"}
    # bare flags the image's SGLang parses and 0.5.23 no longer defines (no file of the
    # installed package names prefill_round_robin_balance); dropped here, reported back
    image_only = {"--prefill-round-robin-balance"}
    out = []
    for spec in specs:
        for w in spec["workers"]:
            err = io.StringIO()
            args = [older.get(x, x) for x in w["argv"][3:] if x not in image_only]
            try:
                with contextlib.redirect_stderr(err):
                    a = prepare_server_args(args)
            except SystemExit:
                out.append([spec["exp-name"], w["role"], "error",
                            err.getvalue().strip().splitlines()[-1:]])
                continue
            out.append([spec["exp-name"], w["role"], "ok", {
                k: getattr(a, k) for k in ("disaggregation_mode",
                "disaggregation_transfer_backend", "tp_size", "ep_size", "dp_size",
                "enable_dp_attention", "page_size", "mem_fraction_static", "kv_cache_dtype",
                "enable_hierarchical_cache", "speculative_num_steps", "max_running_requests",
                "disaggregation_ib_device")} | {"dropped": sorted(image_only & set(w["argv"]))}])
    print(json.dumps(out))
""")


def test_every_worker_command_line_parses_with_sglangs_own_parser(launched, tmp_path):
    specs = list(launched.values())
    env = {**os.environ, "PYTHONPATH": str(SRC), "SGLANG_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", CHECK], input=json.dumps(specs),
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 24
    assert not [r for r in results if r[2] != "ok"]
    by_spec = {s["exp-name"]: s for s in specs}
    for exp, role, _, args in results:
        spec = by_spec[exp]
        row = spec["row"]
        worker = next(w for w in spec["workers"] if w["role"] == role)
        plan = worker["plan"]
        dpa = "dpa" in exp
        assert args["disaggregation_mode"] == role
        assert args["dropped"] == (["--prefill-round-robin-balance"] if role == "decode" else [])
        assert args["disaggregation_transfer_backend"] == "mori"
        assert args["tp_size"] == 8 and args["enable_dp_attention"] == dpa
        assert args["dp_size"] == (8 if dpa else 1) and args["ep_size"] == (8 if dpa else 1)
        assert args["page_size"] == plan["page-size-tokens"] == 256
        assert args["mem_fraction_static"] == plan["mem-fraction-static"] == 0.85
        assert args["kv_cache_dtype"] == "fp8_e4m3"
        assert args["speculative_num_steps"] == 3
        # only the prefill offloads to host DRAM; its plan sized the pool, the decode's has none
        assert args["enable_hierarchical_cache"] == (role == "prefill")
        assert bool(plan["host-pools"]) == (role == "prefill") and plan["within-budget"]
        assert row["conc"] == spec["row"]["conc"]


def test_a_row_whose_prefill_node_cannot_hold_its_host_pool_is_refused():
    """The prefill's plan sizes HiCache from the row's per-node budget: a budget below the
    engine's headroom leaves no pool, and the row is refused with that worker named."""
    from kvbench.engines import get_adapter
    from kvbench.matrix import Selection, select_jobs

    job = next(j for j in select_jobs(Selection(
        config_files=CONFIGS, runner_config=RUNNERS, frameworks=("sglang-disagg",)))
        if j.exp_name == "dsv4_p1x8_d1x8_conc8_kvdram-hicache")
    from kvbench.matrix import Job

    small = Job(config_key=job.config_key, row={**job.row, "total-cpu-dram-gb": 4},
                scenario=job.scenario)
    spec = get_adapter("sglang-disagg").build(small, None, port=30000)
    refused = [w for w in spec.warnings if w.startswith("plan refused: ")]
    assert refused and refused[0].startswith("plan refused: prefill 0: "), spec.warnings
    decode = next(w for w in spec.workers if w.role == "decode")
    assert decode.plan["within-budget"]  # the decode keeps its KV on the GPU
    ok = get_adapter("sglang-disagg").build(job, None, port=30000)
    assert not [w for w in ok.warnings if w.startswith("plan refused")]
    assert [w.nodes for w in ok.workers] == [[0], [1]] and ok.nodes == 2


def test_workers_packed_onto_one_node_oversubscribe_it_and_the_row_is_refused():
    """Two TP8 prefill workers on one 8-GPU node (PREFILL_NODES=1): 16 GPUs and twice the
    node's DRAM budget (each prefill plan takes the node's budget), so the row is refused
    with that node's arithmetic; the decode on its own node is fine. (InferenceX's submit.sh
    would instead halve the TP, PREFILL_TP_SIZE = NODES x TP / WORKERS; kvbench launches the
    row's tp or refuses.)"""
    from kvbench.engines import get_adapter
    from kvbench.matrix import Job, Selection, select_jobs

    job = next(j for j in select_jobs(Selection(
        config_files=CONFIGS, runner_config=RUNNERS, frameworks=("sglang-disagg",)))
        if j.exp_name == "dsv4_p1x8_d1x8_conc8_kvdram-hicache")
    packed = Job(config_key=job.config_key, scenario=job.scenario, row={
        **job.row, "prefill": {**job.row["prefill"], "num-worker": 2}})
    spec = get_adapter("sglang-disagg").build(packed, None, port=30000)
    assert [(w.role, w.nodes) for w in spec.workers] == [
        ("prefill", [0]), ("prefill", [0]), ("decode", [1])]
    refused = [w for w in spec.warnings if w.startswith("plan refused: ")]
    assert refused[0] == "plan refused: node 0 (prefill 0, prefill 1): 16 GPUs > 8 per node"
    assert refused[1].startswith("plan refused: node 0 (prefill 0, prefill 1): projected host ")
    assert refused[1].endswith("> 2,399 GB budget (row total-cpu-dram-gb, per node)")
    assert len(refused) == 2
    # the router names each prefill server; the two on node 0 listen on their own ports
    assert [spec.argv[i + 1] for i, a in enumerate(spec.argv) if a == "--prefill"] == [
        "http://{node0}:30001", "http://{node0}:30002"]
