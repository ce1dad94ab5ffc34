"""What one engine step does to the running batch and the request records, as plain functions:
`begin` carries out a Schedule before the step (preemptions, admissions), `aggregates` gives the
step's cost aggregates (perfmodel's order), `advance` applies the step (or a k-step decode stretch)
when it ends. No clock of their own: the engine passes `now`.
"""
from __future__ import annotations

from typing import Any, Final, NamedTuple

from perfmodel.batch import StepAgg

from .batch import RunningBatch
from .scheduler import Schedule

_NEW: Final = tuple.__new__  # (a NamedTuple built without its __new__ call: scheduler.Schedule's note)


class StepPlan(NamedTuple):
    """What an engine step begins with (Engine.begin_step): the schedule carried out, its aggregates,
    whether every request decodes one token, and the mode it runs in with that mode's step table."""

    schedule: Schedule
    agg: StepAgg
    all_decode: bool
    mode: str
    table: Any  # StepTable or a policy's step object


NO_WORK = StepAgg(0, 0, 0.0, 0.0, 0, 0.0)  # (a switch's row: no tokens)


def begin(batch: RunningBatch, waiting, recs, s: Schedule, now: float, cache=None) -> None:
    """Carry out the schedule's preemptions and admissions before the step runs (`cache`: the
    engine's PrefixCache or None; an admitted request holds its hit entries)."""
    for _ in range(s.preempt):  # recompute preemption from the tail; each re-queued first
        left = batch.pop_tail()
        pos = left.pos
        if cache is not None:
            cache.release(pos)
        recs.preemptions[pos] += 1
        recs.generated[pos] = left.generated
        waiting.appendleft(pos)
    scheduled = recs.scheduled_s
    for adm in s.admitted:
        pos, prompt, hit = adm.pos, adm.prompt, adm.hit
        if waiting[0] == pos:
            waiting.popleft()
        else:
            waiting.remove(pos)
        first: float = scheduled.item(pos)  # (.item: one read, a Python float)
        if first != first:  # NaN: the first time it runs
            scheduled[pos] = now
            if cache is not None:
                recs.cached_tokens[pos] = hit
        if cache is not None:
            recs.prefix_query_tokens[pos] += prompt
            recs.prefix_hit_tokens[pos] += hit
            cache.admit(pos, hit)
            batch.append(pos, prompt, adm.output, hit, adm.generated, hit // batch.block_size)
        else:
            batch.append(pos, prompt, adm.output, 0, adm.generated)


def _sums(grants, contexts) -> tuple[int, int, int, int, int, int]:
    """(prefill tokens, prefill seqs, causal pairs, prefill keys, decode seqs, decode keys) as exact
    integers, of requests computing `grants` tokens after `contexts` cached ones. A 1-token step after
    a non-empty context costs as a decode (perfmodel.batch), though here it may be the last prefill
    chunk: it may sample the first token or (output 0) none. (Typed: compiled, the six come back unboxed and
    float() of each is a primitive, not a call.)"""
    pt = ps = pairs = pkv = dn = dkv = 0
    for g, c in zip(grants, contexts):
        if g == 1 and c > 0:
            dn += 1
            dkv += c + 1
        elif g > 0:
            pt += g
            ps += 1
            pairs += g * c + g * (g + 1) // 2
            pkv += c + g
    return pt, ps, pairs, pkv, dn, dkv


def prompts_only(s: Schedule) -> bool:
    """Whether schedule `s` runs only admitted prompts while every running request waits (granted 0, none decoding):
    prefill first's prompt steps (SGLang, vLLM V0). The running requests then change in nothing, so a step touches
    only its prompts: O(prompts), not O(batch) (issue 36: an overloaded SGLang run spent 3/4 of its time there)."""
    return not s.decoders and not s.decode_running and not any(s.granted[:len(s.granted) - len(s.admitted)])


def aggregates(batch: RunningBatch, s: Schedule) -> StepAgg:
    """The step's cost aggregates (perfmodel.batch.aggregates' order and values: exact integers, so
    the floats are too)."""
    if s.decode_running:  # decoders first (one token, context = computed), then the admitted requests
        adm = s.admitted_tokens
        dn = len(s.granted) - len(adm)
        if not adm:
            return _NEW(StepAgg, (0, 0, 0.0, 0.0, dn, float(batch.sum_computed + dn) if dn else 0.0))
        hits = [a.hit for a in s.admitted]  # an admitted request's context: its prefix-cache hit (or 0)
        pt, ps, pairs, pkv, adn, adkv = _sums(adm, hits)
        dkv = batch.sum_computed - sum(hits) + dn + adkv if dn + adn else 0  # the decoders' keys, then theirs
        return _NEW(StepAgg, (pt, ps, float(pairs), float(pkv), dn + adn, float(dkv)))
    # the leading decoders (s.decoders: one token each after their context) in aggregate, the rest one by one
    lead, d, cbase = s.decoders, batch.clock, batch.cbase
    start = len(s.granted) - len(s.admitted) if prompts_only(s) else lead  # (then the running add nothing)
    rest = [cbase[i] + d for i in range(start, len(s.granted))]
    pt, ps, pairs, pkv, dn, dkv = _sums(s.granted[start:], rest)
    if lead:
        dn += lead
        dkv += batch.sum_computed - sum(rest) + lead
    return _NEW(StepAgg, (pt, ps, float(pairs), float(pkv), dn, float(dkv)))


def all_decode(batch: RunningBatch, s: Schedule, agg: StepAgg) -> bool:
    """Whether the step of schedule `s` (aggregates `agg`) is all-decode: every request past its first
    token, one token each (a decode stretch may follow it)."""
    if s.decode_running:  # the decoders, and no prompt admitted
        return not s.admitted_tokens
    dn = agg.decode_seqs
    if not (dn == len(s.granted) and dn and not s.admitted):
        return False
    d, gbase = batch.clock, batch.gbase  # (the leading decoders have generated tokens)
    return all(gbase[i] + d > 0 for i in range(s.decoders, len(gbase)))


def advance(batch: RunningBatch, recs, s: Schedule, k: int, all_decode: bool, now: float, cache=None) -> list:
    """The batch after the step (k = 1) or the k-step decode stretch that just ended; first tokens
    recorded; returns the batch positions of the requests that finished (ascending). With a prefix
    `cache`, the full prompt blocks a prefill chunk passed are published (held by their request)."""
    if all_decode:  # every request computed and sampled k tokens; none is new
        batch.decode(k)
        return batch.finished() if batch.first_completion() <= 0 else []
    # every request that decodes (one token after its prompt, sampling) advances together; the rest
    # (prefill chunks, admitted, not granted, first tokens) are set one by one
    n_run = len(s.granted) - len(s.admitted)
    tick = True  # the decoders advance together: one tick of the batch clock
    if s.decode_running:
        fix: Any = range(n_run, len(s.granted))
    elif prompts_only(s):  # the running requests wait: the clock stays (ticking it set each one back, O(batch))
        fix, tick = range(n_run, len(s.granted)), False
    else:  # (a leading decoder is none of these: s.decoders)
        prompt, outs, cbase, gbase = batch.prompt, batch.output, batch.cbase, batch.gbase
        d, granted = batch.clock, s.granted
        fix = [i for i in range(s.decoders, len(granted)) if granted[i] != 1 or gbase[i] + d == 0 or outs[i] == 0
               or cbase[i] + 1 != prompt[i] + gbase[i]]
    before = [(batch.cbase[i] + batch.clock, batch.gbase[i] + batch.clock) for i in fix]
    if tick:
        batch.decode(1)
    done = []
    for i, (c, gen) in zip(fix, before):
        g, out = s.granted[i], batch.output[i]
        c += g
        full = g > 0 and c == batch.prompt[i] + gen  # its prompt (and recompute) is done: it samples
        if full and out > 0:
            if gen == 0:
                recs.first_token_s[batch.idx[i]] = now
            gen += 1
        batch.set(i, c, gen)
        if cache is not None and g > 0:
            held = cache.publish(batch.idx[i], c) * cache.per_entry
            if held != batch.own[i]:
                batch.set_own(i, held)
        if full and gen >= out:
            done.append(i)
    # decoders that sampled their last token; none after a prompts-only step (no running request advanced: a
    # 0-output one whose prompt was being chunked has its key at the clock, and was reported done; 2026-12-02)
    if tick and batch.first_completion() <= 0:
        done = sorted(done + batch.finished(exclude=set(fix)))
    return done


def still_decoding(batch: RunningBatch, s: Schedule) -> bool:
    """After a step that was not all-decode (and its completions): does every running request
    decode next? (after one that was, the rest still do)."""
    if s.decode_running:  # the decoders still do; admitted requests do if their prompt was whole
        batch.grow_lead()
        return s.admitted_whole
    return batch.grow_lead() == len(batch.idx)  # every request past its prefill, one token wanted


def stretch_steps(batch: RunningBatch, free_blocks: int, block_size: int) -> int:
    """Decode steps that can run in closed form from an all-decode step that neither admitted nor
    preempted: the next steps have the same budget, fewer free blocks and the same running set, so
    nothing can change before the first completion or the KV bound: the most steps whose new blocks
    (RunningBatch.opened_blocks, from the requests' positions within their blocks) the free blocks hold,
    at least ceil(k / block_size) per sequence (the bound before issue 36) and at least one step."""
    k_max = batch.first_completion()
    lo = max(1, min(k_max, (free_blocks // len(batch.idx)) * block_size))  # (each sequence: <= ceil(k / bs) blocks)
    if lo >= k_max or batch.opened_blocks(lo + 1) > free_blocks:
        return lo
    hi = k_max  # bisect: opened_blocks(lo) fits, find the last k <= k_max that does
    if batch.opened_blocks(hi) <= free_blocks:
        return hi
    while hi - lo > 1:  # opened_blocks(lo) <= free < opened_blocks(hi)
        mid = (lo + hi) // 2
        if batch.opened_blocks(mid) <= free_blocks:
            lo = mid
        else:
            hi = mid
    return lo
