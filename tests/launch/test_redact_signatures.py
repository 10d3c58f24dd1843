"""Secret redaction and failure-signature recognition."""

from __future__ import annotations

import signal
from pathlib import Path

from kvbench.launch import REDACTED, recognise, redact_argv, redact_env
from kvbench.launch.logtail import read_tail


def test_secret_env_names_are_redacted_configuration_is_not():
    env = {
        "HF_TOKEN": "hf_x", "HUGGING_FACE_HUB_TOKEN": "y", "OPENAI_API_KEY": "k",
        "AWS_SECRET_ACCESS_KEY": "s", "MODAL_TOKEN_ID": "i", "DB_PASSWORD": "p",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
        "AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID": "true",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": "29.9", "PYTHONHASHSEED": "0",
        "SOME_SETTING": "hf_" + "a" * 30,  # a credential-shaped value under an innocent name
    }
    out = redact_env(env)
    hidden = {k for k, v in out.items() if v == REDACTED}
    assert hidden == {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY",
                      "AWS_SECRET_ACCESS_KEY", "MODAL_TOKEN_ID", "DB_PASSWORD", "SOME_SETTING"}
    assert out["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token"


def test_secret_argv_values_are_redacted_counts_are_not():
    argv = ["serve", "--api-key", "abc", "--hf-token=xyz", "--speculative-num-draft-tokens",
            "4", "--max-prefill-tokens", "16384", "--enable-metrics", "--admin-api-key", "--x"]
    assert redact_argv(argv) == [
        "serve", "--api-key", REDACTED, f"--hf-token={REDACTED}",
        "--speculative-num-draft-tokens", "4", "--max-prefill-tokens", "16384",
        # a secret's value may itself start with "--" (issue 27 item 6): still the value
        "--enable-metrics", "--admin-api-key", REDACTED]


def test_recognise_prefers_specific_signature_and_falls_back_to_last_error():
    lines = ["loading", "Traceback (most recent call last):",
             "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are "
             "mutually exclusive"]
    m = recognise(lines, 1)
    assert m.name == "error" and "mutually exclusive" in m.line
    assert recognise(["ok"], 0) is None
    assert recognise(["fine"], 1, oom_kills=1).name == "host_oom"
    assert recognise(["fine"], -signal.SIGKILL, oom_kills=2).name == "host_oom"
    assert recognise(["x", "CUDA error: out of memory", "NCCL error"], 1).name == "cuda_oom"


def test_sigkill_without_a_counted_oom_kill_is_not_the_host_oom_killer():
    """An oom_kill count of 0 (or an unreadable counter) never reads as the OOM killer."""
    zero = recognise(["allocating"], -signal.SIGKILL, oom_kills=0)
    assert (zero.name, zero.line) == ("sigkill", "killed by SIGKILL (cgroup oom_kill events: 0)")
    unknown = recognise(["allocating"], -signal.SIGKILL, oom_kills=None)
    assert unknown.name == "sigkill" and "unreadable" in unknown.line
    assert "host out of memory" not in zero.title + zero.hint + unknown.title


DEEP_GEMM = Path(__file__).resolve().parents[1] / "data" / "sglang" / \
    "server-0.5.17-qwen3.5-deep-gemm.excerpt.log"


def test_sglang_0517_draft_graph_capture_without_deep_gemm_is_named_from_the_log():
    """Issue 37, device call 2: SGLang 0.5.17's draft CUDA-graph capture imports deep_gemm, the
    scheduler dies, the launcher kills its own tree (exit -9, no OOM kill). Read as the import
    error, not as the host OOM killer; the engine's "Ignore import error ... No module named
    'helion'" notes earlier in the same log are not the cause."""
    lines = read_tail(DEEP_GEMM, 40)
    assert any("No module named 'helion'" in line for line in DEEP_GEMM.read_text().splitlines())
    m = recognise(lines, -signal.SIGKILL, oom_kills=0)
    assert (m.name, m.line) == ("missing_module",
                                "ModuleNotFoundError: No module named 'deep_gemm'")
    assert "deep_gemm" in m.hint
    # the whole log too, notes included, and with the counter unreadable
    every = DEEP_GEMM.read_text().splitlines()
    assert recognise(every, -signal.SIGKILL, oom_kills=None).name == "missing_module"
    # a warning that quotes the error mid-line is not a failure to start
    quoted = ["WARNING:  OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses "
              "init failed (ModuleNotFoundError: No module named 'openai_harmony')"]
    assert recognise(quoted, 0) is None or recognise(quoted, 0).name != "missing_module"


def test_the_engines_own_tree_teardown_reads_as_the_error_before_it():
    lines = ["Traceback (most recent call last):", "ValueError: bad --foo",
             "[t] Received sigquit from a child process. It usually means the child failed.",
             "[t] kill_process_tree called: parent_pid=1, include_parent=True, pid=1"]
    m = recognise(lines, -signal.SIGKILL, oom_kills=0)
    assert (m.name, m.line) == ("error", "ValueError: bad --foo")
    bare = recognise(lines[2:], -signal.SIGKILL, oom_kills=0)
    assert bare.name == "error" and "sigquit" in bare.line


def test_read_tail_of_a_large_log(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert read_tail(log, 3) == ["line 99997", "line 99998", "line 99999"]
    assert read_tail(tmp_path / "missing.log", 3) == []
