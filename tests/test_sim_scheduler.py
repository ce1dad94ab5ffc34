"""Engine semantics (vLLM v1 scheduler on paged KV): chunked prefill, first tokens, prefill-only
requests, rejections that are never losses, and recompute preemption under KV pressure."""
import warnings

import numpy as np
import pytest
from test_sim_util import assert_monotone, assert_same_requests, batch, KVCheck, run, run_both, workload

from simulator.results.metrics import check_conservation, summarize


def _frame(res):
    return res.requests.frame()


def test_chunked_prefill_then_decode_steps():
    """A 300-token prompt with a 128-token budget: chunks of 128, 128, 44, then one token per step."""
    res = run(workload([0.0], [300], [4]), engine=dict(max_num_batched_tokens=128, fast_forward=False))
    s = res.steps.frame()
    assert s["prefill_tokens"].tolist()[:3] == [128, 128, 44]
    assert s["decode_seqs"].tolist()[3:] == [1, 1, 1]
    f = _frame(res).iloc[0]
    assert f["first_token_s"] == pytest.approx(s["start_s"].iloc[3])  # sampled when the prompt is done
    assert f["generated_tokens"] == 4


@pytest.mark.parametrize("ff", [True, False])
def test_first_token_when_last_chunk_is_one_token(ff):
    """Regression: a prompt one token longer than the budget ends with a 1-token chunk, which costs
    as a decode (perfmodel.batch); it used to be applied as a decode too, so the first token was
    never recorded (TTFT and TPOT NaN, silently left out of the summary)."""
    res = run(workload([0.0], [65], [5]), engine=dict(max_num_batched_tokens=64, fast_forward=ff))
    f, s = _frame(res).iloc[0], res.steps.frame()
    assert f["first_token_s"] == pytest.approx(s["start_s"].iloc[0] + s["duration_s"].iloc[:2].sum())
    assert np.isfinite(f["ttft_ms"]) and np.isfinite(f["tpot_ms"])
    assert f["generated_tokens"] == 5


@pytest.mark.parametrize("ff", [True, False])
def test_prefill_only_request_with_one_token_last_chunk(ff):
    """Regression: an output-0 request (BurstGPT's failed requests) whose last chunk is one token
    was counted as having generated a token: summarize() raised ConservationError."""
    res = run(workload([0.0, 0.0], [65, 64], [0, 0]), engine=dict(max_num_batched_tokens=64, fast_forward=ff))
    f = _frame(res)
    assert f["status"].tolist() == ["completed", "completed"]
    assert f["generated_tokens"].tolist() == [0, 0]
    assert f["first_token_s"].isna().all()
    summarize(f, res.steps.frame(), res.engines)  # conservation holds


def test_one_output_token_has_no_tpot_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # regression: 0/0 in RequestRecords.frame() warned
        f = _frame(run(workload([0.0, 0.0], [10, 10], [1, 3])))
    assert np.isnan(f["tpot_ms"].iloc[0]) and np.isfinite(f["tpot_ms"].iloc[1])


def test_token_budget_and_max_num_seqs_are_respected():
    res = run(batch(40, 100, 20), engine=dict(max_num_batched_tokens=256, max_num_seqs=8, fast_forward=False))
    s = res.steps.frame()
    assert (s["prefill_tokens"] + s["decode_seqs"] <= 256).all()
    assert (s["prefill_seqs"] + s["decode_seqs"] <= 8).all()
    assert (_frame(res)["status"] == "completed").all()


def test_decode_first_then_waiting_fill_the_budget():
    """Running requests (decodes) are scheduled before waiting ones; the budget's rest prefills."""
    res = run(workload([0.0, 0.001], [50, 1000], [100, 5]), engine=dict(max_num_batched_tokens=300, fast_forward=False))
    s = res.steps.frame()
    mixed = s[(s["decode_seqs"] > 0) & (s["prefill_tokens"] > 0)]
    assert mixed["prefill_tokens"].iloc[0] == 299  # 1 decode + 299 prefill tokens
    assert (mixed["prefill_tokens"] + mixed["decode_seqs"] <= 300).all()


def test_too_long_for_kv_is_rejected_with_reason_not_lost():
    res = run(workload([0.0, 0.0, 0.1], [1000, 6000, 200], [100, 500, 50]), util=0.14)  # 4.7k tokens of KV
    f = _frame(res)
    assert f["status"].tolist() == ["completed", "rejected", "completed"]
    assert "KV" in f["reject_reason"].iloc[1] and "capacity" in f["reject_reason"].iloc[1]
    assert f["engine"].iloc[1] == -1
    summ = summarize(f, res.steps.frame(), res.engines)
    assert summ["completed"] + summ["rejected"] == summ["num_requests"] == 3
    assert list(summ["rejected_reasons"].values()) == [1]


def test_rejections_are_counted_by_cause():
    """Regression: the reason named each request's own size, so summary.json listed one reason per
    rejected request instead of a count per cause."""
    res = run(workload(np.zeros(5), [5000, 6000, 100, 7000, 100], [10] * 5), util=0.14)
    summ = summarize(res.requests.frame(), res.steps.frame(), res.engines)
    assert summ["rejected_reasons"] == {"longer than every engine's KV capacity (4720 tokens)": 3}


def test_unchunked_prompt_above_budget_is_rejected_not_a_crash():
    """Regression: with chunked prefill off a prompt above max_num_batched_tokens could never be
    scheduled and the engine raised RuntimeError. vLLM requires max_model_len <= the budget then,
    so such requests are rejected with that reason."""
    w = workload([0.0, 0.0, 0.0], [100, 40, 64], [3, 3, 0])
    res = run(w, engine=dict(max_num_batched_tokens=64, enable_chunked_prefill=False))
    f = _frame(res)
    assert f["status"].tolist() == ["rejected", "completed", "completed"]
    assert "max_num_batched_tokens" in f["reject_reason"].iloc[0]
    check_conservation(f)


@pytest.mark.parametrize("util, block_size", [(0.14, 16), (0.15, 1), (0.16, 64)])
def test_preemption_by_recompute_under_kv_pressure(util, block_size):
    """Demand far above the KV: requests are preempted (KV freed, re-prefilled later), KV never
    exceeds capacity, and every request still completes with all its tokens."""
    eng = KVCheck()
    rng = np.random.default_rng(2)
    n = 60
    w = workload(np.zeros(n), rng.integers(200, 2000, n), rng.integers(100, 800, n))
    res = run(w, util=util, engine=dict(block_size=block_size), check=eng)
    f = _frame(res)
    assert f["preemptions"].sum() > 0
    assert (f["status"] == "completed").all()
    assert (f["generated_tokens"] == f["output_tokens"]).all()
    cap = res.engines[0]["kv_capacity_tokens"]
    assert eng.max_used_blocks * block_size <= cap
    assert eng.max_used_blocks * block_size > 0.9 * cap  # the pressure was real
    assert (res.steps.frame()["kv_used_tokens"] <= cap).all()
    assert_monotone(res)


def test_preempted_request_resumes_with_its_tokens():
    """After recompute the request continues from the tokens it had: it samples the next one at
    the end of its re-prefill, and its first-token time is the original one."""
    rng = np.random.default_rng(3)
    n = 30
    ff, step = run_both(workload(np.zeros(n), rng.integers(500, 1500, n), rng.integers(300, 600, n)), util=0.14)
    f = _frame(ff)
    pre = f[f["preemptions"] > 0]
    assert len(pre) > 0
    assert (pre["first_token_s"] < pre["finish_s"]).all()
    assert (pre["generated_tokens"] == pre["output_tokens"]).all()


def test_priority_scheduling_serves_lower_priority_value_first():
    w = workload(np.r_[0.0, np.full(6, 0.001)], np.r_[2000, np.full(6, 500)], np.r_[50, np.full(6, 5)],
                 priority=[0, 1, 1, 1, 0, 0, 0])
    res = run(w, engine=dict(max_num_batched_tokens=512, max_num_seqs=2, priority_scheduling=True))
    f = _frame(res)
    order = f.iloc[1:].sort_values("scheduled_s")["priority"].tolist()
    assert order == [0, 0, 0, 1, 1, 1]


@pytest.mark.sources  # (patches the engine / traces its lines: tests/conftest.py)
def test_reserve_full_prompt_admits_only_prompts_that_fit_whole(monkeypatch):
    """--reserve-full-prompt (later vLLM's --scheduler-reserve-full-isl): a waiting request is
    admitted only if its whole prompt (+ recompute) fits the free blocks left for it, checked at
    every admission; under KV pressure with small chunks this stops the admit-then-preempt churn
    of first-chunk admission, and the run stays exact under fast-forward."""
    from simulator.engine import loop, scheduler
    from simulator.engine.batch import blocks_for

    seen = []

    def checked(batch, waiting, free_blocks, req, lim, admit=True, cache=None, ratio=0.0):
        """The real scheduler; every admission's whole prompt checked against the free blocks."""
        s = scheduler.schedule(batch, waiting, free_blocks, req, lim, admit, cache, ratio)
        if not s.admitted:  # (a step that preempted admits nothing)
            return s
        computed, blocks = np.asarray(batch.computed(), dtype=np.int64), np.asarray(batch.blocks(), dtype=np.int64)
        granted = np.asarray(s.granted[:len(batch)], dtype=np.int64)
        free = free_blocks - int(np.count_nonzero(computed % lim.block_size == 0)) if s.decode_running \
            else free_blocks - int((blocks_for(computed + granted, lim.block_size) - blocks).sum())
        for adm, chunk in zip(s.admitted, s.admitted_tokens):
            pos, prompt, gen = adm.pos, adm.prompt, adm.generated
            assert int(blocks_for(prompt + gen, lim.block_size)) <= free, (pos, prompt + gen, free)
            free -= int(blocks_for(chunk, lim.block_size))  # what the chunk takes; the next one sees the rest
            seen.append(pos)
        return s

    rng = np.random.default_rng(5)
    n = 40
    w = workload(np.zeros(n), rng.integers(1200, 2000, n), rng.integers(50, 400, n))
    eng = dict(max_num_batched_tokens=512)
    plain = _frame(run(w, util=0.14, engine=eng))
    monkeypatch.setattr(loop, "schedule", checked)
    ff, step = run_both(w, util=0.14, engine={**eng, "reserve_full_prompt": True})
    assert len(seen) >= n
    assert_same_requests(ff, step)
    f = _frame(ff)
    assert (f["status"] == "completed").all() and (f["generated_tokens"] == f["output_tokens"]).all()
    assert f["preemptions"].sum() < plain["preemptions"].sum()
    check_conservation(f)
