"""serve-sim answers every malformed body with a 400 naming the problem, never a 500 (issue
27 item 7), and keeps serving well-formed requests after them (a real serve-sim process)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from fixtures.sim_server import serve_sim

MALFORMED: dict[str, object] = {
    "messages of ints": {"messages": [1, 2]},
    "messages of strings": {"messages": ["hi"]},
    "content a number": {"messages": [{"role": "user", "content": 5}]},
    "content parts of ints": {"messages": [{"role": "user", "content": [1]}]},
    "content part text a list": {"messages": [{"role": "user", "content": [{"text": [1]}]}]},
    "role a list": {"messages": [{"role": ["x"], "content": "hi"}]},
    "stream_options a list": {"messages": [{"role": "user", "content": "hi"}],
                              "stream_options": [1]},
    "stream_options a string": {"messages": [{"role": "user", "content": "hi"}],
                                "stream_options": "yes"},
    "max_tokens true": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": True},
    "max_tokens a string": {"messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": "5"},
    "max_tokens negative": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
    "messages empty": {"messages": []},
    "messages a dict": {"messages": {"role": "user"}},
    "body a list": [1, 2],
    "body a string": "hello",
    "body null": None,
}
RAW = {"not JSON": b"{nope", "empty": b"", "huge int": b'{"messages": [], "max_tokens": '
       + b"9" * 50 + b"}", "NaN": b'{"max_tokens": NaN}'}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    log = tmp_path_factory.mktemp("sim") / "server.log"
    with serve_sim(log, "--time-scale", "1000") as base:
        yield base


def post(url: str, path: str, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.parametrize("case", sorted(MALFORMED) + sorted(RAW))
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_every_malformed_body_is_a_400(case, path, url):
    data = RAW[case] if case in RAW else json.dumps(MALFORMED[case]).encode()
    status, body = post(url, path, data)
    assert status == 400, (case, status, body)
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"]


def test_the_server_still_serves_after_them(url):
    status, body = post(url, "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
         "max_tokens": 3, "stream_options": None}).encode())
    assert status == 200 and body["usage"]["completion_tokens"] == 3
