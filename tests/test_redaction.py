"""Redaction, round three (issue 40): linear time on hostile text, secret names by shape,
secrets behind kvbench's own --engine-arg, JSON and header values, and remembered secrets in
any spelling."""

from __future__ import annotations

import base64

import pytest

from kvbench import redaction
from kvbench.redaction import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_json,
    redact_text,
    remember_secret,
)

SECRET = "Zq8-hostile-secret-Kp2"


@pytest.fixture(autouse=True)
def _fresh_memory():
    redaction._forget_all()
    yield
    redaction._forget_all()


# Runs of what each pattern starts with: a pattern that backtracks over such a run at every
# position is quadratic (the URL pattern was: 80,000 characters took 4.75 s in `validate`).
HOSTILE = ["a", "a1-", "sk-", "eyJ", "hooks", "a://b:", "?key=", "api_key=", "key:\"",
           "--api-key ", "authorization: bearer ", "X-Api-Key: ", "a=", "http://"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run", HOSTILE)
def test_redaction_is_linear_on_a_megabyte_of_hostile_text(run):
    # a quadratic pattern needs hours for this; a linear one well under a second (the
    # generous timeout is the only clock here, so a slow machine cannot fail it)
    text = run * (1_000_000 // len(run))
    assert len(redact_text(text)) > 0


@pytest.mark.parametrize("name", ["PRIVATE_KEY_PEM", "X_TOKEN_LIST", "MY_API_CRED",
                                  "SERVICE_CREDS", "GPG_PASSPHRASE", "TLS_PRIVATE_KEY",
                                  "API_KEYS", "HF_TOKEN_B64"])
def test_secret_names_by_shape(name):
    assert is_secret_name(name)
    assert redact_env({name: SECRET}) == {name: REDACTED}


@pytest.mark.parametrize("name", ["SSL_KEY_FILE", "SGLANG_SIMULATE_ACC_TOKEN_MODE",
                                  "AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID",
                                  "MAX_NUM_BATCHED_TOKENS", "TOKENIZER_MODE", "KEY_PATH",
                                  "--config-keys", "--config-key", "ROUTING_KEY", "SORT_KEY"])
def test_configuration_names_stay_readable(name):
    assert not is_secret_name(name)


def test_config_keys_on_a_command_line_are_not_remembered_as_secrets():
    """Issue 37: the results lock redacts kvbench's own argv; `--config-keys K` was hidden and
    K remembered, so the job.json and result.json of every job named its key `<redacted>`."""
    key = "qwen3.5-bf16-h200-sglang-agentic-mtp"
    assert redact_argv(["run", "--config-keys", key, "--api-key", SECRET]) == [
        "run", "--config-keys", key, "--api-key", REDACTED]
    assert redact_json({"config_key": key}) == {"config_key": key}


@pytest.mark.parametrize("argv", [
    ["run", "r.yaml", "--engine-arg", "--hf-token", "--engine-arg", SECRET],
    ["run", "r.yaml", "--engine-arg", f"--admin-api-key {SECRET}"],
    ["run", "r.yaml", f"--engine-arg=--api-key={SECRET}"],
    ["--api-key", "--api-key", SECRET],
    ["--engine-arg", "--api-key", "--engine-arg", "--api-key", "--engine-arg", SECRET],
    ["--engine-arg", f"--kv-transfer-config '{{\"api_key\": \"{SECRET}\"}}'"],
    ["--engine-arg", f"--header 'X-Api-Key: {SECRET}'"],
])
def test_secrets_behind_engine_args_and_repeated_flags(argv):
    out = redact_argv(argv)
    assert SECRET not in " ".join(out), out
    assert len(out) == len(argv)  # one token for one token: the record still replays


def test_engine_args_without_secrets_are_kept_verbatim():
    argv = ["run", "r.yaml", "--engine-arg", "--watchdog-timeout 3600", "--engine-arg",
            "--kv-transfer-config '{\"kv_connector\": \"LMCacheConnectorV1\"}'"]
    assert redact_argv(argv) == argv


@pytest.mark.parametrize("text", [
    f'{{"api_key": "{SECRET}", "max_tokens": 5}}',
    f"X-Api-Key: {SECRET}",
    f"hf_token={SECRET}",
    f"ServerArgs(admin_api_key='{SECRET}', port=30000)",
])
def test_keyed_secrets_in_json_headers_and_assignments(text):
    out = redact_text(text)
    assert SECRET not in out and REDACTED in out


@pytest.mark.parametrize("text", [
    "unique offloaded tokens = per-rank bytes / bytes per token",
    '{"max_tokens": 5, "token": null, "input_token": 1234}',
    "routing key: none",
])
def test_prose_counts_and_empty_values_are_not_secrets(text):
    assert redact_text(text) == text


def test_a_remembered_secret_is_hidden_in_every_spelling():
    remember_secret(SECRET)
    raw = SECRET.encode()
    for spelt in (SECRET, SECRET[::-1], base64.b64encode(raw).decode(), raw.hex(),
                  base64.urlsafe_b64encode(raw).decode().rstrip("=")):
        assert spelt not in redact_text(f"the server said {spelt}!")


def test_a_value_hidden_by_name_is_remembered_for_logs_and_json():
    redact_env({"MY_SERVICE_TOKEN": SECRET})  # as the launch writes env.json
    assert SECRET not in redact_text(f"INFO serving with token {SECRET[::-1]}")
    assert SECRET not in str(redact_json({"reason": f"boom {SECRET}"}))


def test_short_values_are_not_remembered():
    remember_secret("abc")  # would redact every word that holds it
    assert redact_text("abcdef") == "abcdef"
