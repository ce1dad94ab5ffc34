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


SGLANG = {"scheduler": "sglang", "block_size": 1, "schedule_order": "prefill-first"}


@pytest.mark.parametrize("framework_rule", [{}, {"scheduler": "trtllm"}, {"enable_chunked_prefill": False},
                                            SGLANG, {"schedule_order": "prefill-first"}])
def test_fast_path_equals_step_by_step_under_overload(framework_rule):
    fast, slow = run_both(_overload(), util=0.16, engine=dict(framework_rule))
    assert_same_requests(fast, slow)
    f = fast.requests.frame()
    assert (f["status"] == "completed").all() and f["preemptions"].sum() >= 0
    assert len(fast.steps) < len(slow.steps)


@pytest.mark.sources  # (patches the engine / traces its lines: tests/conftest.py)
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


def test_a_prompts_only_step_touches_its_prompts_not_the_running_batch():
    """Prefill first (SGLang, vLLM V0): a step that runs only admitted prompts leaves the running requests as they
    are, so it costs O(prompts), not O(batch): per request a few individual updates (its chunks, its first token),
    where ticking the batch clock and setting every waiting decoder back cost ~14 per request here (issue 36: an
    overloaded SGLang run spent 3/4 of its time there, 22 s for 20k requests against vLLM's 1.3 s)."""
    calls, orig = [0], RunningBatch.set

    def counting(self, i, computed, generated):
        calls[0] += 1
        return orig(self, i, computed, generated)

    for rule in (SGLANG, {"schedule_order": "prefill-first"}):
        calls[0] = 0
        with mock.patch.object(RunningBatch, "set", counting):
            r = run(_overload(), util=0.16, engine=rule)
        f = r.requests.frame()
        assert (f["status"] == "completed").all() and (f["generated_tokens"] == f["output_tokens"]).all()
        assert calls[0] <= 2 * len(f), rule


def test_a_request_back_at_its_old_key_completes_once():
    """A request preempted and re-admitted while the clock stands (prompts-only steps do not tick it) comes back
    with the key it left with: its stale completion entry is valid again beside the new one. It is reported once;
    twice, the batch dropped the request after it, unfinished (found by a randomised old-vs-new replay)."""
    b = RunningBatch(16)
    b.append(0, 10, 5, 10, 1)  # computed 10 (its prompt), 1 of 5 tokens sampled: 4 steps to go
    b.append(1, 10, 9, 10, 1)
    left = b.pop_tail()
    b.append(left.pos, 10, 9, 10, left.generated)  # back at the clock it left: the same key, pushed again
    b.decode(4)
    assert b.finished() == [0]
    b.remove([0])
    b.decode(4)
    assert b.finished() == [0] and b.idx == [1]


def test_reservation_sums_match_the_direct_sums():
    """SGLang's reservation (output_left: sum of min(output - generated, clip), kept in O(requests past the clip))
    and TRT-LLM's whole-length blocks (full_blocks) equal the sums over the batch after admissions, chunks,
    decodes, completions and tail preemptions; a clip other than the batch's own is summed directly."""
    rng = np.random.default_rng(13)
    clip, b, nxt = 50, RunningBatch(16, 50), 0
    for _ in range(3000):
        r = rng.random()
        if r < 0.3 or not len(b):
            out = int(rng.integers(0, 200))
            b.append(nxt, int(rng.integers(1, 300)), out, 0, 0)
            nxt += 1
        elif r < 0.5:
            i = int(rng.integers(len(b)))
            c, g = b.computed()[i], b.generated()[i]
            c = min(b.prompt[i] + g, c + int(rng.integers(1, 40)))
            b.set(i, c, min(b.output[i], g + (c == b.prompt[i] + g)))
        elif r < 0.75:
            left = [o - g for o, g in zip(b.output, b.generated())]
            b.decode(max(1, min(int(rng.integers(1, 30)), min(left))))
            done = [i for i, (o, g) in enumerate(zip(b.output, b.generated())) if g >= o]
            if done:
                b.remove(done)
        elif r < 0.9:
            b.remove(sorted(rng.choice(len(b), size=min(len(b), 2), replace=False).tolist()))
        else:
            b.pop_tail()
        gen = b.generated()
        assert b.output_left(clip) == sum(min(o - g, clip) for o, g in zip(b.output, gen))
        assert b.output_left(7) == sum(min(o - g, 7) for o, g in zip(b.output, gen))
        assert b.full_blocks == sum(-(-(p + o) // 16) for p, o in zip(b.prompt, b.output))
