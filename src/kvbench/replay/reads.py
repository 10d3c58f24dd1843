"""A response body as it arrived: each read's arrival time and bytes, in two lists.

Every read of a streamed response (14,000 a second at 512 paced streams) was one (time, bytes)
tuple: a container the garbage collector tracks until a young collection untracks it, and
responses freed in bulk let the young generation grow past its threshold (the collector counts
frees against allocations), so young collections met 5-20K such tuples, 5-12 ms each, at 512
AgentX-sized sessions. Two lists of ints and bytes are two objects whatever the reads. Read as
the sequence of (time, bytes) pairs it was (iteration, indexing, `reversed`): iterating zips the
lists, whose pair tuple CPython reuses when the loop drops it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


class Reads(Sequence[tuple[int, bytes]]):
    __slots__ = ("data", "times")

    def __init__(self, pairs: Iterable[tuple[int, bytes]] = ()) -> None:
        self.times: list[int] = []
        self.data: list[bytes] = []
        for t, d in pairs:
            self.add(t, d)

    def add(self, t: int, data: bytes) -> None:
        self.times.append(t)
        self.data.append(data)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return list(zip(self.times[i], self.data[i], strict=True))
        return self.times[i], self.data[i]

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.times, self.data, strict=True)

    def __reversed__(self) -> Iterator[tuple[int, bytes]]:
        return zip(reversed(self.times), reversed(self.data), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Reads):
            return self.times == other.times and self.data == other.data
        if isinstance(other, list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it stands for

    def __repr__(self) -> str:
        return f"Reads({list(self)!r})"
