"""TRT-LLM's batch waiting (EngineConfig.batch_wait_timeout_iters / batch_wait_max_tokens_ratio; TRT-LLM
py_executor.py PyExecutor._schedule, _waiting_requests): while requests decode, the prompts a step would admit are
held until the iterations held reach the timeout or they and the decoders make ratio x max_num_tokens tokens; with
no decoder they run at once. The InferenceX Llama-3.1-70B TRT-LLM H200 script set it at 1k/1k below TP 8
(scripts.py), which the 18 rows' TTFT shows (docs/fidelity.md)."""
from __future__ import annotations

import dataclasses
import shlex

import numpy as np
import pandas as pd
import pytest
from test_sim_util import assert_same_requests, run, run_both, workload

from simulator.apps.cli import main
from simulator.apps.validate.harness import harness
from simulator.apps.validate.replay import replay
from simulator.apps.validate.rows import Case
from simulator.engine.batchwait import hold
from simulator.engine.config import EngineConfig, framework_engine
from simulator.engine.scheduler import Admitted, Limits, Schedule
from simulator.run import RunSpec
from simulator.run import run as run_spec

TRT = {"scheduler": "trtllm", "block_size": 32, "enable_chunked_prefill": False, "enable_prefix_caching": False,
       "max_num_batched_tokens": 8192}


def _two(arrive_s: float = 0.05):
    """A long request decoding, then a short one arriving while it does."""
    return workload([0.0, arrive_s], [200, 100], [400, 10])


def _held_steps(res, pos: int = 1) -> int:
    """Steps that began after request `pos` arrived and before it was scheduled (a step-by-step run)."""
    f, s = res.requests.frame(), res.steps.frame()
    arrive, sched = f["arrival_s"].iloc[pos], f["scheduled_s"].iloc[pos]
    start = s["start_s"].to_numpy()
    return int(((start >= arrive) & (start < sched)).sum())


@pytest.mark.parametrize("iters", [1, 5, 20])
def test_a_prompt_arriving_mid_decode_waits_the_timeout(iters):
    plain = run(_two(), engine={**TRT, "fast_forward": False})
    held = run(_two(), engine={**TRT, "fast_forward": False, "batch_wait_timeout_iters": iters,
                               "batch_wait_max_tokens_ratio": 0.9})
    assert _held_steps(plain) == 0  # admitted at the first step boundary after it arrived
    assert _held_steps(held) == iters  # held `iters` steps (counted 0 .. iters - 1), run at the next
    f0, f1 = plain.requests.frame(), held.requests.frame()
    assert f1["ttft_ms"].iloc[1] > f0["ttft_ms"].iloc[1]


@pytest.mark.parametrize("iters, ratio", [(5, 0.01), (5, 0.0), (0, 0.9)])
def test_no_wait_when_a_bound_holds_at_once(iters, ratio):
    """0.01 x 8192 = 82 tokens: the 100-token prompt alone releases itself; a 0 bound (TRT-LLM's default of
    either) is met at once, so a wait needs both > 0."""
    plain = run(_two(), engine={**TRT, "fast_forward": False})
    got = run(_two(), engine={**TRT, "fast_forward": False, "batch_wait_timeout_iters": iters,
                              "batch_wait_max_tokens_ratio": ratio})
    assert _held_steps(got) == 0
    assert_same_requests(plain, got)


def test_no_decoder_no_wait():
    """A prompt reaching an engine with nothing decoding runs at once (TRT-LLM: no generation requests, no
    waiting), and the count it did not touch stays as it was."""
    w = workload([0.0, 30.0], [200, 100], [40, 10])  # the first has finished when the second comes
    plain = run(w, engine={**TRT, "fast_forward": False})
    got = run(w, engine={**TRT, "fast_forward": False, "batch_wait_timeout_iters": 20,
                         "batch_wait_max_tokens_ratio": 0.9})
    assert_same_requests(plain, got)


def test_prompts_gathering_past_the_token_bound_run_together():
    """Prompts held one after another are released by their tokens before the timeout: 0.09 x 8192 = 737
    tokens, which three 200-token prompts and the decoder (601) do not make and the fourth's arrival does."""
    w = workload([0.0, 0.05, 0.06, 0.07, 0.08], [200] * 5, [400, 10, 10, 10, 10])
    got = run(w, engine={**TRT, "fast_forward": False, "batch_wait_timeout_iters": 50,
                         "batch_wait_max_tokens_ratio": 0.09})
    f = got.requests.frame()
    assert f["scheduled_s"].iloc[1:].nunique() == 1  # one step admits all four
    assert 0 < _held_steps(got, 1) < 50 and _held_steps(got, 4) == 0  # released as the fourth arrived


def _busy(n: int = 300, seed: int = 3):
    rng = np.random.default_rng(seed)
    return workload(np.cumsum(rng.exponential(0.02, n)), rng.integers(100, 1500, n), rng.integers(20, 400, n))


@pytest.mark.parametrize("iters, ratio", [(20, 0.9), (3, 0.2)])
def test_fast_path_equals_step_by_step_with_batch_waiting(iters, ratio):
    eng = {**TRT, "batch_wait_timeout_iters": iters, "batch_wait_max_tokens_ratio": ratio}
    fast, slow = run_both(_busy(), engine=eng)
    assert_same_requests(fast, slow)
    assert len(fast.steps) < len(slow.steps)
    plain = run(_busy(), engine=TRT).requests.frame()
    assert fast.requests.frame()["ttft_ms"].mean() > plain["ttft_ms"].mean()  # (the wait acted)


def test_batch_waiting_is_trtllm_only_and_bounded():
    with pytest.raises(ValueError, match="TRT-LLM's"):
        EngineConfig(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        EngineConfig(**TRT, batch_wait_max_tokens_ratio=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        EngineConfig(**TRT, batch_wait_timeout_iters=-1)


def test_the_llama70b_h200_script_waits_at_1k1k_below_tp8():
    """70b_fp8_h200_trt_slurm.sh:24-28 @ 9596d23d7 (scripts.py): ratio 0.9, 20 iterations at 1k/1k and TP < 8."""
    base = Case(row=0, id="x", backend="trtllm", version="", model="meta-llama/Llama-3.1-70B", hardware="h200",
                weights="fp8", layout="tp=2", gpus=2, isl=1024, osl=1024, concurrency=8, batch_size=8,
                ttft_ms=float("nan"), tpot_ms=float("nan"), date="2025-10-29")
    eng = harness(base).engine
    assert (eng.batch_wait_timeout_iters, eng.batch_wait_max_tokens_ratio) == (20, 0.9)
    for other in (dict(layout="tp=8", gpus=8), dict(osl=8192), dict(isl=8192)):
        eng = harness(dataclasses.replace(base, **other)).engine
        assert (eng.batch_wait_timeout_iters, eng.batch_wait_max_tokens_ratio) == (0, 0.0)


@pytest.mark.parametrize("fast", [True, False])
def test_the_trtllm_preset_holds_prompts_through_its_overlap_scheduler(fast):
    """The user's path (simulate --framework trtllm: the overlap scheduler, a request seen a step late) with
    batch waiting: the fast path equals step by step and the wait lengthens TTFT."""
    def go(ff, **wait):
        eng = framework_engine("trtllm", max_num_batched_tokens=8192, fast_forward=ff, **wait)
        rs = RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=1, profile="none", framework="trtllm",
                     engine=eng)
        return run_spec(_busy(120), rs).result

    wait = dict(batch_wait_timeout_iters=10, batch_wait_max_tokens_ratio=0.5)
    got, ref = go(fast, **wait), go(False, **wait)
    assert_same_requests(got, ref)
    assert got.requests.frame()["ttft_ms"].mean() > go(fast).requests.frame()["ttft_ms"].mean()


def test_the_rule_counts_held_iterations_as_trtllm_does():
    """batchwait.hold on hand-made schedules: held -> count + 1; released by the timeout or the tokens -> 0; no
    prompt or no generation request -> untouched (py_executor.py _schedule, _waiting_requests)."""
    lim = Limits(budget=8192, chunk_cap=8192, max_seqs=64, block_size=32, reserve="request", batch_wait_iters=3,
                 batch_wait_tokens=0.5 * 8192)
    adm = (Admitted(7, 1000, 100, 0, 0),)
    decoding = Schedule([1, 1, 1000], admitted=adm, admitted_tokens=(1000,), decode_running=True, decoders=2)
    assert [hold(decoding, None, lim, c) for c in range(4)] == [(True, 1), (True, 2), (True, 3), (False, 0)]
    big = decoding._replace(admitted=(Admitted(7, 4094, 100, 0, 0),))  # 4094 + 2 = 0.5 x 8192: released
    assert hold(big, None, lim, 0) == (False, 0)
    idle = Schedule([1000], admitted=adm, admitted_tokens=(1000,))  # nothing decodes
    assert hold(idle, None, lim, 2) == (False, 2)
    nothing_new = Schedule([1, 1], decode_running=True, decoders=2)
    assert hold(nothing_new, None, lim, 2) == (False, 2)


def test_a_waiting_rows_command_carries_the_flags_and_its_prediction(tmp_path):
    """The replay of a row the script ran with batch waiting writes it into its simulate command, which gives the
    replay's means bit for bit through the CLI (simulate validate --out's simulate_command)."""
    case = Case(row=0, id="x", backend="trtllm", version="", model="meta-llama/Llama-3.1-70B", hardware="h200",
                weights="fp8", layout="tp=4", gpus=4, isl=1024, osl=1024, concurrency=4, batch_size=4,
                ttft_ms=300.0, tpot_ms=8.0, date="2025-10-29")
    r = replay(case)
    assert "--batch-wait-timeout-iters 20 --batch-wait-max-tokens-ratio 0.9" in r.command
    assert main(shlex.split(r.command)[1:] + ["--out", str(tmp_path / "run")]) == 0
    req = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    done = req[req["status"] == "completed"]
    assert (float(done["ttft_ms"].mean()), float(done["tpot_ms"].mean())) == (r.ttft_ms, r.tpot_ms)
