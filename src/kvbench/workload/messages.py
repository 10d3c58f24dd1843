"""The chat messages a stream's turn is sent as under the AgentX profile: agentx-harness
1.0.12 replays a Weka trace's conversation as role segments over its hash blocks, not as one
user message (`aiperf/dataset/loader/weka_synth_buf.py` `ConversationReconstructor`). Only the
geometry lives here (roles, which blocks, how many tokens each segment holds); the content is
kvbench's own (workload/prompt.py renders it).

The rules, each from weka_synth_buf.py (1.0.12):
- Turn 0 (`init_turn_0`, :120-246): the trace's declared tool + system tokens become one
  system segment of ceil((tool + system) / bs) blocks, clamped to the blocks the prompt covers;
  the rest of the covered blocks plus the unhashed tail (missing blocks and the partial block)
  are one user segment, left out when empty unless it is the only one.
- Turn k (`advance_turn`, :248-390): truncate the segments at the longest common prefix of the
  previous and this turn's hash ids (`truncate_synth_buf_at_block`, :652-722), then append an
  assistant segment of ceil(prev_out / bs) blocks (none when no user segment survived; at
  most the new blocks; at most the planner's cap; one block fewer when it would take every
  new block and no tail is left, so a turn ends with a user message) and a user segment of
  the remaining new blocks and the tail.
- The planner (`compute_asst_block_caps`, :566-649) caps an assistant segment so that a later
  turn that adds nothing and cuts back onto its block finds a user block there.
- The wire (`turn_delta` :424-480 with `base_endpoint.py` `_flatten_turns`): the deltas
  accumulate and a reset replaces them, so every request carries the whole segment list.

Which streams get the declared prefix (weka_trace.py:631-660 `_chain_init_tokens`): a scope's
main chain (the root's, a subagent's) always; a chain split from it only when its first
hash-bearing request starts with the main chain's first declared-prefix blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbench.workload.blocks import common_prefix
from kvbench.workload.session import Turn

SYSTEM, USER, ASSISTANT = "system", "user", "assistant"


@dataclass(frozen=True, slots=True)
class Segment:
    """One message: `blocks` whole blocks of the turn's hash ids from `first`, then
    `tail_tokens` unhashed tokens, the tail of the stream's turn `tail_of` (its position in the
    stream): the trailing segment's is the turn's own, an earlier one's was left by a turn
    that did not cut it away."""

    role: str
    first: int
    blocks: int
    tail_tokens: int = 0
    tail_of: int = 0

    def tokens(self, block_tokens: int) -> int:
        return self.blocks * block_tokens + self.tail_tokens


def _covered(turn: Turn) -> int:
    """Whole blocks the prompt holds: its hash ids, up to in // bs (a hashed partial last
    block counts only as tail: weka_synth_buf.py `compute_turn_block_geometry`)."""
    return min(len(turn.hash_ids), turn.input_tokens // turn.block_tokens)


def _ceil_blocks(tokens: int, bs: int) -> int:
    return -(-tokens // bs) if tokens > 0 else 0


def assistant_caps(turns: Sequence[Turn]) -> list[int | None]:
    """Per turn, the most assistant blocks it may take (None: no bound). Replays which turn
    owns each block; a turn that adds no block and no tail cuts back to block T and exposes
    block T - 1, which its owning turn (not turn 0) must keep in its user segment."""
    caps: list[int | None] = [None] * len(turns)
    owner: list[int] = []
    start = [0] * len(turns)  # where each turn's new region began
    for k, turn in enumerate(turns):
        covered = _covered(turn)
        if k == 0:
            owner = [0] * covered
            continue
        cut = min(common_prefix(turns[k - 1].hash_ids, turn.hash_ids), len(owner))
        start[k] = cut
        added = max(0, covered - cut)
        tail = turn.input_tokens - covered * turn.block_tokens
        if added == 0 and tail == 0 and cut >= 1 and (j := owner[cut - 1]) != 0:
            bound = cut - 1 - start[j]
            if bound >= 0:
                caps[j] = bound if caps[j] is None else min(caps[j], bound)
        del owner[cut:]
        owner.extend([k] * added)
    return caps


def marker_segment(segments: Sequence[Segment]) -> int | None:
    """Which of a turn's messages a tree's cache-bust marker opens: the first user message
    (agentx-harness 1.0.12 aiperf/workers/worker.py:327-341 `_inject_marker_at_first_user`,
    after any system message); None when it has none (the harness then sends none). The
    blocks before its first are shared between trees, every block from it on is the tree's."""
    return next((i for i, seg in enumerate(segments) if seg.role == USER), None)


def marker_blocks(layout: ChatLayout) -> list[int | None]:
    """Per turn of the layout's stream, the block the tree's marker precedes: the first of
    `marker_segment`'s message (None: the turn has none)."""
    out: list[int | None] = []
    for pos in range(len(layout.turns)):
        segments = layout.at(pos)
        i = marker_segment(segments)
        out.append(None if i is None else segments[i].first)
    return out


def _cut(segments: list[Segment], at: int) -> None:
    """Keep the segments' first `at` blocks: the segment ending there loses its tail and every
    later one goes; a segment crossing it is shortened (and loses its tail)."""
    if at <= 0:
        segments.clear()
        return
    # the first segment that reaches `at`, found from the end: a stream's turns each add
    # their messages there and cut near it, so a scan from the start grew with the history
    # (segments are contiguous: each starts at block `first`, where the one before ended)
    i = len(segments) - 1
    if i < 0 or segments[i].first + segments[i].blocks < at:
        return
    while i and segments[i - 1].first + segments[i - 1].blocks >= at:
        i -= 1
    seg = segments[i]
    done = seg.first
    end = done + seg.blocks
    if end == at:
        segments[i] = Segment(seg.role, seg.first, seg.blocks)
        del segments[i + 1:]
    elif done == at:
        del segments[i:]
    else:
        segments[i] = Segment(seg.role, seg.first, at - done)
        del segments[i + 1:]


class ChatLayout:
    """The segments of one stream's turns, advanced turn by turn as the stream is sent (a
    resumed stream replays the geometry of the turns before its first, which is cheap: no
    content is rendered). `turns` are the stream's turns as sent, in order; `prefix_tokens`
    the declared tool + system tokens its turn 0 starts with (0: none); `key` names the stream
    (the seed of the tails it keeps in its history)."""

    __slots__ = ("caps", "key", "pos", "prefix_tokens", "segments", "turns")

    def __init__(self, turns: Sequence[Turn], prefix_tokens: int = 0,
                 key: object = None) -> None:
        self.turns = turns
        self.prefix_tokens = prefix_tokens
        self.key = key
        self.caps = assistant_caps(turns)
        self.segments: list[Segment] = []
        self.pos = -1  # the turn `segments` are for

    def at(self, pos: int) -> list[Segment]:
        """The messages of the stream's turn `pos`."""
        if pos < self.pos:
            self.pos, self.segments = -1, []
        while self.pos < pos:
            self.pos += 1
            self._advance(self.pos)
        return self.segments

    def _first(self, turn: Turn) -> None:
        bs = turn.block_tokens
        covered = _covered(turn)
        segs = self.segments = []
        # the prefix must come from recorded blocks: the harness refuses a trace whose turn 0
        # records fewer (init_turn_0 raises); here the turn is then all user content
        system = _ceil_blocks(self.prefix_tokens, bs)
        if system > len(turn.hash_ids):
            system = 0
        system = min(system, covered)
        if system:
            segs.append(Segment(SYSTEM, 0, system))
        tail = turn.input_tokens - covered * bs
        if (covered - system) * bs + tail > 0 or not segs:
            segs.append(Segment(USER, system, covered - system, tail, 0))

    def _advance(self, k: int) -> None:
        turn = self.turns[k]
        if k == 0:
            self._first(turn)
            return
        prev = self.turns[k - 1]
        bs = turn.block_tokens
        covered = _covered(turn)
        cut = common_prefix(prev.hash_ids, turn.hash_ids)
        added = max(0, covered - cut)
        tail = turn.input_tokens - covered * bs
        segs = self.segments
        _cut(segs, cut)
        out = prev.output_tokens if prev.recorded_output_tokens is None \
            else prev.recorded_output_tokens
        reply = _ceil_blocks(out, bs)
        if not any(s.role == USER for s in segs):
            reply = 0  # the context lost every user message: it resumes with one
        reply = min(reply, added)
        if self.caps[k] is not None:
            reply = min(reply, self.caps[k])
        if tail == 0 and reply == added and reply > 0:
            reply -= 1
        if reply:
            segs.append(Segment(ASSISTANT, cut, reply))
        if (added - reply) * bs + tail > 0:
            segs.append(Segment(USER, cut + reply, added - reply, tail, k))
