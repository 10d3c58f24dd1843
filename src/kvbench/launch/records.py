"""command.json and env.json: what was run, replayable by hand, with secrets redacted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvbench.files import write_json_atomic
from kvbench.launch.redact import redact_argv, redact_env


def command_record(argv: Sequence[str], env: Mapping[str, str], cwd: Path,
                   ready_url: str | None = None, patches: Sequence[dict] | None = None
                   ) -> dict:
    """argv, cwd and the environment kvbench adds (redacted), plus a one-line shell form."""
    safe_env = redact_env(env)
    safe_argv = redact_argv(argv)
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(safe_env.items()))
    shell = f"cd {shlex.quote(str(cwd))} && " + (f"env {assigns} " if assigns else "")
    return {
        "argv": safe_argv,
        "cwd": str(cwd),
        "env": safe_env,
        "shell": shell + shlex.join(safe_argv),
        "ready_url": ready_url,
        # engine-image patches checked before the start, with what each one did
        **({"patches": list(patches)} if patches else {}),
    }


def write_command(path: Path, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
                  ready_url: str | None = None, patches: Sequence[dict] | None = None
                  ) -> Path:
    return write_json_atomic(path, command_record(argv, env, cwd, ready_url, patches))


def write_env(path: Path, env: Mapping[str, str]) -> Path:
    return write_json_atomic(path, redact_env(env))
