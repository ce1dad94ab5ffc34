"""Regressions: a PP engine holds pp batches of `budget` tokens but one request gets at most
`budget` a step; --schedule-order prefill-first runs prompts before decodes (it was ignored)."""
import numpy as np

from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model
from simulator.cluster.simulate import SimConfig, simulate
from simulator.engine.config import EngineConfig
from simulator.workload import make_workload


def _run(n, inp, out, arrival_gap_s=0.0, **cfg):
    wl = make_workload({"arrival_s": np.arange(n) * arrival_gap_s, "input_tokens": np.full(n, inp),
                        "output_tokens": np.full(n, out)})
    res = simulate(wl, load_model("llama-3.1-8b"), load_hardware("h100"), SimConfig(gpus=2, **cfg))
    return res.requests.frame(), res.steps.frame()


def test_pp_engine_runs_pp_batches_but_chunks_each_request_to_the_budget():
    eng = EngineConfig(max_num_batched_tokens=1024)
    _, steps = _run(8, 1000, 4, policy="pp", engine=eng)
    assert steps["prefill_tokens"].max() > 1024  # two 1024-token batches in flight (pp=2)
    assert steps["prefill_tokens"].max() <= 2 * 1024
    _, single = _run(1, 3000, 4, policy="pp", engine=eng)
    pre = single[single["prefill_tokens"] > 0]["prefill_tokens"].tolist()
    assert pre == [1024, 1024, 952]  # one request: budget-sized chunks, as in one vLLM batch


def test_prefill_first_runs_prompts_before_decodes():
    eng = dict(max_num_batched_tokens=4096)
    _, df = _run(40, 512, 64, arrival_gap_s=0.01, policy="tp", engine=EngineConfig(**eng))
    _, pf = _run(40, 512, 64, arrival_gap_s=0.01, policy="tp",
                 engine=EngineConfig(schedule_order="prefill-first", **eng))
    mixed = lambda s: int(((s["prefill_tokens"] > 0) & (s["decode_seqs"] > 0)).sum())  # noqa: E731
    assert mixed(df) > 0 and mixed(pf) == 0  # prefill-first never mixes a prompt with decodes
