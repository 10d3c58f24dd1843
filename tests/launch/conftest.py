"""Fixtures of the launch tests."""

from __future__ import annotations

import pytest
from fixtures.servers import free_port


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # Readiness probes must reach 127.0.0.1 directly even where a proxy is configured.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
