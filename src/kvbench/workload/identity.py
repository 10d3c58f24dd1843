"""Which corpus a run replays: its name and a fingerprint of its content, recorded in every
result, and whether it is one an InferenceX AgentX submission may replay.

The harness stamps a submission only for its pinned corpora (agentx-harness 1.0.12
aiperf/common/scenario/validator.py:421-500 `_apply_require_loader`: "Local weka_trace only
proves format compatibility — any directory of Weka-shaped JSON passes — so it cannot stamp
submission_valid=true"). kvbench reads traces from files, so it pins by content: the
fingerprint of what was loaded must equal the one recorded for the named corpus in
data/agentx-corpora.yaml. A bundled, local or synthetic workload is a sound kvbench run and
never a submission."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from kvbench.workload.blocks import Blocks
from kvbench.workload.session import Session

CORPORA = Path(__file__).resolve().parent / "data" / "agentx-corpora.yaml"
# the HuggingFace cache names a dataset's snapshot directory datasets--<org>--<name>
_HF_CACHE = re.compile(r"datasets--([^/\\]+?)--([^/\\]+)")


@lru_cache(maxsize=1)
def agentx_corpora() -> dict[str, dict]:
    from kvbench.yamldoc import load_file

    return load_file(CORPORA, "AgentX corpora")["corpora"]


def fingerprint(sessions: list[Session]) -> str:
    """sha256 over what is replayed, in order: every session's id, hash scope and block size,
    each turn's tokens, hash ids, times and agent, and its subagents' structure. Equal for
    the same traces however they are stored (JSON or JSONL, gzipped or not)."""
    h = hashlib.sha256()
    for s in sessions:
        runs: dict[int, tuple[bytes, int]] = {}
        h.update(f"S|{s.session_id}|{s.namespace == 'global'}|"
                 f"{s.meta.get('block_size')}\n".encode())
        for t in s.turns:
            h.update(f"T|{t.input_tokens}|{t.output_tokens}|{t.block_tokens}|{t.t_s!r}|"
                     f"{t.think_time_s!r}|{t.agent}|".encode())
            _hash_ids(h, t.hash_ids, runs)
            h.update(b"\n")
        for b in s.tree():
            h.update(f"B|{b.agent}|{b.first}|{b.count}|{b.spawn}|{b.join}|"
                     f"{b.delay_s!r}\n".encode())
    return h.hexdigest()


def _hash_ids(h, ids: Sequence[int], runs: dict[int, tuple[bytes, int]]) -> None:
    """Feed `h` the ids as decimal text joined by commas. Runs of ids (workload/blocks.py)
    come from `runs`, each run's text kept by its first id and extended as its session's
    context grows: the turns of a session repeat their context, so each id is written out
    once a session, not once a turn (1,024 synthetic sessions: 8.7 s to 0.8 s)."""
    if not isinstance(ids, Blocks) or any(a < 0 for a, _ in ids.runs):
        h.update(",".join(map(str, ids)).encode())
        return
    sep = b""
    for a, b in ids.runs:
        text, end = runs.get(a, (b"", a))
        if end < b:  # the run grew: its new ids appended
            more = ",".join(map(str, range(end, b))).encode()
            text = text + b"," + more if text else more
            runs[a] = (text, b)
        h.update(sep)
        h.update(memoryview(text)[:_run_chars(a, b)] if end > b else text)
        sep = b","


def _run_chars(a: int, b: int) -> int:
    """len(",".join(map(str, range(a, b)))) for 0 <= a < b, counted by digits."""
    total, x = b - a - 1, a
    while x < b:
        digits = len(str(x))
        top = min(b, 10 ** digits)
        total += (top - x) * digits
        x = top
    return total


def corpus_name(paths: list[Path] | None, declared: str | None) -> str | None:
    """The corpus the traces claim to be: the declared name, else a HuggingFace cache path's
    dataset matched to a known corpus, else None (bundled or local traces)."""
    if declared:
        return declared
    for p in paths or ():
        m = _HF_CACHE.search(str(Path(p).resolve()))
        if m:
            repo = f"{m.group(1)}/{m.group(2)}"
            for name, c in agentx_corpora().items():
                if c["dataset"] == repo:
                    return name
    return None


def identify(paths: list[Path] | None, sessions: list[Session],
             declared: str | None = None) -> dict:
    """{name, dataset, fingerprint, sessions, agentx, reason}: `agentx` is true only for a
    pinned corpus whose fingerprint matches what was loaded."""
    digest = fingerprint(sessions)
    name = "synthetic" if paths is None else corpus_name(paths, declared)
    known = agentx_corpora().get(name or "")
    out = {"name": name, "dataset": known["dataset"] if known else None,
           "fingerprint": digest, "sessions": len(sessions), "agentx": False}
    if paths is None:
        out["reason"] = "synthetic sessions, not an AgentX corpus"
    elif known is None:
        out["reason"] = (f"corpus {name!r} is not one of the AgentX corpora" if name else
                         "local traces of no named corpus (pass --corpus NAME for an "
                         "AgentX one)")
    elif not known.get("fingerprint"):
        out["reason"] = (f"no fingerprint is pinned for {name} (workload/data/"
                         "agentx-corpora.yaml): the traces cannot be verified to be it")
    elif known["fingerprint"] != digest:
        out["reason"] = (f"the traces' fingerprint {digest[:16]}... is not {name}'s "
                         f"{known['fingerprint'][:16]}...")
    else:
        out["agentx"], out["reason"] = True, f"{name} ({known['dataset']}), fingerprint verified"
    return out
