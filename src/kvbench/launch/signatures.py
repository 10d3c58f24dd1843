"""Recognised start-up failures: a server log and exit status mapped to a named cause with a
hint, so that "it died" becomes "CUDA out of memory: lower --mem-fraction-static"."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    title: str
    hint: str
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Match:
    name: str
    title: str
    hint: str
    line: str  # the log line that matched ("" when inferred from the exit status)


# Order matters: the first signature that matches any line wins, so the specific causes come
# before the generic ones (a model that is missing also makes NCCL workers fail later).
SIGNATURES: tuple[Signature, ...] = (
    Signature(
        # SGLang <= 0.5.17 configures a Qwen3.5 MTP draft with num_nextn_predict_layers set on
        # hf_config only (srt/configs/model_config.py:675-676), so the draft's ModelConfig
        # reads None from the nested text_config (line 1033); the seeds' HiCache + MTP arms
        # then died in the scheduler with this line (seed 000). Fixed by sgl-project/sglang
        # #34560 (0.5.18).
        "hybrid_pool_layer_num", "SGLang Qwen3.5 MTP draft config (sglang#34560)",
        "apply the sglang-34560 patch to the HiCache arms (`kvbench recipe mirror` adds it, "
        "authoring/data/twin_practice.yaml) or run SGLang >= 0.5.18",
        re.compile(r"'HybridLinearKVPool' object has no attribute 'layer_num'"),
    ),
    Signature(
        # A module the engine imports on its start path is absent from the image: SGLang
        # 0.5.17 imports the DSA attention backend, and with it `deep_gemm`, while it captures
        # an EAGLE/MTP draft's CUDA graphs (srt/speculative/eagle_worker_v2.py:417 ->
        # srt/layers/attention/dsa_backend.py:90). Only a traceback's last line counts: the
        # engine's "Ignore import error ... No module named 'x'" notes and warnings that quote
        # a ModuleNotFoundError mid-line are optional features it started without.
        "missing_module", "a Python module the engine needs is not installed",
        "install it in the engine image, or avoid the code path that imports it (SGLang's "
        "draft CUDA-graph capture imports deep_gemm: --disable-cuda-graph, or an image with "
        "deep_gemm)",
        re.compile(r"^\s*(?:ModuleNotFoundError: No module named \S+"
                   r"|ImportError: cannot import name \S+)"),
    ),
    Signature(
        "port_in_use", "port already in use",
        "another server is listening on that port: pick another --port or stop it",
        re.compile(r"address already in use|EADDRINUSE|port \d+ is (?:already )?in use"
                   r"|\[Errno 98\]", re.I),
    ),
    Signature(
        "missing_model", "model not found",
        "check the model id or --model-path, HF_TOKEN for gated repos, and the HF cache",
        re.compile(r"RepositoryNotFoundError|Repository Not Found|GatedRepoError"
                   r"|LocalEntryNotFoundError|is not a local folder and is not a valid model"
                   r"|does not appear to have a file named config\.json"
                   r"|Can't load the configuration of|No such file or directory: .*config\.json"
                   r"|model path .* does not exist", re.I),
    ),
    Signature(
        "cuda_oom", "CUDA out of memory",
        "lower --mem-fraction-static / gpu-memory-utilization, the CUDA-graph batch sizes or "
        "max running requests; HiCache needs GPU headroom for transfer buffers; SGLang's "
        "tokenizer workers reserve up to 1 GiB more for multimodal CUDA IPC after the pools "
        "(srt/utils/cuda_ipc_transport_utils.py; --mm-feature-transport=cpu opts out)",
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA"
                   r"|cudaErrorMemoryAllocation|CUDA error: out of memory|HIP out of memory"
                   r"|hipErrorOutOfMemory|Not enough memory\. Please try to increase "
                   r"--mem-fraction-static", re.I),
    ),
    Signature(
        "host_oom", "host out of memory",
        "the pinned host KV pools exceed the node's memory: reduce the host cache size "
        "(kvbench plan shows the projected footprint)",
        re.compile(r"Out of memory: Killed process|oom-kill|oom_kill|Cannot allocate memory"
                   r"|Not enough host memory|std::bad_alloc|MemoryError", re.I),
    ),
    Signature(
        "nccl_error", "NCCL error",
        "check GPU visibility, NVLink/IB health and NCCL_* variables; rerun with "
        "NCCL_DEBUG=INFO",
        re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError"
                   r"|ncclInvalidUsage|NCCL communicator was aborted|RCCL error", re.I),
    ),
    Signature(
        "watchdog_timeout", "watchdog timeout",
        "a collective or scheduler step hung: raise --watchdog-timeout only if the step is "
        "legitimately slow (long prefills, MTP under load), otherwise look for a hang",
        re.compile(r"watchdog (?:caught|timeout|timed out)|Watchdog caught collective"
                   r"|collective operation timeout|watchdog_timeout|timed out after \d+ ?s"
                   r".*(?:scheduler|collective)", re.I),
    ),
)

_ERRORISH = re.compile(r"(Error|Exception|error:|FATAL|Traceback)")
# SGLang's launcher, SIGQUIT by a child that failed, kills its own process tree, itself last,
# with SIGKILL (srt/entrypoints/engine.py:1649-1653 launch_phase_sigquit_handler ->
# srt/utils/common.py:2066-2090 kill_process_tree: "kill_process_tree called", itself.kill()),
# so its exit status is -9 although no OOM killer ran: the child's error above is the cause.
_SELF_KILL = re.compile(r"Received sigquit from a child process|kill_process_tree called")
_SIGKILL_HINT = ("no OOM kill was counted in this cgroup: something else sent SIGKILL (a "
                 "scheduler or timeout, the OOM killer of a parent cgroup: check `dmesg`)")


def recognise(lines: list[str], returncode: int | None = None,
              oom_kills: int | None = 0) -> Match | None:
    """The first known signature in `lines`; else one inferred from the exit status: SIGKILL
    with the cgroup's oom_kill counter up is the host OOM killer, SIGKILL with it at 0 (or
    unreadable, None) is not, and SIGKILL after the engine's own tree teardown is the error
    the log shows before it."""
    for sig in SIGNATURES:
        for line in lines:
            if sig.pattern.search(line):
                return Match(sig.name, sig.title, sig.hint, line.strip())
    if oom_kills:
        host = next(s for s in SIGNATURES if s.name == "host_oom")
        why = f"killed by SIGKILL (cgroup oom_kill events: {oom_kills})"
        return Match(host.name, host.title, host.hint + "; check `dmesg` for the OOM killer",
                     why)
    self_killed = any(_SELF_KILL.search(line) for line in lines)
    if returncode == -signal.SIGKILL and not self_killed:
        counted = ("the cgroup's oom_kill counter is unreadable" if oom_kills is None
                   else "cgroup oom_kill events: 0")
        return Match("sigkill", "killed by SIGKILL", _SIGKILL_HINT,
                     f"killed by SIGKILL ({counted})")
    for line in reversed(lines):
        if _ERRORISH.search(line):
            return Match("error", "error", "see the log tail", line.strip())
    if self_killed:
        line = next(x for x in lines if _SELF_KILL.search(x))
        return Match("error", "the engine stopped after a child process failed",
                     "see the log above its teardown", line.strip())
    return None


def cgroup_oom_kills() -> int | None:
    """This cgroup's oom_kill counter (cgroup v2), None when unreadable."""
    try:
        with open("/sys/fs/cgroup/memory.events") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None
