"""Servers for the replay tests: the reference fast SSE server (tests/data/bench) and a real
`transformers serve` with the tiny offline model."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_SSE_SERVER
from fixtures.servers import stop
from fixtures.tiny_model import build_tiny_model
from fixtures.transformers_server import free_port, transformers_server, wait_http


@contextlib.contextmanager
def fast_sse_server(*args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAST_SSE_SERVER), "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def sse_server() -> Iterator[str]:
    if not FAST_SSE_SERVER.is_file():
        pytest.fail(f"reference server missing: {FAST_SSE_SERVER}")
    with fast_sse_server("--delay", "0.001") as url:
        yield url


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def tf_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tf-serve") / "server.log"
    with transformers_server(tiny_model, log) as url:
        yield url
