"""Consistency with the perf model (issue #5, point 8).

* One request through `simulate` has the TTFT and TPOT of `perfmodel estimate` (same deployment,
  same definitions: TTFT = the prompt's prefill chunks; TPOT = mean decode step after the first
  token, simulate's (finish - first token) / (output - 1)). The simulator's StepTable interpolates
  nothing at integer batch sizes, so they agree to rounding.
* A saturated fixed batch (2000 x (1024 in, 128 out) at t = 0) runs at the estimate's steady-state
  throughput. The estimate is Little's law for the steady state of continuous batching; a finite
  batch also has a ramp-up (decodes accumulate for one output length before anything completes)
  and a drain (the last requests decode alone), so we measure the simulated steady state over the
  window from the first completion to the last admission (waiting queue non-empty, completions
  flowing: the regime the estimate describes), as tokens processed per second of engine time in
  that window. For Llama-3.3-70B on 8 x H200 TP=8 the whole run is within 5% too. Where KV, not
  the token budget, bounds concurrency the estimate is conservative (see the KV-bound test).
"""
import pytest
from test_sim_util import batch, hardware, model, run, workload

from perfmodel.deploy import deployment
from perfmodel.estimate import estimate, tpot_s, ttft_s
from perfmodel.framework import DEFAULT_FRAMEWORK, vllm_default_limits
from perfmodel.layout import ParallelLayout
from perfmodel.steptable import StepTable, decode_stretch_s

SINGLE = [  # (model, hardware, gpus, strategy)
    ("llama-3.1-8b", "h100", 1, "tp"), ("llama-3.1-8b", "h100", 2, "tp"), ("llama-3.1-8b", "h100", 2, "dp"),
    ("llama-3.1-8b", "h100", 2, "pp"), ("llama-3.1-8b", "h100", 2, "sp"), ("llama-3.1-8b", "h100", 2, "shift"),
    ("llama-3.3-70b", "h200", 8, "tp"), ("llama-3.3-70b", "h200", 8, "shift"), ("llama-3.3-70b", "h200", 8, "tp=2,pp=4"),
    ("mixtral-8x7b", "h100", 4, "ep"),
]


def _policy(strategy):
    return dict(policy="layout", layout=strategy) if "=" in strategy else dict(policy=strategy)


@pytest.mark.parametrize("model_name, hw_name, gpus, strategy", SINGLE)
@pytest.mark.parametrize("prompt, output", [(1000, 200), (20000, 40)])  # 20000: three chunks of 8192
def test_single_request_matches_estimate(model_name, hw_name, gpus, strategy, prompt, output):
    spec, hw = model(model_name), hardware(hw_name)
    # with the default framework's front end: both add its tokenization of the prompt to TTFT
    res = run(workload([0.0], [prompt], [output]), model_name=model_name, hw=hw_name, gpus=gpus,
              tokenize_s_per_token=DEFAULT_FRAMEWORK.tokenize_s_per_token,
              tokenize_batch_wait_s=DEFAULT_FRAMEWORK.tokenize_batch_wait_s, **_policy(strategy))
    f = res.requests.frame().iloc[0]
    dep = deployment(strategy, spec, hw, gpus)
    assert f["ttft_ms"] == pytest.approx(1e3 * ttft_s(dep, spec, hw, prompt, vllm_default_limits(hw)), rel=1e-9)
    assert f["tpot_ms"] == pytest.approx(1e3 * tpot_s(dep, spec, hw, prompt, output), rel=1e-6)
    row = estimate(strategy, spec, hw, gpus, prompt, output)  # what `perfmodel estimate` prints
    assert f["ttft_ms"] == pytest.approx(row["ttft_ms"], rel=1e-9)
    assert f["tpot_ms"] == pytest.approx(row["tpot_ms"], rel=1e-6)


def _steady_throughput(res) -> float:
    """Tokens per second in the steady window (first completion .. last admission), per engine
    (its steps inside the window: tokens / busy seconds), summed over engines."""
    f, s = res.requests.frame(), res.steps.frame()
    t0, t1 = f["finish_s"].min(), f["scheduled_s"].max()
    inside = s[(s["start_s"] >= t0) & (s["start_s"] + s["duration_s"] <= t1)]
    assert inside["duration_s"].sum() > 0.5 * (t1 - t0) * len(res.engines), "window too short to be steady"
    tokens = inside["prefill_tokens"] + inside["decode_seqs"] * inside["steps"]
    return float(sum(tokens[g.index].sum() / g["duration_s"].sum() for _, g in inside.groupby("engine")))


@pytest.mark.parametrize("model_name, hw_name, gpus, strategy", [
    ("llama-3.3-70b", "h200", 8, "tp"),
    ("llama-3.3-70b", "h200", 8, "shift"),
    ("llama-3.3-70b", "h200", 8, "sp"),
    # (tp=2,pp=4 left out: with pp batches of 8192 tokens in flight it is bound by max_num_seqs, not
    # the budget, and a batch arriving at t=0 then runs in admission waves, not a steady state)
])
def test_saturated_fixed_batch_throughput_matches_estimate(model_name, hw_name, gpus, strategy):
    """Token-budget-bound deployments: every steady step runs 8192 tokens, no preemption."""
    spec, hw = model(model_name), hardware(hw_name)
    n, inp, out = 2000, 1024, 128
    res = run(batch(n, inp, out), model_name=model_name, hw=hw_name, gpus=gpus, **_policy(strategy))
    f = res.requests.frame()
    assert (f["status"] == "completed").all() and f["preemptions"].sum() == 0
    est = estimate(strategy, spec, hw, gpus, inp, out)["throughput_tokens_per_s"]
    assert _steady_throughput(res) == pytest.approx(est, rel=0.05)
    whole = n * (inp + out) / f["finish_s"].max()  # vLLM's total_token_throughput of the run
    if strategy == "tp":
        assert whole == pytest.approx(est, rel=0.05)
    assert whole < 1.01 * est  # ramp-up and drain only lose throughput


@pytest.mark.parametrize("inp, out", [(1024, 128), (512, 512)])
def test_saturated_kv_bound_throughput_brackets(inp, out):
    """KV-bound (llama-3.1-8b on one H100, 469k tokens of KV): the estimate caps concurrency at
    kv_tokens / (I + O), charging every running request its final length; vLLM (and the simulator)
    admit on the blocks free now, and a running request holds I + O/2 on average. So the simulated
    steady state lies between the estimate and the estimate x (I + O) / (I + O/2): 1.051x for
    1024/128 (just outside 5%), 1.22x for 512/512. The estimate is the one to fix (reported)."""
    res = run(batch(2000, inp, out))
    assert (res.requests.frame()["status"] == "completed").all()
    est = estimate("tp", model(), hardware(), 1, inp, out)["throughput_tokens_per_s"]
    assert est < _steady_throughput(res) < est * (inp + out) / (inp + out / 2)


@pytest.mark.parametrize("layout", [
    ParallelLayout(tp=2), ParallelLayout(sp=2), ParallelLayout(sp=2, tp=2),
    ParallelLayout(pp=2), ParallelLayout(tp=2, pp=2), ParallelLayout(pp=4),
])
def test_closed_form_stretch_equals_its_steps(layout):
    """decode_affine + decode_stretch_s (fast-forward) equal the sum of time_s (step by step)."""
    tab = StepTable(model(), layout, hardware(), None, DEFAULT_FRAMEWORK, max_tokens=2048, max_seqs=256)
    for n in (1, 2, 3, 37, 200):
        c0, c1 = tab.decode_affine(n)
        k0 = n * 1500.0
        steps = sum(tab.time_s(dn=n, dkv=k0 + j * n) for j in range(40))
        assert decode_stretch_s(c0, c1, k0, n, 40) == pytest.approx(steps, rel=1e-9), f"n={n}"
