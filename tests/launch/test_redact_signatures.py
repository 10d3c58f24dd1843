"""Secret redaction and failure-signature recognition."""

from __future__ import annotations

import signal

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
    assert recognise(["ok"], -signal.SIGKILL).name == "host_oom"
    assert recognise(["fine"], 1, oom_kills=1).name == "host_oom"
    assert recognise(["x", "CUDA error: out of memory", "NCCL error"], 1).name == "cuda_oom"


def test_read_tail_of_a_large_log(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert read_tail(log, 3) == ["line 99997", "line 99998", "line 99999"]
    assert read_tail(tmp_path / "missing.log", 3) == []
