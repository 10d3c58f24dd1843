"""Secrets never reach a file: each credential shape is planted where a user would put it
(engine arguments, model path, environment, what an engine prints at start-up) and every
file kvbench leaves under the results directory is searched for it afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.servers import free_port, script

from kvbench.launch import ServerProcess
from kvbench.redaction import redact_argv, redact_json, redact_text

REPO = Path(__file__).resolve().parents[2]
# Fake credentials in each provider's documented shape (none of them is real).
SECRETS = {
    "url-password": "hunter2-url-pw",
    "openai": "sk-proj-Abc123Def456Ghi789Jkl0",
    "anthropic": "sk-ant-api03-Zyx987Wvu654Tsr321",
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWx",
    "github-pat": "github_pat_11ABCDEFG0abcdefghijklmnop",
    "github-classic": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "slack-bot": "xoxb-123456789012-abcdefghijkl",
    "gitlab": "glpat-abcdefghij0123456789",
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "slack-webhook": "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXX",
    "api-key-flag": "plainApiKeyValue42",
    "auth-header-flag": "plainAuthHeader42",
    "hf-token-flag": "plainHfToken42",
}
S = SECRETS


def planted_engine_args() -> list[str]:
    return [
        f"--api-key {S['api-key-flag']}",
        f"--auth-header 'Bearer {S['auth-header-flag']}'",
        f"--hf-token={S['hf-token-flag']}",
        f"--download-url https://bob:{S['url-password']}@models.example.com/w",
        f"--openai {S['openai']} --anthropic {S['anthropic']} --hf {S['hf']}",
        f"--pat {S['github-pat']} --classic {S['github-classic']}",
        f"--slack {S['slack-bot']} --gitlab {S['gitlab']} --google {S['google']}",
        f"--jwt {S['jwt']} --notify {S['slack-webhook']}",
    ]


def leaks(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {name}" for name, value in SECRETS.items()
                      if value.encode() in data]
    return found


@pytest.mark.parametrize("name", list(SECRETS))
def test_each_shape_is_redacted_in_text_argv_and_json(name):
    value = SECRETS[name]
    args = [tok for arg in planted_engine_args() for tok in __import__("shlex").split(arg)]
    assert value not in " ".join(redact_argv(args))
    assert value not in str(redact_json({"argv": args, "reason": " ".join(args)}))
    assert value not in redact_text(" ".join(args))


def test_configuration_is_not_redacted():
    argv = ["--max-prefill-tokens", "16384", "--model", "Qwen/Qwen3-8B", "--url",
            "http://127.0.0.1:8000", "--tokenizer", "Qwen/Qwen3-8B", "--disk-cache-dir", "x"]
    assert redact_argv(argv) == argv
    doc = {"config_key": "qwen3-8b-bf16", "max_tokens": 5, "tokenizer": "t"}
    assert redact_json(doc) == doc


PRINTING_SERVER = """
import http.server, os, sys
port = int(sys.argv[1])
# as engines do: the parsed arguments and selected environment at start-up
print("server_args=ServerArgs(api_key=%r, argv=%r)" % (os.environ.get("PLANT_KEY"), sys.argv))
print("env HF_TOKEN=" + os.environ.get("HF_TOKEN", ""), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_server_log_command_and_env_records_hold_no_secret(tmp_path, monkeypatch):
    import shlex

    monkeypatch.setenv("http_proxy", "")
    port = free_port()
    argv = [*script(tmp_path, "printing", PRINTING_SERVER), str(port),
            *[tok for arg in planted_engine_args() for tok in shlex.split(arg)]]
    env = {"HF_TOKEN": S["hf"], "PLANT_KEY": S["openai"],
           "PROXY": f"http://bob:{S['url-password']}@proxy:3128"}
    out = tmp_path / "job"
    with ServerProcess(argv, env=env, log_path=out / "server.log",
                       ready_url=f"http://127.0.0.1:{port}/", ready_timeout_s=300, grace_s=2,
                       poll_interval_s=0.1) as server:
        server.wait_ready()
    log = (out / "server.log").read_text()
    assert "server_args=ServerArgs(api_key=<redacted>" in log  # the engine did print it
    assert leaks(out) == []


@pytest.mark.slow
def test_a_sweep_and_its_dashboard_hold_no_secret(tmp_path):
    """`kvbench run` with every shape in --engine-arg and --model-path: the embedded engine
    refuses the unknown flags, so the job fails, and its failure (log tail, reason) is written
    with the job, command, environment and plan records; then the dashboard."""
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_TOKEN": S["hf"]}
    engine = [a for arg in planted_engine_args() for a in ("--engine-arg", arg)]
    run = subprocess.run(
        [sys.executable, "-m", "kvbench", "run", str(REPO / "examples" / "quickstart.yaml"),
         "--max-conc", "3", "--results", str(results), "--ready-timeout", "300",
         "--model-path", f"https://bob:{S['url-password']}@models.example.com/{S['hf']}",
         "--continue-on-error", *engine],
        capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode != 0, run.stdout + run.stderr
    job_dirs = [p for p in results.iterdir() if (p / "job.json").exists()]
    assert job_dirs, run.stderr
    for job in job_dirs:
        for name in ("job.json", "command.json", "env.json", "server.log", "result.json"):
            assert (job / name).exists(), (job, name)
    command = (job_dirs[0] / "command.json").read_text()
    assert "--api-key" in command and "<redacted>" in command  # recorded, value hidden
    report = subprocess.run([sys.executable, "-m", "kvbench", "report", str(results), "-o",
                             str(results / "dashboard.html")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert report.returncode == 0, report.stderr
    assert leaks(results) == []
    assert not any(v in run.stdout + run.stderr for v in SECRETS.values())


# One secret per input kvbench accepts, each distinct so a leak names its door (issue 40).
PLANTED = {
    "recipe field": "imagePw1234Secret",  # a registry URL's password in `image:`
    "engine arg": "engineArgSecret42",  # --engine-arg "--api-key ..."
    "environment": "hf_EnvTokenAbCdEfGhIjKlMnOpQr",  # HF_TOKEN
    "header": "sk-proj-HeaderKeyAbcdef0123456789",  # replay --api-key: the Bearer header
    "url": "urlPwSecret9876",  # http://bob:...@host
    "trace session id": "sk-proj-TraceId0123456789abcdef",
    "trace agent id": "ghp_agentIdabcdefghijklmnopqrstuvwxyz0123",
}


def _spellings(value: str) -> list[bytes]:
    """The secret as a file might hold it: as is, base64, hex, reversed (a server echoing
    it back)."""
    import base64

    raw = value.encode()
    return [raw, base64.b64encode(raw), raw.hex().encode(), raw[::-1]]


def test_one_secret_in_every_input_reaches_no_file(tmp_path, monkeypatch, capsys):
    """A sweep (recipe, engine args, environment, trace) and replays against a server that
    echoes the key back (URL, header, trace, server response), then the dashboard: every
    file either wrote is searched for every planted secret in four spellings."""
    import json
    import shutil

    from fixtures.bad_server import bad_server

    from kvbench.cli import main

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((REPO / "examples" / "quickstart.yaml").read_text().replace(
        "image: kvbench-serve-sim", "image: https://bob:" + PLANTED["recipe field"]
        + "@registry.example.com/kvbench-serve-sim", 1))
    shutil.copyfile(REPO / "examples" / "runners.yaml", tmp_path / "runners.yaml")
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"id": PLANTED["trace session id"], "requests": [
        {"in": 200, "out": 4, "hash_ids": [1, 2, 3]},
        {"type": "subagent", "agent_id": PLANTED["trace agent id"], "requests": [
            {"in": 100, "out": 3, "hash_ids": [9]}]}]}))
    monkeypatch.setenv("HF_TOKEN", PLANTED["environment"])
    outputs = tmp_path / "out"

    def kvbench(*argv) -> int:
        try:
            main([str(a) for a in argv])
        except SystemExit as e:
            return e.code
        return 0

    # the embedded engine refuses --api-key: the job fails at start, its records written
    assert kvbench("run", recipe, "--results", outputs / "sweep", "--max-conc", "3",
                   "--max-requests", "2", "--time-scale", "100", "--think-time-scale", "0",
                   "--trace", trace, "--engine-arg",
                   f"--api-key {PLANTED['engine arg']}") == 3
    with bad_server() as url:
        url = url.replace("http://", f"http://bob:{PLANTED['url']}@")
        for mode in ("ok", "echo-auth"):
            kvbench("replay", "--url", url, "--model", mode, "--trace", trace, "--output",
                    outputs / mode, "--api-key", PLANTED["header"], "--think-time-scale", "0")
    assert kvbench("report", outputs / "sweep", "-o", outputs / "dashboard.html") == 0
    printed = capsys.readouterr()
    files = [p for p in outputs.rglob("*") if p.is_file()]
    assert len(files) >= 10 and (outputs / "ok" / "records.jsonl").stat().st_size
    leaked = [f"{p.relative_to(outputs)}: {door}" for p in files
              for door, value in PLANTED.items()
              if any(s in p.read_bytes() for s in _spellings(value))]
    assert leaked == []
    assert not any(v in printed.out + printed.err for v in PLANTED.values())
