"""vLLM v1 continuous batching as one pure function: `schedule(...) -> Schedule`.

No clock, no records, no mutation: the engine loop asks what the next step runs and applies the
answer. Running requests come first (decodes and unfinished prefill chunks, in running order),
then waiting requests fill the rest of the token budget (decode-first, vLLM v1); KV blocks are
allocated for every scheduled token; when they run out the last running request is preempted
(recompute: its KV is freed and it re-prefills prompt + generated tokens later), and a step that
preempted admits nothing (vLLM v1). `prefill_first` is SGLang's and vLLM V0's order (prompts before decodes, a
chunked prompt before new ones: _prefill_step).

Admission rules (`Limits.reserve`), one per serving framework:
  "chunk"    vLLM 0.9: the first chunk must fit the free blocks (later chunks and decodes may preempt)
  "prompt"   later vLLM's --scheduler-reserve-full-isl: the whole prompt must fit
  "request"  TRT-LLM's GUARANTEED_NO_EVICT capacity scheduler: the whole request (prompt + output)
             must fit next to the full-length reservations of the running requests, so nothing is
             ever preempted
  "sglang"   SGLang's PrefillAdder: prompt + min(output, clip) must fit the free tokens less the
             running requests' remaining output x new_token_ratio (the engine decays the ratio per
             decode step and raises it after a retraction, SGLang's retract_decode)

Prefix caching (`cache`, engine/prefix.py, read only): a waiting request whose leading prompt blocks
are cached starts with them computed (h tokens, no prefill compute); its fit check counts the blocks
of hit entries nobody holds (free until then) as taken; a preempted request frees its private blocks
and the cache blocks only it holds.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Final, NamedTuple

import numpy as np
from mypy_extensions import mypyc_attr

from .batch import RunningBatch

_NEW: Final = tuple.__new__  # (a NamedTuple built without its __new__ call: Schedule's note)


@mypyc_attr(native_class=False)  # (compiled, a plain class still: kernels' spawned workers unpickle it)
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
    reserve: str = "chunk"  # admission rule (module docstring): chunk, prompt, request or sglang
    clip_output_tokens: int = 4096  # sglang: output tokens a request reserves at most (CLIP_MAX_NEW_TOKENS)
    # TRT-LLM's batch waiting (EngineConfig.batch_wait_*; the engine loop applies it): iterations a context request
    # may be held while requests decode, and the tokens (ratio x max_num_tokens) that release it at once
    batch_wait_iters: int = 0
    batch_wait_tokens: float = 0.0

    def __post_init__(self):
        if self.reserve not in RESERVE_RULES:
            raise ValueError(f"reserve={self.reserve!r}: one of {', '.join(RESERVE_RULES)}")
        if self.reserve_full_prompt and self.reserve == "chunk":
            object.__setattr__(self, "reserve", "prompt")


RESERVE_RULES = ("chunk", "prompt", "request", "sglang")


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """The fields of waiting requests the scheduler reads (the run's per-request arrays)."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    generated: np.ndarray  # > 0 for a preempted request: it recomputes those tokens too
    priority: np.ndarray
    arrival_s: np.ndarray


class Admitted(NamedTuple):
    """A waiting request the step admits: its position, prompt and output tokens, the tokens it starts
    with computed (its prefix-cache hit) and generated (> 0 after a preemption: it recomputes them)."""

    pos: int
    prompt: int
    output: int
    hit: int
    generated: int


class Schedule(NamedTuple):
    """What the next step runs. The engine first drops the `preempt` last running requests, then
    appends `admitted` (columns of the running batch); `granted` is per request of the result.
    (A NamedTuple: immutable like a frozen dataclass, built once per step at a fraction of the cost. The engine's
    per-step NamedTuples are built as tuple.__new__(Cls, (every field, in order)), that bound method held once as
    each module's _NEW (looked up per call it was ~20% of the call): their generated __new__ is a Python-level
    call, ~130 ns more each; issue 36.)"""

    granted: list  # tokens per running request kept, then per admitted request
    preempt: int = 0  # running requests preempted from the tail (recompute)
    admitted: tuple[Admitted, ...] = ()  # an Admitted per admitted request, in order
    admitted_tokens: tuple = ()  # tokens granted to each admitted request (its first chunk)
    decode_running: bool = False  # each kept running request decodes exactly one token
    admitted_whole: bool = True  # every admitted request got its whole prompt (+ recompute): it samples next
    decoders: int = 0  # the first running requests, each granted one token as a decoder (RunningBatch.lead)


def grant_in_order(wants: list, budget: int) -> list:
    """Tokens granted to each running request, in order, until the budget is spent: request i gets
    min(wants_i, budget - sum of the wants before it), at least 0 (a prefix property: the grants of
    the first k requests do not depend on the rest)."""
    out, before = [], 0
    for w in wants:
        out.append(min(w, max(budget - before, 0)))
        before += w
    return out


def admission_order(waiting, req: Waiting, lim: Limits):
    """Waiting positions in admission order: FCFS, or by (priority, arrival, position)."""
    if not lim.priority:
        return waiting
    return sorted(waiting, key=lambda p: (req.priority[p], req.arrival_s[p], p))


def reserved_blocks(batch: RunningBatch, lim: Limits, ratio: float = 0.0) -> int:
    """Blocks the running requests still claim beyond those they hold: under "request" their whole
    length (prompt + output), under "sglang" their remaining output x ratio (at most the clip);
    0 for the vLLM rules (they claim blocks as tokens come, and preempt when short)."""
    if lim.reserve == "request":
        return batch.full_blocks - batch.used_blocks
    if lim.reserve == "sglang":
        return sglang_reserved_blocks(batch.output_left(lim.clip_output_tokens), ratio, lim.block_size)
    return 0


def sglang_reserved_blocks(output_left: int, ratio: float, block_size: int) -> int:
    """SGLang's claim of the running requests' remaining output (clipped, summed) x new_token_ratio, in blocks."""
    return -(-int(output_left * ratio) // block_size)


def _step_blocks(needed: int, lim: Limits) -> int:
    """Blocks the running requests' grants of this step take out of the free ones before admission: under
    TRT-LLM's rule none, since their reservations (reserved_blocks: each one's blocks to completion, this
    step's included, as GuaranteedNoEvictScheduler's getRemainingBlocksToCompletion) already hold them;
    counting them twice made a waiting request's fit depend on how many running requests crossed a block
    boundary that step (issue 36: the fast path disagreed with step by step)."""
    return 0 if lim.reserve == "request" else needed


def admit_waiting(granted: list, n_running: int, waiting, req: Waiting, lim: Limits, left: int, free: int,
                  decode_running: bool = False, cache=None, reserved: int = 0, decoders: int = 0) -> Schedule | None:
    """Admit waiting requests into `left` tokens and `free` blocks, of which `reserved` are claimed
    by running requests (reserved_blocks); None if none fits."""
    bs, room = lim.block_size, lim.max_seqs - n_running
    if left <= 0 or room <= 0:  # (no request can join: the common case of a full batch under overload)
        return None
    cols: list = []
    toks: list = []
    whole = True
    rule, chunked_prefill, cap = lim.reserve, lim.chunked_prefill, lim.chunk_cap  # (read once: Limits is a Python
    # class, each attribute a lookup)
    taken: Any = set() if cache is not None else None  # unreferenced cache entries an earlier admission takes
    inputs, generated, outputs = req.input_tokens, req.generated, req.output_tokens
    for pos in admission_order(waiting, req, lim):
        if left <= 0 or len(cols) >= room:
            break
        # (.item: the Python int in one call, where int(inputs[pos]) makes a numpy scalar first, ~1k instructions)
        prompt: int = inputs.item(pos)
        gen: int = generated.item(pos)
        hit, cost = 0, 0
        if cache is not None:
            found = cache.hit(pos)
            hit = found.tokens
            new = [k for k in found.unreferenced if k not in taken]
            cost = len(new) * found.blocks_per_key  # blocks of hit entries taken out of the free pool
        target = prompt + gen - hit  # a preempted request recomputes its generated tokens too
        # Unchunked, a prompt runs whole (one past the budget blocks the queue: the router's `holds` keeps it out);
        # so does a recompute, except one past the budget: TRT-LLM's rule bounds only the prompt by it (Engine.holds)
        # and never preempts, but a policy that moves a request (withdraw: Flying, SiDP, Seesaw) makes it recompute
        # prompt + generated, which may not fit one step. That recompute runs in chunks of the budget, as a running
        # request's rest does (schedule: `wants`), rather than block the queue's head forever (differential_fuzz
        # seed 1001: Flying on TRT-LLM, 8137 + 791 tokens against 8192)
        chunked = chunked_prefill or (gen > 0 and target > cap)
        n_new = min(target, left, cap) if chunked else target
        if rule == "chunk":  # tokens that must fit the free blocks (blocks are still taken chunk by chunk)
            fit = n_new
        elif rule == "prompt":
            fit = target
        else:  # the whole request, or its prompt and (clipped) output estimate: claimed until it ends
            out = outputs.item(pos) - gen
            fit = target + (out if rule == "request" else min(out, lim.clip_output_tokens))
        if n_new > left or -(-fit // bs) + cost > free - reserved:
            break
        if cost:
            taken.update(new)
        cols.append(_NEW(Admitted, (pos, prompt, outputs.item(pos), hit, gen)))
        toks.append(n_new)
        whole = whole and n_new == target
        left -= n_new
        free -= -(-n_new // bs) + cost
        if rule in ("request", "sglang"):  # the rest of its claim
            reserved += -(-fit // bs) - -(-n_new // bs)
    if not cols:
        return None
    granted.extend(toks)  # (the callers' list is their own, built for this step: no copy of the running batch's)
    return _NEW(Schedule, (granted, 0, tuple(cols), tuple(toks), decode_running, whole, decoders))


def _prefill_step(batch: RunningBatch, n: int, waiting, req: Waiting, lim: Limits, free_blocks: int, cache,
                  reserved: int):
    """A prefill-first step (SGLang's prefill batch; vLLM V0's prompt step): the running request whose prompt is
    being chunked continues first, then waiting prompts fill the rest of the budget, and the decoders wait. SGLang
    adds its chunked request before the waiting queue and forms a prefill batch whenever one is chunked
    (Scheduler._get_new_batch_prefill_raw: `adder.add_chunked_req(self.chunked_req)` ahead of `for req in
    self.waiting_queue`, and no early return while `self.chunked_req` is set; python/sglang/srt/managers/
    scheduler.py @ 0003215c, the same order in the 0.4 and 0.5 schedulers). Until 2026-12-02 waiting prompts went
    first and the chunked request waited, or ran mixed with the decodes. None: nothing chunked and nothing
    admissible, or the chunk's KV blocks do not fit (the general path preempts)."""
    granted, left, need = [0] * n, lim.budget, 0
    if not batch.decoding:  # (else every running request decodes: none is chunked)
        bs, cap, d = lim.block_size, lim.chunk_cap, batch.clock
        prompt, cbase, gbase = batch.prompt, batch.cbase, batch.gbase
        for i in range(batch.lead, n):
            if left <= 0:
                break
            wants = prompt[i] + gbase[i] - cbase[i]
            if wants == 1 and gbase[i] + d > 0:  # a decoder waits
                continue
            g, c = min(wants, cap, left), cbase[i] + d
            granted[i], left, need = g, left - g, need + -(-(c + g) // bs) - -(-c // bs)
    if need > free_blocks:
        return None
    if waiting:
        got = admit_waiting(granted, n, waiting, req, lim, left, free_blocks - _step_blocks(need, lim), cache=cache,
                            reserved=reserved)
        if got is not None:
            return got
    return _NEW(Schedule, (granted, 0, (), (), False, True, 0)) if left < lim.budget else None


def schedule(batch: RunningBatch, waiting, free_blocks: int, req: Waiting, lim: Limits, admit: bool = True,
             cache=None, ratio: float = 0.0) -> Schedule:
    """The next step of an engine whose running `batch` (RunningBatch) holds all but `free_blocks`
    KV blocks, with `waiting` positions queued. `admit=False`: finish what runs, take nothing new
    (an engine draining for a policy). `cache`: the engine's PrefixCache (read only), or None.
    `ratio`: SGLang's new_token_ratio of this step (reserve "sglang" only)."""
    n = len(batch.idx)  # (len(batch): a Python call more, every step)
    reserved = reserved_blocks(batch, lim, ratio) if admit and waiting else 0
    if lim.prefill_first and (admit and waiting or not batch.decoding):
        got = _prefill_step(batch, n, waiting if admit else (), req, lim, free_blocks, cache, reserved)
        if got is not None:
            return got
    if batch.decoding and n <= lim.budget and n <= free_blocks:
        # the common case: every running request decodes one token and takes at most one new block,
        # so nothing is preempted (the same decisions as below, in O(1))
        granted = [1] * n
        if admit and waiting:
            got = admit_waiting(granted, n, waiting, req, lim, lim.budget - n,
                                free_blocks - _step_blocks(batch.entering_block(), lim), True, cache, reserved, n)
            if got is not None:
                return got
        return _NEW(Schedule, (granted, 0, (), (), True, True, n))  # (decode_running, decoders=n)
    # the leading decoders (batch.lead) want one token each and open a block when their computed tokens
    # fill one (c % block_size == 0): counted in aggregate; the requests after them one by one
    cap, bs, d = lim.chunk_cap, lim.block_size, batch.clock
    lead = batch.lead if batch.lead <= lim.budget else 0  # (a budget below the decoders: grant in order)
    prompt, cbase, gbase, own = batch.prompt, batch.cbase, batch.gbase, batch.own
    wants = [min(prompt[i] + gbase[i] - cbase[i], cap) for i in range(lead, n)]
    left = lim.budget - lead
    rest = wants if sum(wants) <= left else grant_in_order(wants, left)
    computed = [cbase[i] + d for i in range(lead, n)]
    need = [-(-(c + g) // bs) - -(-c // bs) for c, g in zip(computed, rest)]
    needed = batch.entering_block() - sum(1 for c in computed if c % bs == 0) + sum(need)
    keep, free = n, free_blocks
    while keep > 0 and needed > free:  # preempt the last request: its KV frees, its tokens are not needed
        keep -= 1
        c = computed[keep - lead] if keep >= lead else cbase[keep] + d
        needed -= need[keep - lead] if keep >= lead else c % bs == 0
        free += -(-c // bs) - own[keep]  # its private blocks
        if cache is not None:  # and the cache blocks only it holds
            free += cache.sole_blocks(batch.idx[keep])
    granted = [1] * lead + rest
    if keep < n:  # vLLM v1: no admission in a step that preempted
        return Schedule(granted[:keep], n - keep, decoders=min(lead, keep))
    if admit and waiting:
        got = admit_waiting(granted, n, waiting, req, lim, lim.budget - lead - sum(rest),
                            free - _step_blocks(needed, lim), cache=cache, reserved=reserved, decoders=lead)
        if got is not None:
            return got
    return _NEW(Schedule, (granted, 0, (), (), False, True, lead))  # (decoders=lead)
