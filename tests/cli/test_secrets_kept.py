"""Secrets, round two (issue 27 item 6): an --engine-arg value keeps its grouping, the whole
value after a secret flag is redacted (`--flag=value`, values starting with `--`, single-dash
flags), scrape.jsonl labels and the replay's summary.json are redacted, and URLs with
credentials or `api_key=` queries are never printed or stored in the clear."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from aiohttp import web
from fixtures.bad_server import bad_server

from kvbench.cli import main
from kvbench.cli.launch import split_engine_args
from kvbench.redaction import REDACTED, redact_argv, redact_text

SECRET = "hunter2-secret-value"


def test_an_engine_arg_value_keeps_its_grouping():
    assert split_engine_args(["--watchdog-timeout 3600"]) == ["--watchdog-timeout", "3600"]
    assert split_engine_args(["--api-key", "Authorization: Bearer X"]) == [
        "--api-key", "Authorization: Bearer X"]
    assert split_engine_args(["--header 'Authorization: Bearer X'"]) == [
        "--header", "Authorization: Bearer X"]


@pytest.mark.parametrize("argv", [
    ["--api-key", f"Bearer {SECRET}"],
    ["--api-key", f"--{SECRET}"],
    [f"--api-key=Bearer {SECRET}"],
    [f"--api-key=--{SECRET}"],
    ["-api-key", SECRET],
    ["--hf-token", SECRET, "--port", "8000"],
    ["-H", f"Authorization: Bearer {SECRET}"],
])
def test_the_whole_value_after_a_secret_flag_is_redacted(argv):
    out = redact_argv(argv)
    assert SECRET not in json.dumps(out), out
    assert REDACTED in json.dumps(out)
    if "--port" in argv:
        assert out[-2:] == ["--port", "8000"]  # what follows stays


@pytest.mark.parametrize("text", [
    f"http://alice:{SECRET}@host:8000/v1",
    f"http://host:8000/v1/models?api_key={SECRET}",
    f"https://host/v1?model=x&token={SECRET}#frag",
    f"curl -H 'Authorization: Bearer {SECRET}' http://h",
])
def test_urls_and_headers_with_credentials_are_redacted(text):
    assert SECRET not in redact_text(text)


def test_an_error_quoting_a_url_never_prints_its_credentials(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--url", f"http://alice:{SECRET}@127.0.0.1:9/?api_key={SECRET}",
              "--trace", "synthetic", "--output", str(tmp_path)])
    out = capsys.readouterr()
    assert "error: " in out.err and SECRET not in out.err + out.out


def test_replay_summary_and_stdout_are_redacted(tmp_path, capsys):
    with bad_server() as url:
        main(["replay", "--url", url.replace("http://", f"http://alice:{SECRET}@"),
              "--model", "ok", "--trace", "synthetic", "--sessions", "1", "--output",
              str(tmp_path), "--max-requests", "2", "--duration", "2", "--grace", "1",
              "--format", "json"])
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    summary = (tmp_path / "summary.json").read_text()
    assert "alice:<redacted>@" in summary and SECRET not in summary
    found = subprocess.run(["grep", "-rl", SECRET, str(tmp_path)], capture_output=True)
    assert found.stdout == b""


def test_a_server_echoing_the_bearer_token_in_any_spelling_leaves_no_trace(tmp_path, capsys):
    """Issue 40: a 401 body quoting the key reversed, base64- or hex-encoded is stored
    redacted in records.jsonl (the replay remembers the key it sends)."""
    import base64

    key = "Ab3-replay-bearer-Zz9"
    with bad_server() as url, pytest.raises(SystemExit):  # every request failed: exit 3
        main(["replay", "--url", url, "--model", "echo-auth", "--api-key", key, "--trace",
              "synthetic", "--sessions", "1", "--output", str(tmp_path), "--max-requests",
              "2", "--duration", "2", "--grace", "1", "--format", "json"])
    out = capsys.readouterr()
    records = (tmp_path / "records.jsonl").read_text()
    assert "bad key <redacted>" in records  # the server did answer, and was redacted
    for spelt in (key, key[::-1], base64.b64encode(key.encode()).decode(),
                  key.encode().hex()):
        found = subprocess.run(["grep", "-rlF", spelt, str(tmp_path)], capture_output=True)
        assert found.stdout == b"" and spelt not in out.out + out.err, spelt


def test_scrape_labels_are_redacted(tmp_path):
    from kvbench.metrics.scraper import Scraper

    exposition = (f'# TYPE x gauge\nsglang:x{{api_key="{SECRET}",url="http://a:{SECRET}@h"}} 1\n'
                  f'sglang:num_requests_running{{model_name="m"}} 2\n')

    async def metrics(_):
        return web.Response(text=exposition)

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", "sglang",
                          tmp_path / "scrape.jsonl")
        await scraper.start()  # the "pre" snapshot
        await scraper.stop()  # the "post" one
        await runner.cleanup()

    asyncio.run(go())
    text = (tmp_path / "scrape.jsonl").read_text()
    assert "num_requests_running" in text and SECRET not in text
