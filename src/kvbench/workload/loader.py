"""Load traces: a file or a directory, plain or gzipped, JSON (one session) or JSONL (one
session or one Mooncake row a line). The format is recognised per record."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from kvbench.errors import WorkloadError, shown
from kvbench.files import read_bounded
from kvbench.redaction import redacted_id
from kvbench.units import GiB
from kvbench.workload import mooncake, weka
from kvbench.workload.session import Session, Turn

SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")


def trace_files(paths: Sequence[Path | str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
            if not found:
                raise WorkloadError(
                    f"{path}: no trace files in the directory",
                    hint=f"trace files end with one of {', '.join(SUFFIXES)}",
                )
            files.extend(found)
        elif path.exists():
            files.append(path)  # a device or FIFO is refused by name when read
        else:
            raise WorkloadError(f"{path}: no such trace file or directory")
    return files


# A trace is read whole (its sessions are replayed in order): 1 GiB, decompressed, is far past
# the real ones (the bundled Claude Code sessions are 1.9 MB gzipped, the Mooncake
# conversation trace 0.5 MB) and still fits beside an engine on a laptop.
MAX_TRACE_BYTES = GiB


def _gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress every gzip member, refusing output past MAX_TRACE_BYTES (a gzip bomb)."""
    out = bytearray()
    while raw:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(raw, MAX_TRACE_BYTES + 1 - len(out))
        if len(out) > MAX_TRACE_BYTES or d.unconsumed_tail:
            raise WorkloadError(f"{path}: decompresses to more than {MAX_TRACE_BYTES:,} bytes "
                                "(at most that for a trace)", hint="split the trace into files")
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        raw = d.unused_data.lstrip(b"\x00")
    return bytes(out)


def _read_text(path: Path) -> bytes:
    raw = read_bounded(path, MAX_TRACE_BYTES, "trace", WorkloadError)
    try:
        return _gunzip(raw, path) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, zlib.error) as e:
        raise WorkloadError(f"{path}: cannot read trace: {e}",
                            hint="a truncated or corrupt .gz file; download it again") from e


def _records(path: Path) -> Iterator[tuple[object, str]]:
    data = _read_text(path)
    stripped = data.lstrip()
    if stripped.startswith(b"{") and b"\n{" not in stripped.rstrip():
        try:
            yield orjson.loads(data), f"{path}:1"
            return
        except orjson.JSONDecodeError:
            pass  # a JSONL file with one long line still fails below with its line number
    if stripped.startswith(b"[") :
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise WorkloadError(f"{path}: invalid JSON: {e}") from e
        for i, item in enumerate(items):
            yield item, f"{path}:[{i}]"
        return
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield orjson.loads(line), f"{path}:{lineno}"
        except orjson.JSONDecodeError as e:
            raise WorkloadError(f"{path}:{lineno}: invalid JSON: {e}") from e


@dataclass(frozen=True, slots=True)
class TraceFile:
    """One trace file, validated: its kv-cache-tester sessions and its Mooncake rows
    (`(t_s, turn, where)`, not yet chained). Replay and `simulate` both read files this way."""

    path: Path
    sessions: list[Session]
    rows: list[tuple[float, Turn, str]]


def read_trace_file(path: Path, split_chains: bool = True) -> TraceFile:
    """Parse and validate every record of one file; an empty file is an error.
    `split_chains`: see `weka.parse_session`."""
    sessions: list[Session] = []
    rows: list[tuple[float, Turn, str]] = []
    for obj, where in _records(path):
        if isinstance(obj, dict) and "requests" in obj:
            sessions.append(weka.parse_session(obj, where, split_chains))
        elif isinstance(obj, dict) and ("input_length" in obj or "timestamp" in obj):
            t_s, turn = mooncake.parse_row(obj, where)
            rows.append((t_s, turn, where))
        else:
            keys = sorted(map(str, obj))[:8] if isinstance(obj, dict) else type(obj).__name__
            raise WorkloadError(
                f"{where}: unrecognised trace record (keys {shown(keys)})",
                hint="expected a kv-cache-tester session {id, requests, ...} or a Mooncake "
                "row {timestamp, input_length, output_length, hash_ids}",
            )
    if not sessions and not rows:
        raise WorkloadError(f"{path}: the trace holds no records",
                            hint="a trace is JSON sessions or Mooncake JSONL rows")
    return TraceFile(path, sessions, rows)


def load_trace(paths: Sequence[Path | str] | Path | str,
               split_chains: bool = True) -> list[Session]:
    """Every session of every trace file, in file order (Mooncake rows chained per file);
    `split_chains`: see `weka.parse_session`."""
    if isinstance(paths, str | Path):
        paths = [paths]
    sessions: list[Session] = []
    earlier: set[str] = set()  # session ids of the files read before this one
    for index, path in enumerate(trace_files(paths)):
        trace = read_trace_file(path, split_chains)
        for session in trace.sessions:
            if session.session_id in earlier and session.namespace != "global":
                # Local hash ids mean equal content within one session only: a second file
                # reusing an id (two exports of one tool both start at "session-1") would
                # otherwise hit the first file's cache, doubling the hit rate the trace
                # has. Namespaced by its file, as the simulator does (sim/trace.py).
                session.session_id = f"{session.session_id}@{index}"
                session.namespace = f"{session.namespace}@{index}"
        sessions.extend(trace.sessions)
        earlier.update(s.session_id for s in trace.sessions)
        if trace.rows:
            sessions.extend(mooncake.chain_sessions(trace.rows, redacted_id(path.name)))
    return sessions
