"""A small reader for the two trace formats the simulator replays.

- kv-cache-tester / weka JSON (`.json`, `.json.gz`, one session per file): `block_size`,
  `hash_id_scope`, `requests[{t, in, out, hash_ids, think_time}]`; subagent entries with
  nested `requests` are flattened into the session in order.
- Mooncake JSONL (`.jsonl`, `.jsonl.gz`): `{timestamp (ms), input_length, output_length,
  hash_ids}` with 512-token blocks; each line is its own session.

Hash ids are scoped per file (a `global` scope shares them across files), so keys are
namespaced by file index."""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

from kvbench.errors import WorkloadError

MOONCAKE_BLOCK_TOKENS = 512
_NAMESPACE = 1 << 40


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_s: float  # open-loop send time
    think_s: float  # closed-loop gap after the session's previous request finished
    input_tokens: int
    output_tokens: int
    keys: list[int]
    page_tokens: int


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    page_tokens: int
    sessions: list[list[TraceRequest]]

    @property
    def num_requests(self) -> int:
        return sum(len(s) for s in self.sessions)


def _open_text(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt") as f:
                return f.read()
        return path.read_text()
    except OSError as e:
        raise WorkloadError(f"cannot read trace {path}: {e}") from e


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; a directory stands for its *.json[l][.gz] files, sorted."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith(
                (".json", ".json.gz", ".jsonl", ".jsonl.gz")))
            if not found:
                raise WorkloadError(f"trace directory {p} holds no .json/.jsonl(.gz) files")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise WorkloadError(f"trace {p} does not exist")
    return out


def _request(arrival: float, think: float, n_in: int, n_out: int, ids: list, page: int,
             offset: int, where: str) -> TraceRequest:
    if n_in < 1 or n_out < 0:
        raise WorkloadError(f"{where}: input tokens must be >= 1 and output >= 0, got "
                            f"{n_in} and {n_out}")
    ids = ids[: math.ceil(n_in / page)]  # pages past the input hold nothing
    return TraceRequest(arrival, think, n_in, max(1, n_out), [offset + int(h) for h in ids], page)


def load_trace(path: Path, index: int = 0) -> Trace:
    text = _open_text(path)
    name = path.name.split(".")[0]
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        offset = index * _NAMESPACE
        sessions = []
        for i, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                sessions.append([_request(
                    r["timestamp"] / 1000.0, 0.0, int(r["input_length"]),
                    int(r["output_length"]), r["hash_ids"], MOONCAKE_BLOCK_TOKENS, offset,
                    f"{path}:{i + 1}")])
            except (KeyError, TypeError, ValueError) as e:
                raise WorkloadError(f"{path}:{i + 1}: not a Mooncake trace row "
                                    f"(timestamp, input_length, output_length, hash_ids): {e}"
                                    ) from e
        return Trace(name, MOONCAKE_BLOCK_TOKENS, sessions)
    try:
        doc = json.loads(text)
        page = int(doc["block_size"])
        offset = 0 if doc.get("hash_id_scope") == "global" else index * _NAMESPACE
        flat: list[dict] = []
        for r in doc["requests"]:
            flat.extend(r.get("requests", [r]))
        session = [
            _request(float(r.get("t", 0.0)), float(r.get("think_time", 0.0) or 0.0),
                     int(r["in"]), int(r["out"]), r["hash_ids"], page, offset,
                     f"{path}: requests[{i}]")
            for i, r in enumerate(flat)
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise WorkloadError(f"{path}: not a kv-cache-tester trace (block_size, requests[{{t, "
                            f"in, out, hash_ids}}]): {e}") from e
    return Trace(doc.get("id", name), page, [session])


def load_traces(paths: list[Path]) -> list[Trace]:
    return [load_trace(p, i) for i, p in enumerate(expand_paths(paths))]
