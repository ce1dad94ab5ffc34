"""The running batch: per-request state of the running sequences, in named columns, kept so that
a decode step costs O(1) whatever the batch size (cost grows with events, not tokens).

A decode step advances every running request by one token, so computed and generated are stored
relative to a batch clock D (the number of such uniform steps): computed_i = computed_base[i] + D,
generated_i = generated_base[i] + D. A k-step decode stretch is then D += k, plus the KV blocks
that stretch opens, counted from how many requests sit at each position within a block (at most
block_size groups). Only requests that change individually (admitted, prefilling, finished,
preempted) are touched one by one; columns are plain lists (batches are small next to numpy's
per-call cost, ~2 us here). The running order starts with requests that decode (`lead` of them: past
their prefill, one token wanted), and the others (prefill chunks, just admitted) follow; a step that is
not all-decode reads those others one by one and the leading decoders in aggregate (their count, the
blocks they open, their keys), so its cost is O(requests not decoding), not O(batch) (issue 36).

With prefix caching (engine/prefix.py) a request may hold some of its leading blocks through the
cache (`own` of them, shared with other requests): `blocks` and `used_blocks` count only its private
blocks, ceil(computed / block_size) - own; the engine adds the cache's referenced blocks once.
"""
from __future__ import annotations

from bisect import bisect_left  # (compiled, a from-import is a global's read; heapq.heappop an attribute
from heapq import heappop, heappush  # lookup on the module per call)
from typing import Final, NamedTuple

import numpy as np

_NEW: Final = tuple.__new__  # (a NamedTuple built without its __new__ call: scheduler.Schedule's note)

COLUMNS = ("idx", "prompt", "output", "computed", "generated", "blocks")
# a completion-order entry is one int, key x POS_SPAN + position: ordered as the tuple (key, position) for
# positions in [0, POS_SPAN), compared at int speed (issue 36: a heappop + heappush on ~500 entries takes
# 0.57 us as tuples, 0.30 us as ints)
POS_BITS: Final = 32  # (Final: compiled, a constant in the C, not a lookup in the module's dict per use)
POS_SPAN: Final = 1 << POS_BITS
POS_MASK: Final = (1 << POS_BITS) - 1


def blocks_for(tokens, block_size: int):
    """KV blocks that hold `tokens` tokens (ceil division); arrays or Python ints."""
    if isinstance(tokens, int):
        return -(-tokens // block_size)
    return -(-np.asarray(tokens, dtype=np.int64) // block_size)


class Left(NamedTuple):
    """A request taken out of the running batch (finished, preempted or withdrawn): its workload
    position and the tokens it had generated."""

    pos: int
    generated: int


class RunningBatch:
    """Running requests in running order. `decoding`: every request is past its prefill and wants
    exactly one token (a hint for the scheduler's fast path); `used_blocks`: KV blocks held."""

    __slots__ = ("block_size", "idx", "prompt", "output", "cbase", "gbase", "clock", "sum_cbase",
                 "used_blocks", "phase", "decoding", "lead", "own", "_left", "_key", "_seq", "_seq_of", "_next_seq",
                 "sum_key", "_clip", "_over", "full_blocks")

    def __init__(self, block_size: int, clip_tokens: int | None = None):
        self.block_size = block_size
        self.idx: list[int] = []  # request positions in the workload
        self.prompt: list[int] = []  # input tokens
        self.output: list[int] = []  # output tokens to generate (0: prefill only)
        self.cbase: list[int] = []  # computed - clock: tokens whose KV is cached
        self.gbase: list[int] = []  # generated - clock: output tokens sampled so far
        self.clock = 0  # uniform decode steps so far (D)
        self.sum_cbase = 0
        self.used_blocks = 0
        self.phase: list[int] = [0] * block_size  # requests by cbase mod block_size (who open a block together)
        self.decoding = True
        self.lead = 0  # batch positions [0, lead) decode next: generated > 0 and one token wanted (grow_lead)
        self.own: list[int] = []  # KV blocks each request holds through the prefix cache (not its own)
        # completion order: a heap of (output - gbase, position) as one int (POS_SPAN) — a request finishes when
        # the clock reaches its key — with stale entries (key changed, request gone) dropped when they surface
        self._left: list[int] = []
        self._key: dict[int, int] = {}  # position in the workload -> its current key
        # admission numbers, increasing along the running order (requests join at the tail and leave in place),
        # so a request's batch position is a bisection, not a scan of the batch (issue 36: list.index was ~6%
        # of an overloaded run, ~470 running)
        self._seq: list[int] = []
        self._seq_of: dict[int, int] = {}  # position in the workload -> its admission number
        self._next_seq = 0
        # SGLang's reservation, sum of min(output - generated, clip) (output_left), in O(requests past the clip):
        # the keys' sum (output - generated = key - clock), and the requests whose key was past clock + clip when
        # set (the clock only grows, so one that falls below stays below until its key changes)
        self.sum_key = 0
        self.full_blocks = 0  # blocks the requests' whole lengths (prompt + output) take: TRT-LLM's reservations
        self._clip = clip_tokens
        self._over: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.idx)

    def __repr__(self) -> str:
        return "RunningBatch(" + ", ".join(f"{k}={v}" for k, v in zip(COLUMNS, self.columns())) + ")"

    # ---- reading -------------------------------------------------------------------------
    @property
    def sum_computed(self) -> int:
        """Keys cached over the batch."""
        return self.sum_cbase + len(self.idx) * self.clock

    def computed(self) -> list:
        d = self.clock
        return [c + d for c in self.cbase]

    def generated(self) -> list:
        d = self.clock
        return [g + d for g in self.gbase]

    def wants(self) -> list:
        """Tokens each request needs computed before it can sample: 1 while decoding."""
        return [p + g - c for p, g, c in zip(self.prompt, self.gbase, self.cbase)]

    def blocks(self) -> list:
        """Private KV blocks per request: ceil(computed / block_size) less those held via the cache."""
        bs, d = self.block_size, self.clock
        return [-(-(c + d) // bs) - o for c, o in zip(self.cbase, self.own)]

    def columns(self) -> tuple:
        """(idx, prompt, output, computed, generated, blocks) as lists."""
        return self.idx, self.prompt, self.output, self.computed(), self.generated(), self.blocks()

    def entering_block(self) -> int:
        """Requests whose next token opens a new KV block (computed a multiple of block_size)."""
        return self.phase[-self.clock % self.block_size]

    def first_completion(self) -> int:
        """All-decode steps until the first request completes: min(output - generated)."""
        heap, key = self._left, self._key
        while key.get(heap[0] & POS_MASK) != heap[0] >> POS_BITS:
            heappop(heap)
        return (heap[0] >> POS_BITS) - self.clock

    def finished(self, exclude=()) -> list[int]:
        """Batch positions (ascending) of requests with every output token sampled, less those in
        `exclude` (requests whose step the caller judges itself, e.g. prompts still in prefill)."""
        heap, key, out, keep, last = self._left, self._key, [], [], -1
        bound = (self.clock + 1) * POS_SPAN  # entries of keys <= the clock
        while heap and heap[0] < bound:
            entry = heappop(heap)
            if entry == last:  # a second entry of one key: a request that left and came back at the same key (the
                continue  # clock stays through a prompts-only step), counted once
            last = entry
            pos = entry & POS_MASK
            if key.get(pos) == entry >> POS_BITS:  # (stale entries are dropped)
                i = self.index(pos)
                if i in exclude:
                    keep.append(entry)
                else:
                    out.append(i)
        for entry in keep:  # not judged here: still in the order
            heappush(heap, entry)
        out.sort()
        return out

    def output_left(self, clip: int) -> int:
        """Sum over the batch of min(output - generated, clip): the output tokens SGLang's admission still
        reserves (scheduler.reserved_blocks); O(requests past the clip) when the batch was built with this clip.
        Entries no longer past it are dropped here (the clock only grows: they stay below)."""
        if clip == self._clip:
            d, key = self.clock, self._key
            for pos, k in list(self._over.items()):
                if key.get(pos) != k or k - d <= clip:  # (gone, re-keyed, or no longer past the clip)
                    del self._over[pos]
        return self.output_left_after(clip, 0)

    def output_left_after(self, clip: int, m: int) -> int:
        """output_left(clip) once every request has decoded m more tokens (none finishing), without changing the
        batch (dropping the entries that fall below the clip by clock + m would be too soon: headroom.py asks)."""
        d = self.clock + m
        if clip != self._clip:
            return sum(min(o - g - d, clip) for o, g in zip(self.output, self.gbase))
        over, key = 0, self._key
        for pos, k in self._over.items():
            if key.get(pos) == k and k - d > clip:
                over += k - d - clip
        return self.sum_key - len(self.idx) * d - over

    def index(self, pos: int) -> int:
        """Batch position of the running request `pos` (O(log batch))."""
        return bisect_left(self._seq, self._seq_of[pos])

    # ---- changes (each keeps the sums, the block count and the phases exact) -----------------
    # A request with c tokens computed entering (+1) or leaving (-1) the batch adds +-(c - clock) to sum_cbase,
    # +-ceil(c / block_size) to used_blocks and +-1 to phase[(c - clock) % block_size]: written out where it
    # happens (append, set, remove: a call less per admission, token and completion; issue 36).
    def _order(self, pos: int, key: int) -> None:
        """Request `pos` finishes when the clock reaches `key` (output - gbase)."""
        self.sum_key += key - self._key.get(pos, 0)
        if self._clip is not None and key - self.clock > self._clip:
            self._over[pos] = key
        self._key[pos] = key
        heappush(self._left, key * POS_SPAN + pos)

    def append(self, pos: int, prompt: int, output: int, computed: int, generated: int, own: int = 0) -> None:
        """Admit a request (at the tail), `own` of its blocks held through the prefix cache."""
        if not 0 <= pos < POS_SPAN:
            raise ValueError(f"request position {pos} outside [0, 2**{POS_BITS}): the completion order cannot hold it")
        self.idx.append(pos)
        self.full_blocks += -(-(prompt + output) // self.block_size)
        self._seq.append(self._next_seq)
        self._seq_of[pos] = self._next_seq
        self._next_seq += 1
        self.own.append(own)
        self.used_blocks -= own
        self.prompt.append(prompt)
        self.output.append(output)
        self.cbase.append(computed - self.clock)
        self.gbase.append(generated - self.clock)
        self.sum_cbase += computed - self.clock  # (it enters with `computed`: the section note above)
        self.used_blocks += -(-computed // self.block_size)
        self.phase[(computed - self.clock) % self.block_size] += 1
        self._order(pos, output - generated + self.clock)
        self.decoding = False

    def set(self, i: int, computed: int, generated: int) -> None:
        """Request i now has `computed` tokens cached and `generated` sampled."""
        d, bs, old = self.clock, self.block_size, self.cbase[i]
        new = computed - d
        if new != old:  # it leaves with old + d and enters with `computed`: the sums move by the difference
            self.sum_cbase += new - old
            self.used_blocks += -(-computed // bs) - -(-(old + d) // bs)
            phase = self.phase
            phase[old % bs] -= 1
            phase[new % bs] += 1
            self.cbase[i] = new
        g = self.gbase[i] = generated - d
        key = self.output[i] - g
        if self._key[self.idx[i]] != key:
            self._order(self.idx[i], key)

    def set_own(self, i: int, own: int) -> None:
        """Request i now holds `own` of its blocks through the prefix cache."""
        self.used_blocks -= own - self.own[i]
        self.own[i] = own

    def remove(self, at: list[int]) -> list[Left]:
        """Drop the requests at batch positions `at` (ascending); what they left (Left, in order)."""
        d, gone = self.clock, []
        idx, prompt, output, cbase, gbase, own, seq = (self.idx, self.prompt, self.output, self.cbase, self.gbase,
                                                       self.own, self._seq)
        bs, phase = self.block_size, self.phase
        for i in reversed(at):
            if i < self.lead:
                self.lead -= 1
            c = cbase[i]  # (it leaves with c + d computed)
            self.sum_cbase -= c
            self.used_blocks += own[i] - -(-(c + d) // bs)
            phase[c % bs] -= 1
            pos = idx[i]
            self.sum_key -= self._key.pop(pos)
            self.full_blocks -= -(-(prompt[i] + output[i]) // self.block_size)
            del self._seq_of[pos]
            gone.append(_NEW(Left, (pos, gbase[i] + d)))  # (Left(...) without its __new__ call)
            idx.pop(i)  # (list.pop, not del: compiled, a list primitive, where del is the generic item deletion)
            prompt.pop(i)
            output.pop(i)
            cbase.pop(i)
            gbase.pop(i)
            own.pop(i)
            seq.pop(i)
        gone.reverse()
        return gone

    def grow_lead(self) -> int:
        """Extend the leading decoders over the requests after them that decode now (each joins once:
        O(1) amortised); how many lead."""
        i, n, d = self.lead, len(self.idx), self.clock
        prompt, cbase, gbase = self.prompt, self.cbase, self.gbase
        while i < n and gbase[i] + d > 0 and prompt[i] + gbase[i] - cbase[i] == 1:
            i += 1
        self.lead = i
        return i

    def pop_tail(self) -> Left:
        """Remove the last request (recompute preemption): its position and tokens generated."""
        return self.remove([len(self.idx) - 1])[0]

    def opened_blocks(self, k: int) -> int:
        """KV blocks k >= 1 decode steps of every request would open. A request with c tokens computed opens one
        at each step that starts from a multiple of block_size: floor((c + k - 1) / bs) - floor((c - 1) / bs), which
        with k - 1 = a bs + b is a, plus 1 when (c - 1) mod bs >= bs - 1 - b. So all of them open n a blocks plus
        one per request whose phase (cbase mod bs) lies in a cyclic range of b + 1 phases: a sum over part of the
        phase histogram, O(1) lines, not O(batch) or a loop over the phases."""
        bs, ph = self.block_size, self.phase
        a, b = (k - 1) // bs, (k - 1) % bs  # (divmod: a generic call compiled)
        lo = (-b - self.clock) % bs  # phases from lo, b + 1 of them (cyclic)
        hi = lo + b + 1
        tail = 0  # (a loop over at most block_size ints: compiled, C; sum() of slices was two lists and a
        for j in range(lo, min(hi, bs)):  # generic call each, ~1k instructions a stretch)
            tail += ph[j]
        for j in range(hi - bs):
            tail += ph[j]
        return len(self.idx) * a + tail

    def decode(self, k: int) -> None:
        """Every request computed and sampled k more tokens (a k-step decode stretch)."""
        if k == 1:  # those at a block boundary open one
            self.used_blocks += self.phase[-self.clock % self.block_size]
        else:
            self.used_blocks += self.opened_blocks(k)
        self.clock += k
