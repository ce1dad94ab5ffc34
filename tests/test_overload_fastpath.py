"""Issue 36: the fast path under overload. A decode stretch that began with its queue's head refused is not
cut by requests joining the queue's tail (they cannot run before it ends), and a stretch runs as many
steps as the free KV blocks hold (RunningBatch.opened_blocks), not free // batch x block_size. Both keep
the fast path equal to the step-by-step run (the reference), checked here where they act: KV pressure and
a queue that keeps growing; the leading-decoder bookkeeping (RunningBatch.lead) is checked every step."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from test_sim_util import KVCheck, assert_same_requests, run, run_both, workload

from simulator.engine import step
from simulator.engine.batch import RunningBatch
from simulator.engine.loop import Engine


def _overload(n: int = 260, seed: int = 5):
    rng = np.random.default_rng(seed)
    return workload(np.cumsum(rng.exponential(0.004, n)) - 0.004, rng.integers(50, 1500, n),
                    rng.integers(20, 300, n))


@pytest.mark.parametrize("framework_rule", [{}, {"scheduler": "trtllm"}, {"enable_chunked_prefill": False}])
def test_fast_path_equals_step_by_step_under_overload(framework_rule):
    fast, slow = run_both(_overload(), util=0.16, engine=dict(framework_rule))
    assert_same_requests(fast, slow)
    f = fast.requests.frame()
    assert (f["status"] == "completed").all() and f["preemptions"].sum() >= 0
    assert len(fast.steps) < len(slow.steps)


def test_tail_arrivals_into_a_refused_queue_leave_the_stretch_alone():
    """The same run with every tail arrival cutting the stretch (the rule before issue 36): the same
    requests (to rounding), more step rows; so the rule acts here and changes nothing but the cost."""
    fast = run(_overload(), util=0.16)
    with mock.patch.object(Engine, "_blocks_tail", lambda self: False):
        cut = run(_overload(), util=0.16)
    assert_same_requests(fast, cut)
    assert len(fast.steps) < len(cut.steps)


def test_stretch_length_is_the_most_steps_the_free_blocks_hold():
    b = RunningBatch(16)
    for i, c in enumerate((16, 17, 30, 31, 40)):  # computed tokens: positions 0, 1, 14, 15, 8 in a block
        b.append(i, c, 60, c, 1)  # (59 steps to the first completion)
    b.decoding = True
    want = [sum(-(-(c % 16 + k) // 16) - (c % 16 > 0) for c in (16, 17, 30, 31, 40)) for k in range(1, 60)]
    assert [b.opened_blocks(k) for k in range(1, 60)] == want
    for free in range(0, 20):
        k = step.stretch_steps(b, free, 16)
        fits = [j for j in range(1, 60) if want[j - 1] <= free]
        assert k == max(fits + [1])  # the longest that fits (one step at least: the scheduler checked it)


def test_leading_decoders_are_decoders_every_step():
    class LeadCheck(KVCheck):
        def __call__(self, engine, schedule, steps, stretch):
            super().__call__(engine, schedule, steps, stretch)
            b = engine.batch
            comp, gen = b.computed(), b.generated()
            assert all(gen[i] > 0 and b.prompt[i] + gen[i] - comp[i] == 1 for i in range(b.lead)), "lead stale"
            assert b.lead <= len(b)

    for fast in (True, False):
        run(_overload(120), util=0.16, engine={"fast_forward": fast}, check=LeadCheck())


def test_batch_position_by_admission_number_matches_a_scan():
    """RunningBatch.index (a bisection over admission numbers, issue 36) answers what idx.index(pos) does
    after admissions, completions anywhere in the order, tail preemptions and re-admissions."""
    rng = np.random.default_rng(7)
    b, nxt, out = RunningBatch(16), 0, []
    for _ in range(2000):
        r = rng.random()
        if r < 0.45 or not len(b):
            pos = out.pop(0) if out and rng.random() < 0.3 else nxt  # (a preempted request comes back)
            nxt += pos == nxt
            b.append(pos, int(rng.integers(1, 500)), int(rng.integers(1, 50)), 0, 0)
        elif r < 0.85:
            at = sorted(rng.choice(len(b), size=min(len(b), int(rng.integers(1, 4))), replace=False).tolist())
            b.remove(at)
        else:
            out.append(b.pop_tail().pos)
        for pos in b.idx:
            assert b.index(pos) == b.idx.index(pos)


def test_completion_order_is_the_key_then_position_order():
    """The completion heap holds (key, position) as one int (issue 36: int comparisons): `finished` reports the
    requests a tuple heap of (output - generated, position) would, after decodes that finish some, in ascending
    batch position, and `first_completion` is the smallest remaining output; a position past 2**32 is refused."""
    rng = np.random.default_rng(11)
    b = RunningBatch(16)
    outs = {}
    for pos in rng.permutation(300).tolist():
        outs[pos] = int(rng.integers(1, 40))
        b.append(pos, int(rng.integers(1, 100)), outs[pos], 0, 0)
    b.set(0, b.prompt[0], 1)  # (one request past its prompt: a new key pushed, the old entry stale)
    outs[b.idx[0]] -= 1
    done_at = 0
    while len(b):
        assert b.first_completion() == min(outs[p] for p in b.idx) - done_at
        k = b.first_completion()
        b.decode(k)
        done_at += k
        fin = b.finished()
        want = sorted(i for i, p in enumerate(b.idx) if outs[p] == done_at)
        assert fin == want and fin  # ascending positions, every request whose output is done
        b.remove(fin)
    with pytest.raises(ValueError, match="outside"):
        b.append(2**32, 10, 10, 0, 0)
