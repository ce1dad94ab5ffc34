"""vLLM v1 continuous batching as one pure function: `schedule(...) -> Schedule`.

No clock, no records, no mutation: the engine loop asks what the next step runs and applies the
answer. Running requests come first (decodes and unfinished prefill chunks, in running order),
then waiting requests fill the rest of the token budget (decode-first, vLLM v1); KV blocks are
allocated for every scheduled token; when they run out the last running request is preempted
(recompute: its KV is freed and it re-prefills prompt + generated tokens later), and a step that
preempted admits nothing (vLLM v1). `prefill_first` is vLLM V0's order (prompts before decodes).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .batch import BLOCKS, COMPUTED, blocks_for

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """One engine's per-step limits (vLLM names), fixed for the run."""

    budget: int  # max_num_batched_tokens of a step (x pp for a PP engine: pp batches in flight)
    chunk_cap: int  # tokens one request may get in a step (one batch's budget)
    max_seqs: int  # max_num_seqs
    block_size: int  # KV block in tokens
    chunked_prefill: bool = True
    reserve_full_prompt: bool = False  # admit only whole prompts that fit (later vLLM's reserve-full-isl)
    prefill_first: bool = False  # vLLM V0: a step with admissible prompts runs only prompts
    priority: bool = False  # waiting requests by (priority, arrival, position), else FCFS


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """The fields of waiting requests the scheduler reads (the run's per-request arrays)."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    generated: np.ndarray  # > 0 for a preempted request: it recomputes those tokens too
    priority: np.ndarray
    arrival_s: np.ndarray


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    """What the next step runs. The engine first drops the `preempt` last running requests, then
    appends `admitted` (columns of the running batch); `granted` is per request of the result."""

    granted: np.ndarray  # tokens per running request kept, then per admitted request
    preempt: int = 0  # running requests preempted from the tail (recompute)
    admitted: tuple = ()  # (idx, prompt, output, computed=0, generated, blocks=0) per admitted request
    admitted_tokens: tuple = ()  # tokens granted to each admitted request (its first chunk)
    decode_running: bool = False  # each kept running request decodes exactly one token

    @property
    def admitted_whole(self) -> bool:
        """Every admitted request got its whole prompt (+ recompute): it samples after this step."""
        return all(g == c[1] + c[4] for g, c in zip(self.admitted_tokens, self.admitted))


def grant_in_order(wants: np.ndarray, budget: int) -> np.ndarray:
    """Tokens granted to each running request, in order, until the budget is spent."""
    if len(wants) == 0:
        return wants
    before = np.cumsum(wants) - wants
    return np.clip(budget - before, 0, wants)


def _order(waiting, req: Waiting, lim: Limits):
    """Waiting positions in admission order: FCFS, or by (priority, arrival, position)."""
    if not lim.priority:
        return waiting
    return sorted(waiting, key=lambda p: (req.priority[p], req.arrival_s[p], p))


def _admit(granted, n_running: int, waiting, req: Waiting, lim: Limits, left: int, free: int,
           decode_running: bool = False) -> Schedule | None:
    """Admit waiting requests into `left` tokens and `free` blocks; None if none fits."""
    cols, toks = [], []
    bs, room = lim.block_size, lim.max_seqs - n_running
    for pos in _order(waiting, req, lim):
        if left <= 0 or len(cols) >= room:
            break
        prompt, gen = int(req.input_tokens[pos]), int(req.generated[pos])
        target = prompt + gen  # a preempted request recomputes its generated tokens too
        n_new = min(target, left, lim.chunk_cap) if lim.chunked_prefill else target
        fit = target if lim.reserve_full_prompt else n_new  # tokens that must fit the free blocks
        if n_new > left or -(-fit // bs) > free:  # (blocks are still taken chunk by chunk)
            break
        cols.append((pos, prompt, int(req.output_tokens[pos]), 0, gen, 0))
        toks.append(n_new)
        left -= n_new
        free -= -(-n_new // bs)
    if not cols:
        return None
    return Schedule(np.concatenate((granted, np.array(toks, dtype=np.int64))), 0, tuple(cols), tuple(toks),
                    decode_running)


def schedule(batch, waiting, free_blocks: int, req: Waiting, lim: Limits, admit: bool = True) -> Schedule:
    """The next step of an engine whose running `batch` (RunningBatch) holds all but `free_blocks`
    KV blocks, with `waiting` positions queued. `admit=False`: finish what runs, take nothing new
    (an engine draining for a policy)."""
    n = len(batch)
    if admit and waiting and lim.prefill_first:
        got = _admit(np.zeros(n, dtype=np.int64), n, waiting, req, lim, lim.budget, free_blocks)
        if got is not None:
            return got
    if batch.decoding and n <= lim.budget and n <= free_blocks:
        # the common case: every running request decodes one token and takes at most one new block,
        # so nothing is preempted (the same decisions as below, a few numpy calls fewer)
        granted = np.ones(n, dtype=np.int64)
        if admit and waiting:
            need = int(np.count_nonzero(batch.a[COMPUTED] % lim.block_size == 0)) if n else 0  # entering a block
            got = _admit(granted, n, waiting, req, lim, lim.budget - n, free_blocks - need, True)
            if got is not None:
                return got
        return Schedule(granted, decode_running=True)
    a, wants = batch.a, np.minimum(batch.wants(), lim.chunk_cap)
    for keep in range(n, -1, -1):  # keep the first `keep` requests, preempting the rest
        w = wants[:keep]
        granted = w if int(w.sum()) <= lim.budget else grant_in_order(w, lim.budget)
        need = int((blocks_for(a[COMPUTED, :keep] + granted, lim.block_size) - a[BLOCKS, :keep]).sum())
        free = free_blocks + int(a[BLOCKS, keep:].sum())
        if need <= free or keep == 0:
            break
    if keep < n:  # vLLM v1: no admission in a step that preempted
        return Schedule(granted, n - keep)
    if admit and waiting:
        got = _admit(granted, n, waiting, req, lim, lim.budget - int(granted.sum()), free - need)
        if got is not None:
            return got
    return Schedule(granted if n else _EMPTY)
