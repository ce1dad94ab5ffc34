"""The pure scheduler (simulator.engine.scheduler.schedule): vLLM v1 decisions from plain inputs,
no SimPy, no clock, no records. Each case builds a running batch and a waiting queue by hand and
checks the Schedule against the rule it encodes."""
import subprocess
import sys
from collections import deque

import numpy as np
import pytest

from simulator.engine.batch import RunningBatch, blocks_for
from simulator.engine.scheduler import Limits, Schedule, Waiting, grant_in_order, schedule

BS = 16


def running(rows, decoding=None) -> RunningBatch:
    """A batch from (idx, prompt, output, computed, generated) tuples; blocks follow computed."""
    b = RunningBatch(BS)
    for i, p, o, c, g in rows:
        b.append(i, p, o, c, g)
    b.decoding = all(g > 0 and c == p + g - 1 for _, p, _, c, g in rows) if decoding is None else decoding
    return b


def queue(inputs, outputs=None, generated=None, priority=None, arrival=None, n=16):
    """Per-request arrays for positions 0..n-1 (waiting ones are looked up by position)."""
    def arr(v, fill):
        out = np.full(n, fill, dtype=np.int64 if fill == 0 else float)
        if v is not None:
            out[:len(v)] = v
        return out
    return Waiting(arr(inputs, 0), arr(outputs if outputs is not None else [10] * len(inputs), 0),
                   arr(generated, 0), arr(priority, 0), arr(arrival, 0.0))


def lim(**kw) -> Limits:
    return Limits(**{"budget": 64, "chunk_cap": 64, "max_seqs": 8, "block_size": BS, **kw})


REQ = queue([100, 30, 20, 5, 40, 50, 60, 70])


def test_decodes_first_then_waiting_fill_the_budget_with_chunks():
    b = running([(0, 100, 50, 109, 10), (1, 30, 5, 31, 2)])
    s = schedule(b, deque([2, 3, 4]), 100, REQ, lim(budget=64))
    assert s.decode_running and s.preempt == 0
    assert s.granted == [1, 1, 20, 5, 37]  # 62 tokens left: 20 + 5 whole, then a 37-token chunk
    assert [c.pos for c in s.admitted] == [2, 3, 4] and s.admitted_tokens == (20, 5, 37)
    assert not s.admitted_whole


def test_chunk_cap_limits_one_request_and_unchunked_prompts_must_fit_whole():
    b = running([])
    assert schedule(b, deque([0]), 100, REQ, lim(budget=64, chunk_cap=32)).granted == [32]
    s = schedule(b, deque([0, 3]), 100, REQ, lim(budget=64, chunked_prefill=False))
    assert s.admitted == () and s.granted == []  # FCFS: the 100-token head blocks the queue


def test_running_prefill_chunks_are_granted_in_order_until_the_budget():
    b = running([(0, 100, 5, 40, 0), (1, 60, 5, 0, 0)], decoding=False)
    s = schedule(b, deque([2]), 100, REQ, lim(budget=64))
    assert s.granted == [60, 4] and s.admitted == ()
    assert grant_in_order([60, 60], 64) == [60, 4]


def test_kv_pressure_preempts_from_the_tail_and_admits_nothing():
    # three decoders each entering a new block, one free block: preempting the last frees its 3
    b = running([(0, 31, 50, 32, 2), (1, 15, 50, 16, 2), (2, 47, 50, 48, 2)])
    s = schedule(b, deque([3]), 1, REQ, lim())
    assert s.preempt == 1 and s.granted == [1, 1] and s.admitted == ()
    # a tail holding no KV frees nothing: the decoder before it goes too
    b = running([(0, 31, 50, 32, 2), (1, 60, 5, 0, 0)], decoding=False)
    s = schedule(b, deque([3]), 0, REQ, lim())
    assert s.preempt == 2 and s.granted == [] and s.admitted == ()


def test_prefill_first_runs_only_prompts_when_one_is_admissible():
    b = running([(0, 100, 50, 109, 10)])
    s = schedule(b, deque([3]), 100, REQ, lim(prefill_first=True))
    assert s.granted == [0, 5] and [c.pos for c in s.admitted] == [3]
    s = schedule(b, deque(), 100, REQ, lim(prefill_first=True))
    assert s.granted == [1]  # nothing waits: the decodes run


def test_prefill_first_continues_the_chunked_prompt_before_new_ones():
    """SGLang's prefill batch: the request whose prompt is being chunked continues first, waiting prompts fill the
    rest of the budget, and the decoders wait; with nothing waiting the chunk still runs alone (SGLang forms a
    prefill batch whenever a request is chunked: scheduler._prefill_step's source). Until 2026-12-02 new prompts
    went first (the chunked one waited) and, with none waiting, the chunk ran mixed with the decodes."""
    b = running([(0, 100, 50, 109, 10), (1, 100, 5, 40, 0)], decoding=False)  # request 1: 40 of 100 computed
    s = schedule(b, deque([3, 2]), 100, REQ, lim(budget=64, prefill_first=True))
    assert s.granted == [0, 60, 4] and [c.pos for c in s.admitted] == [3] and s.decoders == 0
    alone = schedule(b, deque(), 100, REQ, lim(budget=64, prefill_first=True))
    assert alone.granted == [0, 60] and alone.admitted == () and not alone.decode_running
    assert schedule(b, deque(), 100, REQ, lim(budget=64)).granted == [1, 60]  # decode-first (vLLM) mixes them


def test_reserve_full_prompt_admits_only_whole_prompts_that_fit():
    b = running([])
    req = queue([200, 20])
    first_chunk = schedule(b, deque([0, 1]), 5, req, lim(budget=64))  # 5 blocks = 80 tokens free
    assert [c.pos for c in first_chunk.admitted] == [0] and first_chunk.admitted_tokens == (64,)
    whole = schedule(b, deque([0, 1]), 5, req, lim(budget=64, reserve_full_prompt=True))
    assert whole.admitted == ()  # 200 tokens need 13 blocks; FCFS keeps request 1 behind it


def test_priority_order_and_max_seqs_and_draining():
    b = running([(0, 100, 50, 109, 10)])
    req = queue([10, 10, 10, 10], priority=[0, 2, 1, 0], arrival=[0.0, 0.0, 0.0, 0.5])
    s = schedule(b, deque([1, 2, 3, 0]), 100, req, lim(priority=True, max_seqs=3))
    assert [c.pos for c in s.admitted] == [0, 3]  # (priority, arrival, position); 3 seqs at most
    assert schedule(b, deque([1, 2]), 100, req, lim(), admit=False).admitted == ()


def test_preempted_request_recomputes_its_generated_tokens():
    req = queue([40], generated=[7])
    s = schedule(running([]), deque([0]), 100, req, lim())
    assert s.granted == [47] and s.admitted[0].generated == 7 and s.admitted_whole


def test_schedule_is_pure_and_the_fast_path_decides_as_the_general_one():
    b = running([(0, 100, 50, 109, 10), (1, 30, 5, 31, 2)])
    before, waiting = b.columns(), deque([2, 3])
    fast = schedule(b, waiting, 100, REQ, lim())
    assert b.columns() == before and list(waiting) == [2, 3]  # inputs untouched
    b.decoding = False  # the general path over the same batch
    slow = schedule(b, waiting, 100, REQ, lim())
    assert fast.granted == slow.granted and fast.admitted == slow.admitted
    assert isinstance(fast, Schedule)


def test_the_scheduler_needs_no_simpy():
    code = "import sys, simulator.engine.scheduler, simulator.engine.batch; print('simpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("seed", range(20))
def test_random_batches_never_overcommit_budget_blocks_or_seqs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 6))
    rows = []
    for i in range(n):
        p, g = int(rng.integers(1, 200)), int(rng.integers(0, 5))
        rows.append((i, p, 50, int(rng.integers(0, p + g)) if g else int(rng.integers(0, p)), g))
    b = running(rows, decoding=False)
    req = queue(rng.integers(1, 300, 16), generated=rng.integers(0, 3, 16))
    L = lim(budget=int(rng.integers(8, 128)), chunk_cap=int(rng.integers(8, 128)), max_seqs=int(rng.integers(1, 8)))
    free = int(rng.integers(0, 30))
    s = schedule(b, deque(range(n, 16)), free, req, L)
    kept = n - s.preempt
    g = np.asarray(s.granted, dtype=np.int64)
    assert int(g.sum()) <= L.budget and (g >= 0).all()
    assert (g[:kept] <= np.asarray(b.wants())[:kept]).all() and (g <= L.chunk_cap).all()
    assert kept + len(s.admitted) <= max(L.max_seqs, kept)
    blocks, computed = np.asarray(b.blocks(), dtype=np.int64), np.asarray(b.computed(), dtype=np.int64)
    freed = int(blocks[kept:].sum())
    new = blocks_for(computed[:kept] + g[:kept], BS) - blocks[:kept]
    taken = int(new.sum()) + sum(int(blocks_for(t, BS)) for t in s.admitted_tokens)
    assert taken <= free + freed or kept == 0
