"""A decode stretch ends where step by step a waiting request would get in (engine/headroom.py: SGLang's reservation
shrinks as the batch decodes), and what a policy reads of an engine mid-stretch is what step by step shows
(Engine.free_blocks_now). Regressions of 2026-12-03 (benchmarks/differential_fuzz.py --hbm-gb 22)."""
from collections import deque
from dataclasses import replace

import numpy as np
import pytest

from simulator.engine import headroom, step
from simulator.engine.batch import RunningBatch
from simulator.engine.config import framework_engine
from simulator.engine.ratio import NewTokenRatio
from simulator.engine.scheduler import Limits, Waiting, schedule
from simulator.run import RunSpec, run
from test_sim_util import assert_same_requests, workload
from test_sim_util import run as sim_run


def test_sglang_admits_a_queued_prompt_when_the_reservation_has_decayed_on_both_paths():
    """A 13,500-token prompt behind one 2,000 + 4,000-token request on 16,642 KV tokens (SGLang, Llama-3.1-8B fp8,
    one H100 at 22 GB): refused while the running request's remaining output x new_token_ratio is reserved,
    admitted once the ratio has decayed. The closed form ran the whole decode as one stretch and admitted it at
    22.1 s instead of 2.96 s."""
    wl = workload([0.0, 0.5], [2000, 13_500], [4000, 50])
    fast, slow = (run(wl, RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=1, framework="sglang",
                                  hbm_gb=22.0, engine=replace(framework_engine("sglang"), fast_forward=f)))
                  for f in (True, False))
    assert_same_requests(fast.result, slow.result)
    req = fast.result.requests.frame()
    assert req["scheduled_s"][1] < 5.0 < req["finish_s"][0]  # in, long before the first request ends


def _batch(rows, bs, clip, m=0):
    """A decoding batch of (prompt, output, generated) rows, m decode steps on."""
    b = RunningBatch(bs, clip)
    for i, (p, o, g) in enumerate(rows):
        b.append(i, p, o, p + g - 1, g)
    b.decoding = True
    b.grow_lead()
    if m:
        b.decode(m)
    return b


@pytest.mark.parametrize("seed", range(60))
def test_first_admission_is_the_first_step_whose_schedule_admits(seed):
    """headroom.first_admission against the scheduler itself on the batch decoded m steps, for every m. The queue's
    head is sized to need the room of a step drawn from the stretch (most seeds: admitted mid-stretch), past all of
    it, or less than the first step's."""
    rng = np.random.default_rng(seed)
    bs, clip = int(rng.choice([1, 16])), int(rng.choice([60, 4096]))
    n = int(rng.integers(1, 6))
    rows = [(int(rng.integers(1, 3000)), int(rng.integers(300, 2500)), 0) for _ in range(n)]
    rows = [(p, o, int(rng.integers(1, o - 250))) for p, o, _ in rows]
    first = _batch(rows, bs, clip)
    total = first.used_blocks + int(rng.integers(2000, 20_000)) // bs
    seats = n if seed % 10 == 9 else 64  # (every tenth seed: no seat free, whatever the KV)
    lim = Limits(budget=16_384, chunk_cap=16_384, max_seqs=seats, block_size=bs, reserve="sglang",
                 prefill_first=bool(rng.integers(0, 2)), priority=bool(rng.integers(0, 2)), clip_output_tokens=clip)
    ratio = NewTokenRatio(0.7, 0.098, 600)
    ratio.decoded(int(rng.integers(0, 300)))
    free = total - first.used_blocks
    k = step.stretch_steps(first, free, bs)
    room = [free - first.opened_blocks(m) - headroom._reserved(first, lim, ratio, m) for m in range(1, k)]
    top = max(room, default=0)
    pick = rng.choice(["mid", "never", "first"], p=[0.7, 0.15, 0.15]) if room and top > room[0] else "first"
    need = {"mid": int(rng.integers(room[0] + 1, top + 1)) if pick == "mid" else 0, "never": top + 1,
            "first": room[0] if room else 1}[pick]
    w = 3  # workload positions n, n + 1, n + 2 wait: the head needs `need` blocks, then two random prompts
    size = n + w
    inp, out = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    out[n:] = rng.integers(1, 800, w)
    inp[n:] = rng.integers(1, 6000, w)
    inp[n] = max(1, need * bs - min(int(out[n]), clip))
    prio = rng.integers(1, 3, size)
    prio[n] = 0  # (the head under priority order too)
    req = Waiting(inp, out, np.zeros(size, dtype=np.int64), prio, np.arange(size, dtype=float))
    waiting = deque(range(n, size))
    truth = k
    for m in range(1, k):  # the schedule after m steps, step by step
        b = _batch(rows, bs, clip, m)
        r = NewTokenRatio(0.7, 0.098, 600)
        r.decoded(ratio.steps + m)
        if schedule(b, waiting, total - b.used_blocks, req, lim, True, None, r.value).admitted:
            truth = m
            break
    assert headroom.first_admission(first, waiting, req, lim, free, ratio, k) == truth


class _Sampler:
    """Reads each engine's free KV blocks every 7.3 ms (an instant no step of these runs ends at)."""

    def __init__(self):
        self.seen = []

    def attach(self, engine):
        def sample(env=engine.env):
            while env.now < 40.0:  # (past the runs' end: a sampler that never stops keeps the run alive)
                yield env.timeout(0.0073)
                self.seen.append((round(env.now, 9), engine.index, engine.free_blocks_now(), engine.kv.free))
        engine.env.process(sample())


def test_free_blocks_now_is_the_step_by_step_free_kv_mid_stretch():
    """Flying's hard switch sizes a TP group by its units' free KV at an arrival. Mid-stretch, `kv.free` has not
    taken the stretch's new blocks yet; free_blocks_now has, as the step-by-step engine shows them."""
    wl = workload([0.0, 0.01], [3000, 200], [1500, 900])
    samplers = (_Sampler(), _Sampler())
    fast, slow = (sim_run(wl, engine={"fast_forward": f, "block_size": 16}, util=0.16, check=s)
                  for f, s in zip((True, False), samplers))
    assert_same_requests(fast, slow)
    done = float(np.nanmax(slow.requests.finish_s))
    a = [(t, i, now) for t, i, now, _ in samplers[0].seen if t < done]
    b = [(t, i, now) for t, i, now, _ in samplers[1].seen if t < done]
    assert a == b and len(a) > 100
    assert any(x[3] != y[3] for x, y in zip(samplers[0].seen, samplers[1].seen))  # (kv.free alone lags)
