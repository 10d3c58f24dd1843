"""Atomic and incremental file writes: nothing half-written is ever left behind."""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def refuse_foreign(path: str | Path) -> None:
    """kvbench replaces or appends to only regular files: a symlink, device, FIFO, socket or
    directory at a path it writes was planted there (kvbench never creates one), and writing
    would follow it outside the directory or destroy it. Refused with an OutputError."""
    from kvbench.errors import OutputError

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a component that is a file, no permission
        raise OutputError(f"{path}: cannot write: {e.strerror}") from None
    if stat.S_ISREG(mode):
        return
    kind = ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device node")
    raise OutputError(f"{path}: is {kind} kvbench did not write; refusing to write through "
                      f"or replace it", hint="remove it, or write somewhere else")


def remove_own(path: str | Path) -> None:
    """Remove a file an earlier run left (a stale records.jsonl): a regular file only, never
    a planted link or special file (refuse_foreign)."""
    refuse_foreign(path)
    Path(path).unlink(missing_ok=True)


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write to a temporary file in the same directory, fsync, then rename over `path`. The
    file gets the mode a plain `open()` would give it (0644 under the usual umask 022), not
    the temporary file's private 0600: results and dashboards are for sharing. Only a regular
    file is replaced (refuse_foreign)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_foreign(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_output(path: str | Path, data: bytes | str) -> int:
    """Write a user-given output (`report -o`, `simulate --output`, ...): `-` is stdout; a
    regular file or a new path is written atomically; a symlink is written through (its target
    is replaced, the link stays); a character device (/dev/null, /dev/stdout, a tty) or a FIFO
    with a reader is written into, never replaced by a regular file; anything else (a
    directory, a block device, a socket, a FIFO nobody reads) is refused. Returns the bytes
    written."""
    from kvbench.errors import OutputError

    raw = data.encode() if isinstance(data, str) else data
    if str(path).endswith(("/", os.sep)):
        raise OutputError(f"{path}: names a directory; give a file name",
                          hint=f"e.g. {str(path).rstrip('/' + os.sep) or '.'}/out")
    if str(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        return len(raw)
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:  # a symlink loop, a component that is a file, no permission
        raise OutputError(f"{path}: cannot write: {e.strerror}") from None
    if mode is None or stat.S_ISREG(mode):
        write_atomic(target, raw)
        return len(raw)
    if stat.S_ISDIR(mode):
        raise OutputError(f"{path}: is a directory; give a file name",
                          hint=f"e.g. {path / 'out'}")
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(
            mode) else "not a regular file"
        raise OutputError(f"{path}: is {kind}; refusing to write over it",
                          hint="give a regular file, a new path, or - for stdout")
    try:
        # O_NONBLOCK: opening a FIFO that nobody reads fails (ENXIO) instead of blocking
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise OutputError(f"{path}: is a FIFO with no reader",
                              hint=f"start the reader first (cat {path}) or give a file") from None
        raise OutputError(f"{path}: cannot open for writing: {e.strerror}") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {e.strerror}") from None
    finally:
        os.close(fd)
    return len(raw)


def json_text(obj: Any) -> str:
    """The JSON a command prints: orjson (its C writer; `json.dumps` with an indent runs the
    pure-Python encoder), two-space indent, keys in their order, numpy numbers as numbers."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
                        | orjson.OPT_NON_STR_KEYS).decode()


def print_json(obj: Any) -> None:
    """`json_text(obj)` and a newline on stdout: every command's `--format json`."""
    sys.stdout.write(json_text(obj) + "\n")


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    return write_atomic(path, orjson.dumps(obj, option=JSON_OPTS) + b"\n")


def read_bounded(path: str | Path, limit_bytes: int, what: str, error: type | None = None
                 ) -> bytes:
    """The bytes of a user-given input file, refusing what is not a regular file (a FIFO,
    /dev/zero, a terminal: they may never end) and a file above `limit_bytes`, each as
    `error` (a KvbenchError class) naming the file. The file is opened non-blocking, so a
    FIFO with no writer is refused at once instead of waiting for one."""
    from kvbench.errors import KvbenchError

    error = error or KvbenchError
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from None
    if stat.S_ISDIR(os.fstat(fd).st_mode):  # os.fdopen refuses a directory's descriptor
        os.close(fd)
        raise error(f"{path}: is a directory, not a {what}")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: is a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a device, FIFO or socket); the {what} "
                        "must be a file", hint="copy it to a file first")
        if st.st_size > limit_bytes:
            raise error(f"{path}: {st.st_size:,} bytes is too large for a {what} (at most "
                        f"{limit_bytes:,})")
        os.set_blocking(fd, True)
        try:
            raw = f.read(limit_bytes + 1)
        except OSError as e:
            raise error(f"{path}: cannot read: {e.strerror}") from None
    if len(raw) > limit_bytes:  # grew while being read
        raise error(f"{path}: more than {limit_bytes:,} bytes is too large for a {what}")
    return raw


def read_json(path: str | Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


GZ_SUFFIX = ".gz"


class JsonlWriter:
    """Appends one JSON object per line and flushes each, so a killed run keeps every
    completed line. A torn last line (from a crash mid-write) is skipped by `iter_jsonl`.
    A path ending in .gz is written gzip-compressed: each line is flushed as a complete
    deflate block (Z_SYNC_FLUSH), so what a killed run wrote still decompresses."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        compress = self.path.name.endswith(GZ_SUFFIX)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # appended to only as a regular file: never through a planted symlink, never into a
        # device node or FIFO (O_NONBLOCK: a FIFO's open does not wait for a reader)
        refuse_foreign(self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped in between
            from kvbench.errors import OutputError

            os.close(fd)
            raise OutputError(f"{self.path}: not a regular file; refusing to append to it")
        os.set_blocking(fd, True)
        self._raw = os.fdopen(fd, "ab")
        self._f = gzip.GzipFile(fileobj=self._raw, mode="ab", compresslevel=6) if compress \
            else self._raw
        self._sync = zlib.Z_SYNC_FLUSH if compress else None

    def write(self, obj: Any) -> None:
        self._f.write(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        if self._sync is not None:
            self._f.flush(self._sync)  # type: ignore[call-arg]
        self._raw.flush()

    def close(self) -> None:
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def jsonl_path(path: str | Path) -> Path | None:
    """The JSON-lines file a run left at `path`: `path` itself, or its gzip-compressed
    `path.gz` (committed GPU results keep records and scrapes compressed); None if neither."""
    path = Path(path)
    if path.is_file():
        return path
    gz = path.with_name(path.name + GZ_SUFFIX)
    return gz if gz.is_file() else None


def iter_jsonl(path: str | Path) -> Iterator[Any]:
    """One object per line of `path` (plain, or gzip when it ends in .gz; `records.jsonl`
    also finds `records.jsonl.gz`), read as a stream: a file of any length in constant memory.
    A torn final line, or a gzip stream cut off by a killed writer, ends the file."""
    found = jsonl_path(path)
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    opener = gzip.open if found.name.endswith(GZ_SUFFIX) else open
    with opener(found, "rb") as f:
        while True:
            try:
                line = f.readline()
            except EOFError:  # gzip cut off mid-stream: everything before it was yielded
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if not line.endswith(b"\n"):
                    return  # torn final line of a killed writer
                raise


def read_jsonl(path: str | Path) -> list[Any]:
    return list(iter_jsonl(path))


_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@,-]+")


def path_part(name: str, limit: int = 200) -> str:
    """`name` (an exp-name built from a recipe's model-prefix and other user text) as one safe
    directory name: separators, `..`, control and shell characters become `_`; never empty,
    never hidden, never longer than `limit`. A job directory is therefore always inside the
    results directory."""
    safe = _UNSAFE.sub("_", str(name)).lstrip(".") or "job"
    if len(safe) > limit:  # keep it unique: the cut part is summarised by its hash
        digest = hashlib.sha256(safe.encode()).hexdigest()[:8]
        safe = f"{safe[: limit - 9]}_{digest}"
    return safe


def inside(path: str | Path, root: str | Path) -> bool:
    """Whether `path` resolves to `root` or below it (symlinks followed)."""
    return Path(path).resolve().is_relative_to(Path(root).resolve())
