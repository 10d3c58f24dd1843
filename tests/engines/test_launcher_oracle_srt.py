"""Acceptance for the Dynamo and multi-node vLLM rows: `kvbench launch --dry-run --format json`
starts, process by process, what InferenceX's srt-slurm chain starts (NVIDIA's srtctl run
unmodified at the runners' pins by benchmarks/launcher_oracle/record_srt.py, recorded in
data/launcher_oracle_srt/), or the difference is on data/launcher_oracle_srt_allow.yaml with
its proof; a row the chain does not start (no recipe, an unobtainable srt-slurm fork) is one
kvbench refuses with the reason.

Compared both ways, per row: which worker processes run on which node (mode, endpoint index,
node), each worker's program and options (flag -> values, every occurrence), its environment
(what srtctl exports less what it unsets before the command) and config files, the front's
program, options and environment (Dynamo's frontend, SGLang's router, or none where vLLM's own
server is the front), and which services run (etcd/NATS, a Mooncake master). A row whose
srtctl no recording could read (a fork) is launched with a warning that says so."""

from __future__ import annotations

import copy
import gzip
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.inferencex import CONFIGS, RUNNERS
from fixtures.launcher_oracle import classify_rows

SRC = Path(__file__).resolve().parents[2] / "src"
DATA = Path(__file__).with_name("data")
ORACLE = DATA / "launcher_oracle_srt"
ALLOW = yaml.safe_load((DATA / "launcher_oracle_srt_allow.yaml").read_text())
PORT = 8000  # srtctl's public frontend port (ports.py FRONTEND_PUBLIC_PORT)
FRAMEWORKS = ("dynamo-vllm", "dynamo-sglang", "dynamo-trt", "vllm")
# the last word of each worker's and front's program (`vllm serve`: serve)
WORKER_PROGRAMS = ("dynamo.vllm", "dynamo.sglang", "dynamo.trtllm", "sglang.launch_server",
                   "serve")
FRONT_PROGRAMS = ("dynamo.frontend", "sglang_router.launch_router")
# what srtctl's steps start, as kvbench's services name it (cli/setup_head.py: etcd and NATS)
SERVICES = {"/tmp/setup_head.py": ["etcd", "nats"], "mooncake_master": ["mooncake-master"]}
_LOG = re.compile(r"/(node\d+)_(prefill|decode|agg)_w(\d+)\.out$")


def _recordings() -> list[dict[str, Any]]:
    out = []
    for path in sorted(ORACLE.glob("*.json.gz")):
        with gzip.open(path, "rt") as f:
            out.extend(json.load(f))
    return out


def _dry_run() -> tuple[list[dict[str, Any]], str]:
    cmd = [sys.executable, "-m", "kvbench", "launch", "--dry-run", "--format", "json",
           "--port", str(PORT), "--host", "0.0.0.0", "--scenario-type", "agentic-coding",
           "--runner-config", str(RUNNERS), "--config-files", *map(str, CONFIGS),
           "--multi-node", *[x for f in FRAMEWORKS for x in ("--framework", f)],
           "--work-dir", "{outputs}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout), out.stderr


@pytest.fixture(scope="module")
def recordings() -> list[dict[str, Any]]:
    return _recordings()


@pytest.fixture(scope="module")
def dry_run() -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    specs, err = _dry_run()
    return {(s["config-key"], s["exp-name"]): s for s in specs}, err


# ---- the two sides, as processes -----------------------------------------------------------

def options(argv: list[str]) -> dict[str, list[list[str]]]:
    """--flag -> the value list of each occurrence (`--a=b` is `--a b`); positional arguments
    before the first flag (`vllm serve MODEL`) under ''."""
    out: dict[str, list[list[str]]] = {}
    flag = "" if argv and not argv[0].startswith("--") else None
    if flag is not None:
        out[flag] = [[]]
    for tok in argv:
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            flag = name
            out.setdefault(flag, []).append([value] if eq else [])
        elif flag is not None:
            out[flag][-1].append(tok)
    return out


def _node_names(value: str) -> str:
    """srtctl's `nodeN` hostnames (ETCD_ENDPOINTS, NATS_SERVER) as `{node<N-1>}`."""
    return re.sub(r"(?<![{\w])node(\d+)\b", lambda m: f"{{node{int(m[1]) - 1}}}", value)


def _split(argv: list[str], programs: tuple[str, ...]) -> dict[str, Any]:
    """A command line as its program (up to the first of `programs`) and options."""
    start = next(i for i, a in enumerate(argv) if a in programs)
    return {"program": argv[:start + 1], "options": options(argv[start + 1:])}


def _unset(preamble: list[str]) -> set[str]:
    """The variables a step's script unsets before its command (`unset -- NAME ...`)."""
    return {name for line in preamble if line.startswith("unset -- ")
            for name in line.split()[2:]}


_DYNAMO = (re.compile(r"Installing dynamo ([\w.]+)\.\.\."),
           re.compile(r"install path completed for ai_dynamo-([\w.]+)-py3-none-any\.whl"))


def launcher_image(preamble: list[str]) -> dict[str, bool]:
    """What a worker's srtctl preamble changes in the image before the command: the setup
    script it runs (`setup_script=NAME`) and the Dynamo it installs (a version, a staged
    wheel's version, or a source commit)."""
    out = {}
    for line in preamble:
        if line.startswith("setup_script="):
            out[f"setup-script {line.split('=', 1)[1]}"] = True
        if line.startswith("git checkout "):
            out[f"dynamo-source {line.split()[-1][:12]}"] = True
        for pattern in _DYNAMO:
            if m := pattern.search(line):
                out[f"dynamo {m.group(1)}"] = True
    return out


def kvbench_image(mods: list[dict[str, Any]]) -> dict[str, bool]:
    out = {}
    for m in mods:
        if m.get("setup-script"):
            out[f"setup-script {m['setup-script']}"] = True
        elif m["id"].startswith("dynamo-source-"):
            out[f"dynamo-source {m['id'].removeprefix('dynamo-source-')}"] = True
        elif m["id"].startswith("dynamo-"):
            out[f"dynamo {m['id'].removeprefix('dynamo-')}"] = True
    return out


def launcher_processes(rec: dict[str, Any]) -> dict[str, Any]:
    workers, frontends, services = {}, [], []
    for call in rec["calls"]:
        argv = call["argv"]
        srun = call["srun"]
        out = srun[srun.index("--output") + 1] if "--output" in srun else ""
        gone = _unset(call["preamble"])
        env = {k: _node_names(v) for k, v in call["exports"].items() if k not in gone}
        m = _LOG.search(out)
        if m:
            node = int(m[1][4:]) - 1
            workers[(m[2], int(m[3]), node)] = {**_split(argv, WORKER_PROGRAMS), "env": env,
                                                "image": launcher_image(call["preamble"])}
        elif any(a in FRONT_PROGRAMS for a in argv):
            frontends.append({**_split(argv, FRONT_PROGRAMS), "env": env})
        else:
            services += next((v for k, v in SERVICES.items() if k in argv[:2]), [])
    return {"workers": workers, "frontends": frontends, "services": sorted(services),
            "files": rec.get("files", {})}


def kvbench_processes(spec: dict[str, Any]) -> dict[str, Any]:
    workers, files = {}, {}
    for w in spec["workers"]:
        workers[(w["role"], w["index"], w["nodes"][0])] = {
            **_split(w["argv"], WORKER_PROGRAMS), "env": w["env"],
            "image": kvbench_image(w["image-mods"])}
        files |= w["files"]
    front = [{**_split(spec["argv"], FRONT_PROGRAMS), "env": spec["env"]}] if spec["argv"] \
        else []
    return {"workers": workers, "frontends": front,
            "services": sorted(x["name"] for x in spec["services"]), "files": files}


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """(part, name, launcher, kvbench); parts `layout`, `<mode> <i> node<n> program|engine|
    env|image`, `frontend engine|env`, `files`."""
    if sorted(theirs["workers"]) != sorted(ours["workers"]):
        return [("layout", "processes", sorted(theirs["workers"]), sorted(ours["workers"]))]
    out = []
    for key, a in theirs["workers"].items():
        b = ours["workers"][key]
        part = f"{key[0]} {key[1]} node{key[2]}"
        if a["program"] != b["program"]:
            out.append((f"{part} program", "program", a["program"], b["program"]))
        out += [(f"{part} engine", n, x, y) for n, x, y in compare(a["options"], b["options"])]
        out += [(f"{part} env", n, x, y) for n, x, y in compare(a["env"], b["env"])]
        out += [(f"{part} image", n, x, y) for n, x, y in compare(a["image"], b["image"])]
    if bool(theirs["frontends"]) != bool(ours["frontends"]):
        out.append(("layout", "frontend", len(theirs["frontends"]), len(ours["frontends"])))
    for a in theirs["frontends"] if ours["frontends"] else ():
        front = ours["frontends"][0]
        if a["program"] != front["program"]:
            out.append(("frontend program", "program", a["program"], front["program"]))
        out += [("frontend engine", n, x, y) for n, x, y in compare(a["options"],
                                                                     front["options"])]
        out += [("frontend env", n, x, y) for n, x, y in compare(a["env"], front["env"])]
    if theirs["services"] != ours["services"]:
        out.append(("services", "services", theirs["services"], ours["services"]))
    out += [("files", n, x, y) for n, x, y in compare(theirs["files"], ours["files"])]
    return out


def classify(rows: list[tuple[dict[str, Any], list[tuple]]]) -> tuple[list[str], Counter]:
    return classify_rows(ALLOW, rows)


@pytest.fixture(scope="module")
def sides(recordings, dry_run):
    launched, _ = dry_run
    return [(rec, launcher_processes(rec), kvbench_processes(
        launched[(rec["config-key"], rec["row"]["exp-name"])]))
        for rec in recordings
        if (rec["config-key"], rec["row"]["exp-name"]) in launched and rec.get("calls")]


# ---- the tests -----------------------------------------------------------------------------

def test_every_row_is_recorded_and_launched_or_refused_with_the_reason(recordings, dry_run):
    launched, err = dry_run
    manifest = json.loads((ORACLE / "manifest.json").read_text())
    assert manifest["inferencex-commit"].startswith("843c6254f")
    assert len(recordings) == manifest["rows"]
    skipped = {}
    for line in err.splitlines():
        m = re.match(r"^skipped (\S+) \((\S+)\): (.*)$", line)
        if m:
            skipped[(m[2], m[1])] = m[3]
    refused = []
    for rec in recordings:
        exp = rec["row"]["exp-name"]
        if (rec["config-key"], exp) in launched:
            if not rec.get("calls"):  # srtctl a fork no recording read: the launch says so
                warnings = launched[(rec["config-key"], exp)]["warnings"]
                assert rec.get("unrecorded") and any(
                    w.startswith("no recording verifies this row") and rec["srt-slurm"] in w
                    for w in warnings), (exp, rec.get("refused"), warnings)
            continue
        reason = skipped.get((rec["config-key"], exp))
        assert reason, exp  # neither launched nor refused with a reason
        if rec.get("calls"):  # the chain starts it and kvbench does not: on the allow-list
            refused.append((rec, [("refused", reason.split(": ", 1)[-1], None, None)]))
    unexplained, used = classify(refused)
    assert not unexplained, "\n".join(unexplained)
    assert all(used[e["id"]] for e in ALLOW if e["part"] == "refused"), "stale refusal entry"
    assert len(launched) + len([r for r in recordings
                                if (r["config-key"], r["row"]["exp-name"]) in skipped]) \
        == len(recordings)


def test_every_difference_is_fixed_or_allowed_with_proof(sides):
    rows = [(rec, differences(a, b)) for rec, a, b in sides]
    unexplained, used = classify(rows)
    assert not unexplained, "\n".join(unexplained[:60]) + f"\n({len(unexplained)} unexplained)"
    assert not [e["id"] for e in ALLOW if not used[e["id"]] and e["part"] != "refused"], \
        "stale allow-list entries"
    for entry in ALLOW:
        assert entry["status"] == "deliberate" and entry.get("proof") and entry.get("line"), \
            entry["id"]


def _perturbed(rec: dict[str, Any]) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    call = next(c for c in rec["calls"] if any(m in c["argv"] for m in WORKER_PROGRAMS))
    call["argv"].append("--perturbed-flag")
    call["exports"]["PERTURBED_VARIABLE"] = "1"
    return rec


def test_the_comparison_catches_a_perturbed_worker(sides):
    rec, theirs, ours = sides[0]
    before = differences(theirs, ours)
    after = differences(launcher_processes(_perturbed(rec)), ours)
    new = [d for d in after if d not in before]
    assert sorted(d[1] for d in new) == ["--perturbed-flag", "PERTURBED_VARIABLE"], new
    unexplained, _ = classify([(rec, new)])
    assert len(unexplained) == 2  # no allow-list entry swallows them


@pytest.mark.parametrize(("dropped", "name"), [
    ("setup_script=", "setup-script vllm-container-deps.sh"),
    ("( flock -x 200;", "dynamo 1.3.1"),
])
def test_the_comparison_catches_a_dropped_image_modification(sides, dropped, name):
    """The preamble is compared too: a DSv4 GB200 worker whose recorded setup script
    (srt-slurm configs/patches/vllm-container-deps.sh) or Dynamo install is dropped differs
    from kvbench's image-mods, and no allow-list entry swallows it."""
    rec, theirs, ours = next(s for s in sides if s[0]["config-key"]
                             == "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-agg")
    before = differences(theirs, ours)
    rec = copy.deepcopy(rec)
    for call in rec["calls"]:
        call["preamble"] = [p for p in call["preamble"] if not p.startswith(dropped)]
    new = [d for d in differences(launcher_processes(rec), ours) if d not in before]
    assert new and {d[1] for d in new} == {name}, new
    assert all(d[0].endswith(" image") for d in new)
    unexplained, _ = classify([(rec, new)])
    assert len(unexplained) == len(new)
