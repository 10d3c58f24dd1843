"""A paged radix prefix cache with a GPU (device) tier and a host tier, HiCache semantics.

Each tree node is one page (a block of up to `page_tokens` tokens) keyed by its content key
under its parent, so a node stands for the whole prefix that leads to it. Invariants:
- the device-resident nodes form a prefix-closed set (a node's parent is on device too), and
  the tree itself is prefix-closed (a node is on device, on host, or gone);
- the device LRU holds exactly the unpinned device nodes, each more recent than its device
  descendants, so its oldest entry is always a device leaf (touches go leaf first);
- the host LRU holds the host-only nodes (evicted from device, backed up), oldest first.

Write policies (kvoffload.md 1.1): `write_through` backs a page up when it is inserted,
`write_through_selective` when it is hit for the second time, `write_back` only when the
device evicts it. A device page evicted without a backup is dropped. Running requests pin
their pages (`lock`), so eviction never takes them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kvbench.errors import SimError

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
_SELECTIVE_HITS = 2


class Node:
    """One page of the tree. A plain slotted class: hundreds of thousands are created per
    simulated hour, and a dataclass with a default factory costs twice as much to build."""

    __slots__ = ("children", "device", "hits", "host", "key", "lock", "parent", "tokens")

    def __init__(self, key: Hashable, parent: Node | None, tokens: int, lock: int) -> None:
        self.key = key
        self.parent = parent
        self.tokens = tokens
        self.children: dict[Hashable, Node] | None = None  # created with the first child
        self.device = True
        self.host = False
        self.lock = lock
        self.hits = 1


@dataclass(slots=True)
class Admission:
    """What admitting one request did to the cache (returned by `TieredCache.admit`)."""

    path: list[Node]
    device_hit_tokens: int
    host_hit_tokens: int
    new_tokens: int
    private_tokens: int
    sync_backup_tokens: int  # write-back copies on the critical path of this admission


@dataclass(slots=True)
class CacheCounters:
    backup_tokens: int = 0  # asynchronous write-through copies device -> host
    sync_backup_tokens: int = 0  # write-back copies made while evicting
    load_tokens: int = 0  # host -> device load-backs
    device_evicted_tokens: int = 0
    host_evicted_tokens: int = 0
    dropped_tokens: int = 0  # evicted from device with no host copy
    backup_failed_tokens: int = 0  # host full of pinned copies: backup skipped


class TieredCache:
    """Device tier of `device_tokens` (float('inf') = unlimited), host tier of `host_tokens`."""

    def __init__(self, device_tokens: float, host_tokens: int = 0,
                 write_policy: str = "write_through") -> None:
        if write_policy not in WRITE_POLICIES:
            raise SimError(
                f"write_policy: {write_policy!r} is not one of {', '.join(WRITE_POLICIES)}"
            )
        if device_tokens <= 0 or host_tokens < 0:
            raise SimError(
                f"device tier must be > 0 and host tier >= 0 tokens, got {device_tokens} and "
                f"{host_tokens}"
            )
        self.device_capacity = device_tokens
        self.host_capacity = host_tokens
        self.write_policy = write_policy
        self.root = Node(None, None, 0, 1)
        self.root.host = True  # so that first-level pages may be backed up
        self.epoch = 0  # bumps whenever pages are released: a refused admission may now fit
        self.device_used = 0  # tree pages on device + private tokens of running requests
        self.host_used = 0
        self.pinned_tokens = 0  # device tokens that eviction cannot take
        self.device_lru: OrderedDict[Node, None] = OrderedDict()
        self.host_lru: OrderedDict[Node, None] = OrderedDict()
        self.counters = CacheCounters()

    # -- queries ---------------------------------------------------------------------------
    def match_tokens(self, keys: Sequence[Hashable]) -> tuple[int, int]:
        """(device, host) tokens of the longest cached prefix of `keys`; changes nothing."""
        node, dev, host = self.root, 0, 0
        for key in keys:
            node = node.children.get(key) if node.children else None
            if node is None:
                break
            if node.device:
                dev += node.tokens
            else:
                host += node.tokens
        return dev, host

    @property
    def evictable_tokens(self) -> int:
        return self.device_used - self.pinned_tokens

    # -- admission and release -------------------------------------------------------------
    def admit(self, keys: Sequence[Hashable], page_tokens: int,
              private_tokens: int) -> Admission | None:
        """Match `keys` (one page of `page_tokens` each; a partial last page still takes a
        whole page), pin the match, load host pages back, insert the missing pages and
        reserve `private_tokens` (unpaged tail + decode KV). None when the device tier cannot
        make room even after evicting every unpinned page; nothing changes then."""
        # The hot path of the simulator: one pass matches and pins, one pass inserts.
        path: list[Node] = []
        node = self.root
        dev = host = pinned = 0
        lru, host_lru = self.device_lru, self.host_lru
        for key in keys:
            children = node.children
            child = children.get(key) if children else None
            if child is None:
                break
            path.append(child)
            if child.device:
                dev += child.tokens
                if not child.lock:
                    del lru[child]
                    pinned += child.tokens
            else:
                host += child.tokens
                if not child.lock:  # about to be loaded: host eviction must not take it
                    del host_lru[child]
            child.lock += 1
            node = child
        matched = len(path)
        num_keys = len(keys)
        new_tokens = (num_keys - matched) * page_tokens
        need = host + new_tokens + private_tokens
        self.pinned_tokens += pinned
        free = self.device_capacity - self.device_used
        if need > free + self.device_used - self.pinned_tokens:
            self._unpin(path)
            return None
        counters = self.counters
        sync_before = counters.sync_backup_tokens
        if need > free:
            self._evict_device(need - free)
        if host:
            for n in path:
                if not n.device:  # load back; the host copy stays (the page is now backed)
                    n.device = True
            counters.load_tokens += host
        if self.write_policy == "write_through_selective" and self.host_capacity > 0:
            for n in path:
                n.hits += 1
                if not n.host and n.hits >= _SELECTIVE_HITS:
                    self._backup(n)
        if matched < num_keys:
            backup_new = self.write_policy == "write_through" and self.host_capacity > 0
            parent = node
            for i in range(matched, num_keys):
                key = keys[i]
                child = Node(key, parent, page_tokens, 1)
                if parent.children is None:
                    parent.children = {key: child}
                else:
                    parent.children[key] = child
                if backup_new:
                    self._backup(child)
                path.append(child)
                parent = child
        added = host + new_tokens + private_tokens
        self.device_used += added
        self.pinned_tokens += added
        return Admission(path, dev, host, new_tokens, private_tokens,
                         counters.sync_backup_tokens - sync_before)

    def release(self, adm: Admission) -> None:
        """A request finished: unpin its pages (touching them, leaf first) and free its
        private tokens."""
        self._unpin(adm.path)
        self.epoch += 1
        self.device_used -= adm.private_tokens
        self.pinned_tokens -= adm.private_tokens

    # -- internals -------------------------------------------------------------------------
    def _unpin(self, path: list[Node]) -> None:
        lru = self.device_lru
        unpinned = 0
        for n in reversed(path):
            n.lock -= 1
            if not n.lock:
                if n.device:
                    unpinned += n.tokens
                    lru[n] = None
                else:  # only after a refused admission
                    self.host_lru[n] = None
        self.pinned_tokens -= unpinned

    def _evict_device(self, want: float) -> int:
        freed = 0
        lru = self.device_lru
        counters = self.counters
        write_back = self.write_policy == "write_back" and self.host_capacity > 0
        while freed < want and lru:
            n, _ = lru.popitem(last=False)
            n.device = False
            self.device_used -= n.tokens
            freed += n.tokens
            counters.device_evicted_tokens += n.tokens
            if n.host or (write_back and self._backup(n, sync=True)):
                self.host_lru[n] = None
            elif not n.children:  # the common case of _drop, inlined
                del n.parent.children[n.key]
                counters.dropped_tokens += n.tokens
            else:
                self._drop(n)
        return freed

    def _backup(self, n: Node, sync: bool = False) -> bool:
        """Copy a page to host, evicting host-only pages if needed. Backups keep the backed
        set prefix-closed (a page is backed only under a backed parent), except write-back,
        which backs up leaves first and whose parents follow when they are evicted."""
        parent = n.parent
        if not sync and parent is not None and not parent.host:
            self.counters.backup_failed_tokens += n.tokens
            return False
        room = self.host_capacity - self.host_used
        if room < n.tokens:
            room += self._evict_host(n.tokens - room)
        if room < n.tokens:
            self.counters.backup_failed_tokens += n.tokens
            return False
        n.host = True
        self.host_used += n.tokens
        if sync:
            self.counters.sync_backup_tokens += n.tokens
        else:
            self.counters.backup_tokens += n.tokens
        return True

    def _evict_host(self, want: int) -> int:
        freed = 0
        lru = self.host_lru
        while freed < want and lru:
            n, _ = lru.popitem(last=False)
            freed += self._drop(n)
        self.counters.host_evicted_tokens += freed
        return freed

    def _drop(self, n: Node) -> int:
        """Remove a page that is off the device, and its subtree, from the tree; returns the
        host tokens freed. The subtree is empty but for host-only pages (write-back)."""
        freed = 0
        stack = [n]
        while stack:
            x = stack.pop()
            if x.children:
                stack.extend(x.children.values())
            if x.device:  # impossible by the invariants; refuse silently corrupt accounting
                raise SimError("internal: dropping a device-resident page")
            if x.host:
                x.host = False
                self.host_used -= x.tokens
                freed += x.tokens
                self.host_lru.pop(x, None)
            else:
                self.counters.dropped_tokens += x.tokens
        del n.parent.children[n.key]
        return freed
