"""The physical range of every quantity kvbench takes, stated once with its reason.

Numbers reach kvbench through many doors: recipe fields, command-line options, job files,
trace fields, result files read back and server responses. A value outside what hardware and
workloads can be (a host pool of 10^6 GB per rank, a turn of 10^9 tokens, a time scale of
1e-300) is a typo or a hostile file, and taken as given it exhausts memory, hangs a loop or
reaches `int()` as an infinity. Each door checks its values against one `Range` here and
refuses the value in one line naming the field, the value and the range; the reason says
why the range is what it is. `tests/test_bounds.py` holds every numeric option of every
command to a range in `OPTION_RANGES` (or a stated exemption), so a new option cannot slip
past the model.

Strings have one bound too: `MAX_TEXT_CHARS` for any user-written value (a recipe field, a
changelog description, a model id), and `MAX_LABEL_CHARS` for what a server writes into a
label; each pattern kvbench runs over text is linear in its length (redaction.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvbench.errors import KvbenchError, shown
from kvbench.units import MAX_REPLAY_WORKERS, MAX_SESSION_LANES

# Longest user-written string value: a chat template or a JSON engine argument fits many
# times over; a multi-MB value is a planted file, not configuration.
MAX_TEXT_CHARS = 65_536
# A model id on the Hugging Face Hub is at most 96 characters (`{org}/{name}`, each at most
# 96 by the Hub's repo-name rule); a local path at most PATH_MAX (4,096 on Linux).
MAX_MODEL_ID_CHARS = 4_096
# A /metrics label value kept in a scrape: engines write model names, paths and versions.
MAX_LABEL_CHARS = 1_024


@dataclass(frozen=True, slots=True)
class Range:
    """A quantity's physical range: `lo` to `hi` in `unit` (`lo_open`: above `lo`, not at
    it), integers only when `integer`; `why` says where the bounds come from."""

    lo: float
    hi: float
    unit: str
    why: str
    integer: bool = False
    lo_open: bool = False

    def allowed(self) -> str:
        lo = f"above {_num(self.lo)}" if self.lo_open else _num(self.lo)
        kind = "an integer" if self.integer else "a number"
        return f"{kind} {lo} to {_num(self.hi)}{f' {self.unit}' if self.unit else ''}"

    def problem(self, value: Any) -> str | None:
        """Why `value` is not in the range, or None when it is."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"not a number (allowed: {self.allowed()})"
        if isinstance(value, float) and not math.isfinite(value):
            return f"not a finite number (allowed: {self.allowed()})"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return f"not an integer (allowed: {self.allowed()})"
        low = value <= self.lo if self.lo_open else value < self.lo
        if low or value > self.hi:
            return f"out of range (allowed: {self.allowed()}: {self.why})"
        return None

    def check(self, value: Any, field: str, error: type[KvbenchError] = KvbenchError) -> Any:
        """`value`, or `error` naming `field`, the value and the range."""
        problem = self.problem(value)
        if problem is not None:
            raise error(f"{field} {shown(value)}: {problem}")
        return int(value) if self.integer else value

    def validator(self) -> Any:
        """A pydantic validator for `Annotated[int, RANGE.validator()]` fields: the same
        message through the model's field path. It sees the value as given, before pydantic's
        lax conversion would read `true` as 1 or "5" as 5 (neither is a count)."""
        from pydantic import BeforeValidator

        def check(value: Any) -> Any:
            if value is None:
                return value
            problem = self.problem(value)
            if problem is not None:
                raise ValueError(problem)
            return value

        return BeforeValidator(check)


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"


# ---- the quantities ------------------------------------------------------------------------
_CONTEXT = ("the longest context a served model offers is 10M tokens (Llama 4 Scout); 2^24 "
            "keeps every count within int32")
TOKENS = Range(0, 1 << 24, "tokens", _CONTEXT, integer=True)
CONTEXT_TOKENS = Range(1, 1 << 24, "tokens", _CONTEXT, integer=True)
OUTPUT_TOKENS = Range(1, 1 << 20, "tokens", "no served model generates more than ~256K tokens "
                      "in one response", integer=True)
POOL_TOKENS = Range(0, 1 << 40, "tokens", "a KV pool of 2^40 tokens is petabytes even at one "
                    "byte per token", integer=True)
PAGE_TOKENS = Range(1, 1 << 16, "tokens", "engines page KV in blocks of 1 to 1,024 tokens; "
                    "trace hash blocks are 64 to 512", integer=True)
DRAFT_TOKENS = Range(1, 64, "tokens", "speculative decoding verifies at most a few dozen draft "
                     "tokens a step (SGLang --speculative-num-draft-tokens, vLLM "
                     "num_speculative_tokens)", integer=True)
ACCEPT_LENGTH = Range(1, 65, "tokens", "an accepted length is 1 plus at most the draft tokens")
CHARS_PER_TOKEN = Range(0, 64, "characters", "tokenizers average 3-5 characters a token; 0 "
                        "means one token per word", integer=True)

LANES = Range(1, MAX_SESSION_LANES, "session lanes", "4x the largest concurrency in the "
              "real master configs (16,384)", integer=True)
SESSIONS = Range(1, 1_000_000, "sessions", "the AgentX corpus has 393 traces; a million is "
                 "past any corpus a run replays", integer=True)
REQUESTS = Range(1, 10_000_000, "requests", "ten million is a day at over 100 requests a "
                 "second, longer than any benchmark run", integer=True)
WARMUP_REQUESTS = Range(0, 1_000_000, "requests", "warm-up is 10 requests a lane (AgentX); a "
                        "million is past any", integer=True)
REPEATS = Range(1, 1_000, "repeats", "a run repeated a thousand times takes months on one "
                "node", integer=True)
REPEAT_INDEX = Range(0, REPEATS.hi - 1, "", "repeats are numbered from 0 in job files and "
                     "results: " + REPEATS.why, integer=True)
RUNNING_REQUESTS = Range(1, 1 << 20, "requests", "engines cap running requests in the "
                         "thousands", integer=True)
RECV_INTERVAL = Range(1, 10_000, "decode steps", "SGLang's scheduler polls for requests every "
                      "few steps (InferenceX's recipes: 10); 10,000 steps are minutes without "
                      "taking a request in", integer=True)
TURNS = Range(1, 100_000, "turns", "the longest Claude Code sessions have hundreds of turns",
              integer=True)
WORKERS = Range(1, MAX_REPLAY_WORKERS, "processes", "more replay processes than the cores "
                "of any one client host is a typo", integer=True)
WORKERS_OR_AUTO = Range(0, MAX_REPLAY_WORKERS, "processes", "0 means one per available core; "
                        "more than the cores of any one host is a typo", integer=True)
JOBS = Range(1, 10_000_000, "jobs", "the full InferenceX sweep has 33,071 rows", integer=True)
GRID_STEPS = Range(1, 1_000, "steps", "a capacity curve reads no more than a few dozen sizes",
                   integer=True)
PARALLELISM = Range(1, 1_024, "GPUs", "the largest scale-up domain shipping is 72 GPUs "
                    "(GB200/GB300 NVL72); 1,024 leaves room for rack-scale systems to come",
                    integer=True)
GPUS = Range(1, 1 << 20, "GPUs", "more GPUs than any cluster has", integer=True)
MODEL_DIM = Range(1, 1 << 20, "", "model dimensions (hidden, intermediate) are at most a few "
                  "tens of thousands", integer=True)
MODEL_HEADS = Range(1, 4_096, "", "attention heads, head dims and layers of real models are "
                    "at most a few hundred", integer=True)
SEED = Range(0, (1 << 32) - 1, "", "numpy's seeds are 32-bit", integer=True)
PORT = Range(1, 65_535, "", "TCP ports", integer=True)
PR_NUMBER = Range(1, 10_000_000, "", "GitHub numbers pull requests from 1; the busiest "
                  "repositories are past 100,000, none past ten million", integer=True)
ARRAY_TASKS = Range(1, 4_000_001, "tasks", "Slurm's MaxArraySize ceiling (slurm.conf(5))",
                    integer=True)

_DAY_S = 86_400.0
DURATION_S = Range(0, 7 * _DAY_S, "s", "a week is longer than any benchmark run",
                   lo_open=True)
TIMEOUT_S = Range(0, 7 * _DAY_S, "s", "a week is longer than any phase of a run", lo_open=True)
INTERVAL_S = Range(0, 3_600, "s", "a sample an hour apart sees nothing of a run", lo_open=True)
GRACE_S = Range(0, 3_600, "s", "an hour is past any drain or shutdown")
IDLE_S = Range(0, _DAY_S, "s", "an idle gap or think time of a day ends any session")
TRACE_TIME_S = Range(0, 366 * _DAY_S, "s", "a trace's times are offsets from its start; the "
                     "recorded Claude Code sessions span half a day, Mooncake's trace an hour")
SERVER_TIME_S = Range(0, _DAY_S, "s", "a request a server took a day over is a hung server, "
                      "not a measurement")
LATENCY_MS = Range(0, _DAY_S * 1_000, "ms", "a latency objective of a day means none",
                   lo_open=True)
TIME_SCALE = Range(1e-3, 1e4, "x", "below 1/1,000 a second of engine time takes 17 minutes; "
                   "above 10,000 the client's clock cannot resolve a token")
RATE_SCALE = Range(0, 1e4, "x", "a multiplier of the trace's own times or think times",
                   lo_open=False)
ARRIVAL_SCALE = Range(0, 1e4, "x", "a multiplier of the trace's own times", lo_open=True)
SESSION_RATE = Range(0, 1e6, "sessions/s", "a million new sessions a second is no workload",
                     lo_open=True)
INTERACTIVITY = Range(0, 1e6, "tokens/s/user", "no engine streams a million tokens a second "
                      "to one user", lo_open=True)

# One node's DRAM: the largest servers ship 32 TB (8 sockets x 4 TB); 65,536 GB leaves room.
# Per rank is at most the node's (a rank on one GPU of the node).
_DRAM = "the largest servers ship 32 TB of DRAM (8 sockets x 4 TB)"
HOST_GB = Range(0, 65_536, "GB", _DRAM)
HOST_GB_PER_RANK = Range(0, 65_536, "GB per rank", _DRAM)
RATIO = Range(0, 1, "", "a share of requests or memory")
BENEFIT = Range(0, 100, "", "a relative change of 100x (10,000%) is past any offload benefit")
SCALE = Range(0, 1_000, "x", "a multiplier of token counts; 1,000x turns a 100K-token "
              "session into one past every context", lo_open=True)

# ---- measurements read back (result files, summaries) ---------------------------------------
MEASURED_MS = Range(0, _DAY_S * 1_000, "ms", "a latency of a day is a hung request, not a "
                    "measurement")
MEASURED_S = Range(0, 7 * _DAY_S, "s", "a week is longer than any benchmark run")
TOKEN_RATE = Range(0, 1e9, "tokens/s", "a billion tokens a second is past any deployment's "
                   "throughput (the largest serve a few million)")
REQUEST_RATE = Range(0, 1e7, "requests/s", "ten million requests a second is past any "
                     "deployment")
TOKEN_TOTAL = Range(0, 2 ** 53, "tokens", "a run's token counts stay exact in a double; 2^53 "
                    "is 10^15 tokens, years of any deployment's output")

# ---- recipe and runners fields -------------------------------------------------------------
WORKER_COUNT = Range(0, 1_024, "workers", "a role has at most one worker per GPU of the largest "
                     "deployment (the real multi-node rows have at most 15)", integer=True)
NODES = Range(0, 1_024, "nodes", "a deployment of a thousand nodes is past any benchmark row "
              "(the real ones take at most 2)", integer=True)
GPUS_PER_NODE = Range(1, 72, "GPUs", "a node's GPUs share one scale-up domain; the largest is "
                      "72 GPUs (GB200/GB300 NVL72), servers have 4 to 16", integer=True)
HOST_MIB = Range(1, HOST_GB.hi * 1_000 ** 3 / 2 ** 20, "MiB", _DRAM, integer=True)

# Every numeric option of every command, by its long name (or "<command> <long name>" where one
# command gives it another meaning). tests/test_bounds.py walks the commands and fails on a
# numeric option missing here.
OPTION_RANGES: dict[str, Range] = {
    "--arrival-scale": ARRIVAL_SCALE, "--block-tokens": PAGE_TOKENS, "--budget-gb": HOST_GB,
    "--chars-per-token": CHARS_PER_TOKEN, "--chunked-prefill-tokens": CONTEXT_TOKENS,
    "--conc": LANES, "--concurrency": LANES, "--context-tokens": CONTEXT_TOKENS,
    "--dp": PARALLELISM,
    "--duration": DURATION_S, "--gpu-tokens": POOL_TOKENS, "--grace": GRACE_S,
    "--head-dim": MODEL_HEADS, "--hidden-size": MODEL_DIM, "--host-cache-gb": HOST_GB,
    "--host-gb": HOST_GB, "--host-headroom-gb": HOST_GB_PER_RANK, "--host-tokens": POOL_TOKENS,
    "--interactivity": INTERACTIVITY, "--intermediate-size": MODEL_DIM,
    "--itl-p99-ms": LATENCY_MS, "--max-conc": LANES, "--max-context-length": CONTEXT_TOKENS,
    "--max-ep": PARALLELISM,
    "--max-failed-ratio": RATIO, "--max-input-tokens": CONTEXT_TOKENS, "--max-jobs": JOBS,
    "--max-parallel": ARRAY_TASKS, "--max-position-embeddings": CONTEXT_TOKENS,
    "--max-requests": REQUESTS, "--max-running-requests": RUNNING_REQUESTS,
    "--max-sessions": SESSIONS, "--max-tokens-cap": OUTPUT_TOKENS, "--max-tp": PARALLELISM,
    "--max-turns": TURNS, "--min-conc": LANES, "--noise": BENEFIT, "--num-gpus": GPUS,
    "--num-heads": MODEL_HEADS, "--num-kv-heads": MODEL_HEADS, "--num-layers": MODEL_HEADS,
    "--page-size": PAGE_TOKENS, "--points": GRID_STEPS, "--port": PORT, "--pr": PR_NUMBER,
    "--ready-timeout": TIMEOUT_S, "--repeat": REPEATS, "--repeats": REPEATS,
    "--replay-timeout": TIMEOUT_S, "--replay-workers": WORKERS, "--request-timeout": TIMEOUT_S,
    "--scheduler-recv-interval": RECV_INTERVAL,
    "--seed": SEED, "--server-gone-after": TIMEOUT_S, "--server-host-gb": HOST_GB,
    "--session-rate": SESSION_RATE, "--sessions": SESSIONS, "--size": HOST_GB_PER_RANK,
    "--slo-e2e-ms": LATENCY_MS, "--slo-tpot-ms": LATENCY_MS, "--slo-ttft-ms": LATENCY_MS,
    "--spec-accept-length": ACCEPT_LENGTH, "--spec-verify-tokens": DRAFT_TOKENS,
    "--step-size": LANES, "--synthetic-scale": SCALE, "--synthetic-sessions": SESSIONS,
    "--system-idle-cap": IDLE_S, "--think-time-cap": IDLE_S, "--think-time-scale": RATE_SCALE,
    "--threshold": BENEFIT, "--time-scale": TIME_SCALE, "--tp": PARALLELISM,
    "--tree-idle-cap": IDLE_S,
    "--ttft-p90-ms": LATENCY_MS, "--warmup-grace": TIMEOUT_S,
    "--warmup-per-lane": WARMUP_REQUESTS, "--warmup-requests": WARMUP_REQUESTS,
    "--workers": WORKERS,
    # an option whose meaning differs in one command: "<command> <option>" wins
    "simulate-jobs --workers": WORKERS_OR_AUTO, "capacity --workers": WORKERS_OR_AUTO,
    "plan --workers": WORKERS_OR_AUTO,
}


def option_range(command: str, option: str) -> Range | None:
    """The range of `option` in `command` (its path, e.g. "changelog check")."""
    return OPTION_RANGES.get(f"{command} {option}".strip(), OPTION_RANGES.get(option))


def check_text(value: str, field: str, limit: int = MAX_TEXT_CHARS,
               error: type[KvbenchError] = KvbenchError) -> str:
    """`value`, or `error` naming `field` when it is longer than `limit` characters."""
    if len(value) > limit:
        raise error(f"{field}: a string of {len(value):,} characters is too long (allowed: "
                    f"at most {limit:,})")
    return value


def long_text(doc: Any, limit: int = MAX_TEXT_CHARS) -> tuple[tuple, int] | None:
    """(path, length) of a string in a JSON- or YAML-shaped `doc` (a key or a value) longer
    than `limit` characters, or None. Each list and mapping is visited once, so a document
    whose aliases share one value many times is walked in its own size."""
    stack: list[tuple[tuple, Any]] = [((), doc)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if len(value) > limit:
                return path, len(value)
            continue
        if not isinstance(value, dict | list) or id(value) in seen:
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and len(key) > limit:
                return (*path, shown(key, 24)), len(key)
            stack.append(((*path, key), item))
    return None


def path_text(path: tuple) -> str:
    """`a.b[0].c`, as messages name a place in a document."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return text or "(top level)"


def text_problem(length: int, limit: int = MAX_TEXT_CHARS) -> str:
    return f"a string of {length:,} characters is too long (allowed: at most {limit:,})"


def check_document_text(doc: Any, where: str, error: type[KvbenchError] = KvbenchError,
                        limit: int = MAX_TEXT_CHARS) -> Any:
    """`doc`, or `error` naming `where` and the path of a string longer than `limit`."""
    found = long_text(doc, limit)
    if found is not None:
        raise error(f"{where}: {path_text(found[0])}: {text_problem(found[1], limit)}")
    return doc
