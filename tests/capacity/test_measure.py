"""`kvbench capacity --url` against a real `kvbench serve-sim` with the same settings finds
the simulator's maximum within one concurrency step, writing each step as a result.json.

The sessions carry a 32,768-token context (a miss costs ~3 s of prefill, a hit well under
the SLO) so that the client's own per-request time, stretched by the server's --time-scale,
cannot move a step across the 1.5 s TTFT objective.

The short cases (2 sessions x 2 turns of 1,024 tokens, so 4,096 prompt tokens a step) check
what a measured step is made of: prompts synthesised with --tokenizer, a stop when the server
counts other prompt tokens than were sent, and a recipe row scraped with its own engine's
adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from capacity.cases import PAGE, write_sessions
from fixtures.servers import free_port, stop
from fixtures.tiny_model import build_tokenizer

from kvbench.cli import main
from kvbench.results import read_result

SRC = Path(__file__).resolve().parents[2] / "src"
CONTEXT_PAGES = 512
CONTEXT = CONTEXT_PAGES * PAGE
KV_BYTES_PER_TOKEN = 131_072  # reference-8b (test_curve.py)
TIME_SCALE = "10"
GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "vllm"
VLLM_ROW = ["--config-files", str(GPU / "recipe.yaml"), "--runner-config",
            str(GPU / "runners.yaml"), "--config-keys", "qwen3-8b-bf16-h200-vllm-agentic-native"]
SHORT_SENT_TOKENS = 2 * 2 * 16 * PAGE  # sessions x turns x 1,024 tokens
# serve-sim's word count of its flattened chat, per request: "<", "|", "user", "|", ">" and
# the closing newline around the content (sim/tokens.py chat_text)
CHAT_TEMPLATE_TOKENS = 6


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve-sim exited: {proc.stderr.read()}")
        try:
            with opener.open(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("serve-sim did not become ready")


@contextmanager
def serve_sim(*args: str) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "serve-sim", *args, "--time-scale", TIME_SCALE,
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        _wait_ready(url, proc)
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    build_tokenizer(out)  # byte-level BPE; its single-token prompt words are " [a-z]{2,}"
    return out


@pytest.mark.slow
def test_measured_maximum_is_within_one_step_of_the_simulated(tmp_path, capsys):
    traces = write_sessions(tmp_path / "t", sessions=6, turns=20, think_s=1.0,
                            context_pages=CONTEXT_PAGES)
    gpu_tokens = str(2 * CONTEXT + 1000)
    host_gb = f"{(4 * CONTEXT + 32) * KV_BYTES_PER_TOKEN / 1e9:.6f}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbench", "serve-sim", "--model", "reference-8b",
         "--hardware", "h200", "--gpu-tokens", gpu_tokens, "--host-cache-gb", host_gb,
         "--time-scale", TIME_SCALE, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        _wait_ready(url, proc)
        out = tmp_path / "out"
        main(["capacity", "--trace", str(traces), "--bounds", "once", "--model", "reference-8b",
              "--hardware",
              "h200", "--gpu-tokens", gpu_tokens, "--budget-gb", host_gb, "--host-gb", "0",
              "--host-gb", host_gb, "--ttft-p90-ms", "1500", "--url", url,
              "--time-scale", TIME_SCALE, "--output", str(out)])
    finally:
        stop(proc)
    doc = json.loads((out / "capacity.json").read_text())
    predicted = {p["host_gb"]: p["max_sessions"] for p in doc["predicted"]}
    assert predicted == {0.0: 2, float(host_gb): 4}  # 2 contexts on GPU, 4 with the host
    [measured] = doc["measured"]
    assert measured["host_gb"] == float(host_gb)
    assert abs(measured["max_sessions"] - predicted[float(host_gb)]) <= 1
    # the search started at the prediction and stopped one step past the last pass
    concs = [s["concurrency"] for s in measured["steps"]]
    assert predicted[float(host_gb)] in concs and measured["first_failing"] in concs
    for step in measured["steps"]:
        result = read_result(Path(step["result_path"]))
        assert result.conc == step["concurrency"]
        assert result.num_requests_total == 6 * 20  # every session once, every turn
        assert (Path(step["result_path"]).parent / "records.jsonl").is_file()
    assert "measured at host" in capsys.readouterr().out
    # the dashboard of the measured steps carries the capacity panel beside the runs
    assert "p-capacity" in (out / "dashboard.html").read_text()


def test_a_server_counting_other_prompt_tokens_stops_after_the_first_step(
        tmp_path, capsys, tokenizer_dir):
    """serve-sim --chars-per-token 1 counts characters, as a server with another tokenizer
    counts other tokens than the client's: every prompt word (one token of the client's
    tokenizer, or of the default word vocabulary) is 3 or more characters."""
    traces = write_sessions(tmp_path / "t", sessions=2, turns=2, think_s=0.0, context_pages=16)
    common = ["capacity", "--trace", str(traces), "--bounds", "once", "--model", "reference-8b",
              "--gpu-tokens",
              "100000", "--budget-gb", "1", "--host-gb", "1", "--time-scale", TIME_SCALE]
    hints = {None: "hint: pass the served model's --tokenizer (a model directory or name)",
             str(tokenizer_dir): f"hint: the server does not count as --tokenizer "
                                 f"{tokenizer_dir} does: pass the served model's tokenizer"}
    with serve_sim("--model", "reference-8b", "--gpu-tokens", "100000", "--host-cache-gb",
                   "1", "--chars-per-token", "1") as url:
        for n, (tok, hint) in enumerate(hints.items()):
            out = tmp_path / f"out{n}"
            with pytest.raises(SystemExit) as e:
                main([*common, "--url", url, "--output", str(out),
                      *(["--tokenizer", tok] if tok else [])])
            assert e.value.code == 2
            err = capsys.readouterr().err
            # the first step (the prediction, 2 sessions) ran and left its evidence; no other
            [step] = (out / "measured" / "host1gb").iterdir()
            assert step.name == "conc0002"
            summary = json.loads((step / "summary.json").read_text())
            prompt = summary["prompt"]
            assert (prompt["sent_tokens"], prompt["agrees"]) == (SHORT_SENT_TOKENS, False)
            assert prompt["server_tokens"] >= 3 * SHORT_SENT_TOKENS
            assert summary["run"]["tokenizer"] == tok
            assert read_result(step / "result.json").validity["checks"]["prompt_size"][
                "passed"] is False
            # before them: the workload line, the prediction's progress lines (and a
            # working-set warning)
            [line, hint_line] = [x for x in err.strip().splitlines()
                                 if not x.startswith(("capacity ", "warning: ", "workload: "))]
            assert line == (f"error: the server counted {prompt['server_tokens']:,} prompt "
                            f"tokens for 4,096 sent ({prompt['deviation']:+.1%}) at {step}: "
                            "the steps would not replay the predicted requests")
            assert hint_line == hint
            assert not (out / "capacity.json").exists()  # no curve from mismatched steps


def test_a_recipe_rows_steps_are_its_engines_and_scraped_with_its_adapter(
        tmp_path, capsys, tokenizer_dir):
    """The vLLM row (GPU pool capped by --gpu-tokens) measured on serve-sim, which speaks
    SGLang's /metrics: the step's result says framework vllm and its server block was read
    with the vllm adapter (which finds none of serve-sim's sglang: series; the sim adapter
    would have). The --url default size is the grid's top, 24 GB (not the 38.65 GB pinned);
    prompts synthesised with --tokenizer agree with serve-sim's word count."""
    traces = write_sessions(tmp_path / "t", sessions=2, turns=2, think_s=0.0, context_pages=16)
    out = tmp_path / "out"
    with serve_sim("--model", "qwen3-8b", "--gpu-tokens", "43680", "--host-cache-gb",
                   "24") as url:
        main(["capacity", *VLLM_ROW, "--gpu-tokens", "43680", "--trace", str(traces), "--bounds",
              "once",
              "--host-gb", "24", "--url", url, "--served-model", "Qwen/Qwen3-8B",
              "--tokenizer", str(tokenizer_dir), "--time-scale", TIME_SCALE,
              "--output", str(out)])
    assert "measured at host 24 GB: 2 sessions" in capsys.readouterr().out
    [measured] = json.loads((out / "capacity.json").read_text())["measured"]
    assert (measured["host_gb"], measured["gpu_kv_tokens"], measured["host_kv_tokens"]) == (
        24.0, 43_680, 162_736)
    [step] = measured["steps"]
    path = Path(step["result_path"])
    assert path == out / "measured" / "host24gb" / "conc0002" / "result.json"
    result = read_result(path)
    assert (result.framework, result.server_metrics["adapter"]) == ("vllm", "vllm")
    assert result.plan["gpu-kv-tokens"] == 43_680
    assert result.plan["engine-args"][-2:] == ["--kv-offloading-size", "22.35"]
    assert result.job_row["kv-offload-backend"] == {"name": "vllm-native",
                                                    "size-gb-per-rank": 24.0}
    scraped = json.loads((path.parent / "scrape.jsonl").read_text().splitlines()[-1])
    assert "sglang:prompt_tokens_total" in scraped["samples"]
    assert result.server_metrics["sources"] == {}
    assert result.server_metrics["tokens"]["prompt_total"] is None
    summary = json.loads((path.parent / "summary.json").read_text())
    assert summary["run"]["tokenizer"] == str(tokenizer_dir)
    assert summary["prompt"]["agrees"] is True
    assert (summary["prompt"]["sent_tokens"], summary["prompt"]["server_tokens"]) == (
        SHORT_SENT_TOKENS, SHORT_SENT_TOKENS + 4 * CHAT_TEMPLATE_TOKENS)
