#!/usr/bin/env python3
"""Stand-in for every program an InferenceX agentic launcher starts or probes.

`record.py` writes one two-line shell wrapper per program name (python3, vllm, trtllm-serve,
mpirun, vllm-router, mooncake_master, lmcache, hf, curl, nvidia-smi, ...) into a directory put
first on the launcher's PATH; each runs `$ORACLE_PYTHON stub.py NAME ARGS...`. The name decides
what it does:

- a server program (the engine, a router, the Mooncake master, an LMCache server) writes its
  argv, its environment and the contents of every file it was handed to
  `$ORACLE_DIR/calls.jsonl`, then stays alive (the launcher waits on its PID) until the
  recorder ends the launcher's process group;
- the replay client (`aiperf profile`) writes its argv too and ends the process group: by
  then every server of the row has been started;
- downloads, GPU/RDMA probes, container patches, package installs and sleeps succeed at once
  and print what the launcher parses (an idle GPU, a staged checkpoint, a large /dev/shm).

It runs under the real interpreter named in ORACLE_PYTHON, never under the stub `python3`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

SERVER_MODULES = ("sglang.launch_server", "sglang_router.launch_router", "vllm.entrypoints",
                  "atom.entrypoints", "lmcache", "mooncake")
SERVER_PROGRAMS = {"vllm", "trtllm-serve", "vllm-router", "mooncake_master", "lmcache",
                   "lmcache_server", "mooncake_http_metadata_server"}
CHECKPOINT_FILES = {"config.json": "{}", "tokenizer_config.json": "{}", "tokenizer.json": "{}",
                    "model.safetensors.index.json":
                        json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}),
                    "model-00001-of-00001.safetensors": ""}
MAX_FILE_BYTES = 1 << 20
# in a stdin script or its arguments: it edits the engine package inside the image, not
# this host's
ENGINE_SOURCE_MARKS = ("/sgl-workspace/", "find_spec(", "site-packages/")


def _oracle() -> Path:
    return Path(os.environ["ORACLE_DIR"])


def _files_named(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """Text files the program was handed, by argv (`--config x.yaml`, `--flag=x`) or env value."""
    candidates = []
    for arg in argv[1:]:
        candidates.append(arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg)
    candidates += env.values()
    out: dict[str, str] = {}
    for value in candidates:
        if not value or len(value) > 4096 or "\n" in value or value.startswith("-"):
            continue  # a relative name counts too: the TRT-LLM launchers pass `--config ser.yaml`
        path = Path(value)
        try:
            if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                out[str(path.resolve())] = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
    return out


def _record(kind: str, argv: list[str], extra_files: dict[str, str] | None = None) -> None:
    env = dict(os.environ)
    entry = {"kind": kind, "argv": argv, "env": env, "cwd": os.getcwd(),
             "files": {**_files_named(argv, env), **(extra_files or {})},
             "time_ns": time.monotonic_ns()}
    with open(_oracle() / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def _serve_forever(argv: list[str]) -> None:
    _record("server", argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # a launcher may start its server in a session of its own (setsid), out of reach of the
    # recorder's process-group kill: leave once the recorder has removed the row's sandbox
    while _oracle().exists():
        time.sleep(1)


def _real_python(argv: list[str]) -> None:
    real = os.environ["ORACLE_PYTHON"]
    os.execv(real, [real, *argv[1:]])


def _python(argv: list[str]) -> None:
    args = argv[1:]
    flags = [a for a in args if a in ("-u", "-B", "-E", "-s")]
    rest = args[len(flags):]
    if rest[:1] == ["-m"] and len(rest) > 1:
        module = rest[1]
        if module.startswith(SERVER_MODULES):
            _serve_forever(argv)
        if module == "pip":
            _record("install", argv)
            return
        if module == "py_compile":
            return
        if module == "venv":  # a client venv: its python3 and pip are these stubs again
            _venv(Path(rest[-1]))
            return
        _real_python(argv)
    if rest[:1] == ["-c"]:
        # the launchers' `python3 -c` lines are import checks of the image's packages
        _record("image-check", argv)
        return
    if rest and rest[0].endswith(".py") and "/agentic/" in rest[0]:
        _record("container-patch", argv)  # patches the image's engine source
        return
    if rest[:1] == ["-"]:  # a script on stdin (a heredoc)
        script = sys.stdin.read()
        if any(mark in text for mark in ENGINE_SOURCE_MARKS for text in (script, *rest[1:])):
            # it edits the image's engine package (seed 000's sglang#34560 fix, the branches
            # `kvbench recipe mirror` writes): recorded with its text, not run on this host
            _record("container-patch", argv, {"<stdin>": script})
            return
        real = os.environ["ORACLE_PYTHON"]
        os.execv(real, [real, *flags, "-c", script, *rest[1:]])
    _real_python(argv)


def stage_checkpoint(target: Path) -> None:
    """A directory every launcher's checkpoint check accepts: config, tokenizer, shard index
    and the shard it names."""
    target.mkdir(parents=True, exist_ok=True)
    for name, text in CHECKPOINT_FILES.items():
        (target / name).write_text(text)


def _hf(argv: list[str]) -> None:
    """`hf download REPO [--local-dir D]`: a staged checkpoint, its path on stdout."""
    if "--local-dir" in argv:
        target = Path(argv[argv.index("--local-dir") + 1])
    else:
        repo = next((a for a in argv[2:] if not a.startswith("-")), "model")
        target = Path(os.environ["ORACLE_SANDBOX"]) / "hf-downloads" / repo.replace("/", "--")
    if "--repo-type" not in argv:
        stage_checkpoint(target)
    print(target)


def _uv(argv: list[str]) -> None:
    """`uv venv DIR` makes the client venv: `aiperf` and `hf` in it are stubs too."""
    if argv[1:2] == ["venv"]:
        _venv(Path(argv[-1]), ("aiperf", "hf", "python"))


def _venv(venv: Path, names: tuple[str, ...] = ("python3", "python", "pip", "pip3")) -> None:
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for name in names:
        link = venv / "bin" / name
        target = Path(os.environ["ORACLE_STUBS"]) / name
        if os.path.islink(link) and os.readlink(link) == str(target):
            continue
        tmp = link.with_name(f".{name}.{os.getpid()}")
        tmp.symlink_to(target)
        os.replace(tmp, link)  # a venv of an earlier recording links to its own stubs


def _aiperf(argv: list[str]) -> None:
    if argv[1:2] != ["profile"]:
        return
    _record("replay", argv)
    (_oracle() / "replay-reached").write_text("")
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _mpirun(argv: list[str]) -> None:
    stubs = set(os.listdir(os.environ["ORACLE_STUBS"]))
    i = next(i for i, a in enumerate(argv) if i and os.path.basename(a) in stubs)
    _record("launcher-wrapper", argv[:i])
    os.execvp(argv[i], argv[i:])


def _df(argv: list[str]) -> None:
    if "/dev/shm" in argv:
        print("Avail\n 4096G")  # the host's /dev/shm: room for every row's pool
        return
    os.execv("/bin/df", argv)


def _bash(argv: list[str]) -> None:
    if len(argv) > 1 and argv[1].endswith("apply_k3_container_patches.sh"):
        _record("container-patch", argv)
        return
    os.execv("/bin/bash", ["/bin/bash", *argv[1:]])


def _curl(argv: list[str]) -> None:
    """A readiness poll succeeds once a recorded server names the URL's port (else exit 7,
    connection refused, and the launcher polls again): the launcher must not move on to the
    next program, or the replay, before this one's recorder has written its call."""
    import re
    from urllib.parse import urlsplit

    if "-o" in argv:
        Path(argv[argv.index("-o") + 1]).write_text("")
    ports = {urlsplit(a).port for a in argv if a.startswith("http")} - {None}
    if not ports:
        return
    calls = _oracle() / "calls.jsonl"
    text = calls.read_text() if calls.exists() else ""
    servers = [json.loads(line)["argv"] for line in text.splitlines()
               if '"kind": "server"' in line]
    for port in ports:
        if not any(re.search(rf"(^|[^0-9]){port}([^0-9]|$)", " ".join(a)) for a in servers):
            sys.exit(7)


def _rocm_smi(argv: list[str]) -> None:
    if "--showmemuse" in argv:
        print("GPU[0]\t\t: GPU Memory Allocated (VRAM%): 0")
    elif "--showfw" in argv:
        print("GPU[0]\t\t: MEC firmware version: 177")


def _install(argv: list[str]) -> None:
    _record("install", argv)


def _container_patch(argv: list[str]) -> None:  # `sed -i` on the image's engine source
    _record("container-patch", argv[1:])


HANDLERS = {"python3": _python, "python": _python, "hf": _hf, "huggingface-cli": _hf,
            "uv": _uv, "aiperf": _aiperf, "mpirun": _mpirun, "df": _df, "bash": _bash,
            "curl": _curl, "rocm-smi": _rocm_smi, "container-patch": _container_patch,
            "pip": _install, "pip3": _install, "apt-get": _install,
            **dict.fromkeys(SERVER_PROGRAMS, _serve_forever)}


def main() -> None:
    argv = sys.argv[1:]
    # nvidia-smi, amd-smi, ibv_devinfo, flock, sleep, git have no handler: they succeed
    HANDLERS.get(argv[0], lambda _: None)(argv)


if __name__ == "__main__":
    main()
