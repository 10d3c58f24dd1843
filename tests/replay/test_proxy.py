"""kvbench's one-off probes of a server (the model id, the advertised clock) go to it
directly, as the replay's own connections do (replay/http.py), whatever http_proxy says."""

from __future__ import annotations

import urllib.request


def test_the_probes_take_no_proxy(sse_server, monkeypatch):
    from kvbench.cli.replay import _first_model
    from kvbench.replay.clock import advertised_clock

    # a proxy that refuses everything, and urllib's global opener rebuilt from it
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    urllib.request.install_opener(None)
    try:
        with urllib.request.urlopen(f"{sse_server}/v1/models", timeout=5):
            raise AssertionError("the dead proxy was not used by urllib's own opener")
    except OSError:
        pass  # what kvbench met before: every probe refused
    assert _first_model(sse_server)
    assert advertised_clock(sse_server) == (None, False)
