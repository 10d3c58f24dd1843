"""A turn's hash ids as runs of consecutive ids: what the corpus generator emits.

An agent's context grows by appending blocks, so a generated session's turns are prefixes of
a few runs of fresh ids (the shared system and tool prefix, then the conversation). Held as
tuples, AgentX-sized contexts (100k-1M tokens, 1.5k-16k blocks a turn, tens of turns a
session, hundreds of sessions) take gigabytes; as runs, a turn takes a few integers. `Blocks`
behaves as the tuple of its ids wherever a turn's ids are read (length, index, prefix
slices, iteration, equality), and `shifted` gives the namespaced page keys of a prefix
without a Python-level loop (the simulator's lanes)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain


class Blocks(Sequence[int]):
    """Concatenated runs `range(start, stop)` of ids, immutable."""

    __slots__ = ("_len", "runs")

    def __init__(self, runs: Sequence[tuple[int, int]] = ()) -> None:
        merged: list[tuple[int, int]] = []  # canonical: no empty run, none continuing another
        for a, b in runs:
            if b <= a:
                continue
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.runs = tuple(merged)
        self._len = sum(b - a for a, b in merged)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(range(a, b) for a, b in self.runs)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step != 1:
                return tuple(self)[index]
            return self._span(start, stop)
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("Blocks index out of range")
        for a, b in self.runs:
            if index < b - a:
                return a + index
            index -= b - a
        raise IndexError("Blocks index out of range")  # unreachable

    def prefix(self, n: int) -> Blocks:
        """The first `n` ids."""
        return self if n >= self._len else self._span(0, n)

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """The runs of ids start..stop, as (first id, end id) pairs."""
        at = 0  # index of the current run's first id
        for a, b in self.runs:
            if at >= stop:
                break
            lo, hi = max(start - at, 0), min(stop - at, b - a)
            if lo < hi:
                yield a + lo, a + hi
            at += b - a

    def _span(self, start: int, stop: int) -> Blocks:
        return Blocks(list(self._pieces(start, stop)))

    def extended(self, start: int, stop: int) -> Blocks:
        """These ids, then `range(start, stop)` (joined to the last run when it continues it)."""
        runs = list(self.runs)
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], stop)
        else:
            runs.append((start, stop))
        return Blocks(runs)

    def shifted(self, offset: int, n: int | None = None, start: int = 0) -> list[int]:
        """Ids start..n (all by default) plus `offset`, as a list (built run by run)."""
        out: list[int] = []
        for a, b in self._pieces(start, self._len if n is None else min(n, self._len)):
            out += range(a + offset, b + offset)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Blocks):
            return self._len == other._len and (self.runs == other.runs or
                                                tuple(self) == tuple(other))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._len and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Blocks({list(self.runs)!r})"


class FreshIds:
    """Hash ids never handed out before, consecutive from `start`: a generated context is a
    few runs (the shared prefix, its own growth), whatever its turns and tokens."""

    __slots__ = ("next",)

    def __init__(self, start: int = 0) -> None:
        self.next = start

    def take(self, n: int) -> tuple[int, int]:
        """The next `n` ids, as one run (first id, end id)."""
        run = (self.next, self.next + n)
        self.next += n
        return run


def common_prefix(a: Sequence, b: Sequence) -> int:
    """How many leading entries two id sequences share: by runs for `Blocks`, else by slice
    comparisons (in C: one compare when one continues the other, a bisection when not)."""
    if isinstance(a, Blocks) and isinstance(b, Blocks):
        n = 0
        for (a0, a1), (b0, b1) in zip(a.runs, b.runs, strict=False):
            if a0 != b0:
                break
            n += min(a1, b1) - a0
            if a1 != b1:
                break
        return n
    if type(a) is not type(b):
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    # one copy, of the longer: a prompt's keys against the one it continues are compared
    # whole on every request
    if (a == b[:n]) if len(a) == n else (a[:n] == b):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def namespaced(ids: Sequence[int], offset: int, n: int, start: int = 0) -> list[int]:
    """Ids start..n plus `offset` (page keys in a namespace), whatever holds the ids."""
    if isinstance(ids, Blocks):
        return ids.shifted(offset, n, start)
    if offset == 0:
        return list(ids[start:n])
    return [offset + h for h in ids[start:n]]
