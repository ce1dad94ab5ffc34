"""Automatic prefix caching as vLLM v1 does it, at the granularity of a trace's block hashes.

A cache entry is one trace block of TRACE_BLOCK_TOKENS (512, Mooncake's `hash_ids`) = 512 /
block_size engine KV blocks, keyed by its chained prefix hash (key_i = hash((key_{i-1}, id_i)), as
vLLM chains block hashes: equal keys mean equal prefixes). Entries are referenced (held by running
requests: used KV, counted once whoever holds them) or unreferenced (kept in an LRU, counted as
free: evicted oldest first whenever the engine needs their blocks).

A request holds a leading run of m entries: the k it hit at admission, then each full prompt block
its prefill passes (published as it is computed; a block already cached is shared instead). Only
whole blocks before the prompt's last token can hit (vLLM always computes the last prompt token).
Simplification: two requests computing the same block at once share one entry (vLLM keeps both
copies until the second is freed), so concurrent duplicates take no extra KV here.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

TRACE_BLOCK_TOKENS = 512  # tokens per trace block hash (Mooncake's hash_ids)


class Hit(NamedTuple):
    """What admitting a request finds in the cache: its hit tokens, the unreferenced keys among the
    hit (their blocks leave the free pool), and engine blocks per key."""

    tokens: int
    unreferenced: tuple
    blocks_per_key: int


class PrefixCache:
    """One engine's cache: key -> refcount, the LRU of unreferenced keys, and per request (workload
    position) the number of leading entries it references."""

    __slots__ = ("per_entry", "refs", "lru", "held", "ref_entries", "_keys", "_blocks", "_prompt")

    def __init__(self, block_size: int, prefix_blocks, input_tokens):
        if TRACE_BLOCK_TOKENS % block_size:
            raise ValueError(f"block_size={block_size} does not divide the trace block ({TRACE_BLOCK_TOKENS})")
        self.per_entry = TRACE_BLOCK_TOKENS // block_size  # engine blocks per entry
        self.refs: dict = {}  # key -> refcount (0: in the LRU)
        self.lru: OrderedDict = OrderedDict()  # unreferenced keys, oldest first
        self.held: dict = {}  # request position -> entries it references (a leading run)
        self.ref_entries = 0  # entries with refcount > 0
        self._keys: dict = {}  # request position -> its chained keys (full prompt blocks only)
        self._blocks, self._prompt = prefix_blocks, input_tokens

    # ---- reading ----------------------------------------------------------------------------
    @property
    def referenced_blocks(self) -> int:
        """Engine KV blocks held by referenced entries (used KV)."""
        return self.ref_entries * self.per_entry

    @property
    def cached_blocks(self) -> int:
        """Engine KV blocks of unreferenced entries (free, evictable)."""
        return len(self.lru) * self.per_entry

    def keys(self, pos: int) -> list:
        """Chained keys of the request's full prompt blocks."""
        ks = self._keys.get(pos)
        if ks is None:
            ids = self._blocks[pos]
            ks, h = [], None
            if ids is not None and ids == ids:  # (NaN: a request without blocks)
                for b in ids[:int(self._prompt[pos]) // TRACE_BLOCK_TOKENS]:
                    h = hash((h, b))
                    ks.append(h)
            self._keys[pos] = ks
        return ks

    def hit(self, pos: int) -> Hit:
        """The Hit of admitting `pos` now: the leading keys found, whole blocks strictly before the
        prompt's last token."""
        ks, refs = self.keys(pos), self.refs
        limit = (int(self._prompt[pos]) - 1) // TRACE_BLOCK_TOKENS
        k = 0
        while k < limit and k < len(ks) and ks[k] in refs:
            k += 1
        if not k:
            return Hit(0, (), self.per_entry)
        return Hit(k * TRACE_BLOCK_TOKENS, tuple(x for x in ks[:k] if refs[x] == 0), self.per_entry)

    # ---- changes ----------------------------------------------------------------------------
    def _ref(self, key) -> None:
        n = self.refs.get(key, 0)
        if n == 0:
            self.lru.pop(key, None)
            self.ref_entries += 1
        self.refs[key] = n + 1

    def admit(self, pos: int, hit_tokens: int) -> None:
        """The request runs holding its hit entries (found by `hit` in this instant's state)."""
        k = hit_tokens // TRACE_BLOCK_TOKENS
        for key in self.keys(pos)[:k]:
            self._ref(key)
        self.held[pos] = k

    def publish(self, pos: int, computed: int) -> int:
        """The request has `computed` tokens: its full prompt blocks up to there are cached and held
        by it; returns the entries it holds."""
        m = self.held.get(pos, 0)
        ks = self.keys(pos)
        upto = min(len(ks), computed // TRACE_BLOCK_TOKENS)
        for key in ks[m:upto]:
            self._ref(key)
        if upto > m:
            self.held[pos] = m = upto
        return m

    def release(self, pos: int) -> None:
        """The request left the batch (finished, preempted, withdrawn): its entries are unreferenced
        by it; those nobody holds join the LRU tail first (evicted before the head, as vLLM)."""
        m = self.held.pop(pos, 0)
        refs, lru = self.refs, self.lru
        for key in reversed(self.keys(pos)[:m]):
            n = refs[key] - 1
            refs[key] = n
            if n == 0:
                lru[key] = None
                self.ref_entries -= 1

    def sole_blocks(self, pos: int) -> int:
        """Engine blocks that dropping `pos` alone would unreference."""
        refs = self.refs
        return sum(refs[k] == 1 for k in self.keys(pos)[:self.held.get(pos, 0)]) * self.per_entry

    def evict(self, free_blocks: int) -> None:
        """Drop the oldest unreferenced entries while they hold more than `free_blocks`."""
        lru, refs, per = self.lru, self.refs, self.per_entry
        while lru and len(lru) * per > free_blocks:
            key, _ = lru.popitem(last=False)
            del refs[key]
