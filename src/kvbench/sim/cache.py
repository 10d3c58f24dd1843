"""A paged radix prefix cache with a GPU (device) tier and a host tier, HiCache semantics.

A node holds a run of pages (each `page` tokens; a partial last page takes a whole page),
keyed under its parent by its first page's content key, so a node stands for the whole
prefix that leads to it. As in SGLang's radix tree, a node is split where two requests
diverge, and eviction, backup and load-back work on whole nodes. The tree also keeps the
nodes that no tier holds any more ("absent"): node boundaries then depend only on the
requests seen, never on the tier sizes, so that a run with a host tier evicts exactly the
device pages that the same run without one evicts (adding a host tier can only add hits).

Invariants:
- presence and device residency are prefix-closed (a present node's parent is present, a
  device node's parent is on device);
- the device LRU holds exactly the unpinned device nodes, each more recent than its device
  descendants, so its oldest entry is always a device leaf (touches go leaf first);
- the host LRU holds exactly the unpinned host-only nodes (evicted from device, backed up).

Write policies: `write_through` backs a node up when it is inserted, `write_back` only when
the device evicts it, and `write_through_selective` when the request that prefilled it
finishes. SGLang 0.5.17 counts a node's hits on *inserts*, not on matches, and backs it up at
the second (`hiradix_cache.py` `insert` -> `_inc_hit_count`, `write_through_threshold` 2): a
request inserts its prompt path once its prefill is done (`batch_result_processor.py`,
`maybe_cache_unfinished_req`; the inserts of intermediate chunks are not counted) and again
when it finishes (`radix_cache.py` `cache_finished_req`), so a prompt's pages reach 2 with
their own request's end, and later requests' inserts find them backed up. A device node
evicted without a backup is dropped. Running requests pin their path (`lock`, counted along
the parent chain as SGLang's lock refs), so eviction never takes it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from kvbench.errors import SimError
from kvbench.sim.node import Admission, CacheCounters, Node, common_prefix

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


class TieredCache:
    """Device tier of `device_tokens` (math.inf = unlimited), host tier of `host_tokens`."""

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
        self.root = Node([], 0, None)
        self.root.host = True  # so that first-level nodes may be backed up
        self.root.lock = 1
        self.device_used = 0  # device nodes + private tokens of running requests
        self.host_used = 0
        self.pinned_tokens = 0  # device tokens that eviction cannot take
        self.device_lru: OrderedDict[Node, None] = OrderedDict()
        self.host_lru: OrderedDict[Node, None] = OrderedDict()
        self.counters = CacheCounters()
        # What the last refused admission needed: until something else is admitted, the same
        # request needs the same again, and cannot fit while need + pinned > capacity.
        self.refused_need = 0
        # The host link (link.HostLink), set by the engine: asynchronous backups queue on
        # its D2H direction, write-back copies wait behind them. None: an idle link.
        self.link = None
        self.sync_until_s = 0.0  # when this step's write-back copies end (with a link)
        # a host hit shorter than this is recomputed, not loaded (engine profile; SGLang's
        # load_back_threshold)
        self.load_back_min_tokens = 0

    def close(self) -> None:
        """Drop the nodes' parent links once the run is over: the tree is then acyclic, and
        reference counting frees it with the cache instead of the cycle collector (which
        walks every node twice before freeing it: sim/simulate.py `gc_paused`)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            node.parent = None
            if node.children:
                stack.extend(node.children.values())

    # -- queries ---------------------------------------------------------------------------
    def match_tokens(self, keys: Sequence[Hashable]) -> tuple[int, int]:
        """(device, host) tokens of the longest cached prefix of `keys`; changes nothing."""
        node, i, dev, host = self.root, 0, 0, 0
        while i < len(keys):
            child = node.children.get(keys[i]) if node.children else None
            if child is None or not (child.device or child.host):
                break
            m = common_prefix(child.keys, keys, i)
            if child.device:
                dev += m * child.page
            else:
                host += m * child.page
            if m < len(child.keys):
                break
            i += m
            node = child
        return dev, host

    def cannot_fit(self, need: int) -> bool:
        """True when a request needing `need` device tokens surely cannot be admitted now."""
        return need + self.pinned_tokens > self.device_capacity

    # -- admission and release -------------------------------------------------------------
    def admit(self, keys: Sequence[Hashable], page_tokens: int,
              private_tokens: int) -> Admission | None:
        """Match `keys` (one per page of `page_tokens`), pin the match, load its host nodes
        back, insert the missing pages and reserve `private_tokens` (unpaged tail + decode
        KV). None when the device tier cannot make room even after evicting every unpinned
        node; the cache is then as before (but for node splits, which change no content)."""
        node, i, n = self.root, 0, len(keys)
        dev = host = 0
        dev_node, dev_i = node, 0
        while i < n:
            children = node.children
            child = children.get(keys[i]) if children else None
            if child is None or not (child.device or child.host):
                break
            size = len(child.keys)
            if keys[i:i + size] != child.keys:
                size = common_prefix(child.keys, keys, i)
                child = self._split(child, size)
            i += size
            node = child
            if child.device:
                dev += child.tokens
                dev_node, dev_i = node, i
            else:
                host += child.tokens
        if 0 < host < self.load_back_min_tokens:  # too short to load back: recomputed
            node, i, host = dev_node, dev_i, 0
        new_tokens = (n - i) * page_tokens
        need = host + new_tokens + private_tokens
        self._pin(node)
        free = self.device_capacity - self.device_used
        if need > free + self.device_used - self.pinned_tokens:
            self._unpin(node)
            self.refused_need = need
            return None
        counters = self.counters
        sync_before = counters.sync_backup_tokens
        if need > free:
            self._evict_device(need - free)
        if host:  # load back; the host copies stay (those nodes are now backed)
            x = node
            while not x.device:
                x.device = True
                x = x.parent
            counters.load_tokens += host
        if i < n:
            node = self._insert(node, keys, i, page_tokens)
        added = host + new_tokens + private_tokens
        self.device_used += added
        self.pinned_tokens += added
        return Admission(node, dev, host, new_tokens, private_tokens,
                         counters.sync_backup_tokens - sync_before)

    def release(self, adm: Admission) -> None:
        """A request finished: back its path up (write_through_selective: its second insert),
        unpin it (touching it, leaf first) and free its private tokens."""
        if self.write_policy == "write_through_selective" and self.host_capacity > 0:
            self._backup_path(adm.node)
        self._unpin(adm.node)
        self.device_used -= adm.private_tokens
        self.pinned_tokens -= adm.private_tokens

    # -- tree surgery ----------------------------------------------------------------------
    def _split(self, node: Node, size: int) -> Node:
        """Cut `node` after `size` pages; returns the new upper part, which inherits the
        state (and the LRU membership, to be taken out by the pin that follows)."""
        upper = Node(node.keys[:size], node.page, node.parent)
        upper.device, upper.host, upper.lock = node.device, node.host, node.lock
        node.keys = node.keys[size:]
        node.tokens = len(node.keys) * node.page
        upper.children = {node.keys[0]: node}
        upper.parent.children[upper.keys[0]] = upper
        node.parent = upper
        if not node.lock:
            if node.device:
                self.device_lru[upper] = None
            elif node.host:
                self.host_lru[upper] = None
        return upper

    def _insert(self, parent: Node, keys: Sequence[Hashable], i: int, page: int) -> Node:
        """Insert keys[i:] under `parent` as pinned device nodes, reviving absent ones."""
        backup_new = self.write_policy == "write_through" and self.host_capacity > 0
        n = len(keys)
        while i < n:
            children = parent.children
            child = children.get(keys[i]) if children else None
            if child is None:
                child = Node(list(keys[i:]), page, parent)
                if children is None:
                    parent.children = {keys[i]: child}
                else:
                    children[keys[i]] = child
                i = n
            else:  # absent, or host-only and recomputed (load_back_min_tokens)
                size = len(child.keys)
                if keys[i:i + size] != child.keys:
                    size = common_prefix(child.keys, keys, i)
                    child = self._split(child, size)
                if child.host and not child.lock:
                    self.host_lru.pop(child, None)  # on device now: not host-only
                child.device = True
                i += size
            child.lock = 1
            if backup_new:
                self._backup(child)
            parent = child
        return parent

    def _backup_path(self, node: Node) -> None:
        path = []
        while node is not self.root:
            path.append(node)
            node = node.parent
        for x in reversed(path):  # root first: a backup needs a backed parent
            if not x.host:
                self._backup(x)

    def _pin(self, node: Node) -> None:
        lru, pinned = self.device_lru, 0
        parent = node.parent
        while parent is not None:
            if node.lock:
                # pinned already, and so is every node above it (pins are prefix-closed):
                # the rest of the path only counts one more holder
                node.lock += 1
                node = parent
                while node.parent is not None:
                    node.lock += 1
                    node = node.parent
                break
            if node.device:
                del lru[node]
                pinned += node.tokens
            else:  # about to be loaded: host eviction must not take it
                del self.host_lru[node]
            node.lock = 1
            node = parent
            parent = node.parent
        self.pinned_tokens += pinned

    def _unpin(self, node: Node) -> None:
        lru, unpinned = self.device_lru, 0
        parent = node.parent
        while parent is not None:
            lock = node.lock - 1
            node.lock = lock
            if lock:
                # still held by another request, and so is every node above it
                node = parent
                while node.parent is not None:
                    node.lock -= 1
                    node = node.parent
                break
            if node.device:
                unpinned += node.tokens
                lru[node] = None
            else:  # only after a refused admission
                self.host_lru[node] = None
            node = parent
            parent = node.parent
        self.pinned_tokens -= unpinned

    # -- eviction and backup ---------------------------------------------------------------
    def _evict_device(self, want: float) -> int:
        freed = dropped = 0
        lru, host_lru = self.device_lru, self.host_lru
        write_back = self.write_policy == "write_back" and self.host_capacity > 0
        now = self.link.now_s if self.link is not None else 0.0
        while freed < want and lru:
            n = lru.popitem(last=False)[0]
            n.device = False
            freed += n.tokens
            if n.host and n.ready_s > now:  # its backup is still queued on the link
                n.host = False
                self.host_used -= n.tokens
                self.counters.backup_late_tokens += n.tokens
            if n.host or (write_back and self._backup(n, sync=True)):
                host_lru[n] = None
            elif write_back:  # host-only descendants (backed up first) go with it
                self._drop(n)
            else:
                dropped += n.tokens
        self.device_used -= freed
        self.counters.device_evicted_tokens += freed
        self.counters.dropped_tokens += dropped
        return freed

    def _backup(self, n: Node, sync: bool = False) -> bool:
        """Copy a node to host, evicting host-only nodes if needed. Write-through backups
        keep the backed set prefix-closed (a node is backed only under a backed parent);
        write-back backs up leaves first and their parents follow when evicted."""
        if not sync and not n.parent.host:
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
        link = self.link
        if sync:
            self.counters.sync_backup_tokens += n.tokens
            if link is not None:
                self.sync_until_s = link.async_d2h(n.tokens)
        else:
            self.counters.backup_tokens += n.tokens
            if link is not None:
                n.ready_s = link.async_d2h(n.tokens)
        return True

    def _evict_host(self, want: int) -> int:
        freed = 0
        lru = self.host_lru
        while freed < want and lru:
            n = lru.popitem(last=False)[0]
            n.host = False  # its descendants were evicted before it (oldest first)
            freed += n.tokens
        self.host_used -= freed
        self.counters.host_evicted_tokens += freed
        return freed

    def _drop(self, n: Node) -> None:
        """Make an off-device node and its present subtree absent (write-back only, when the
        node's own backup failed: its host-only descendants cannot be reached any more)."""
        stack = [n]
        while stack:
            x = stack.pop()
            if x.device:  # impossible by the invariants; refuse to corrupt the accounting
                raise SimError("internal: dropping a device-resident node")
            if x.host:
                x.host = False
                self.host_used -= x.tokens
                self.host_lru.pop(x, None)
            else:
                self.counters.dropped_tokens += x.tokens
            if x.children:
                stack.extend(c for c in x.children.values() if c.device or c.host)
