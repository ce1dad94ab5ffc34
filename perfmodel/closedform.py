"""Closed forms of one static deployment: a lone request's TTFT and TPOT, and the saturated steady state.

perfmodel.estimate builds its rows from these, and so do the dynamic strategies' closed forms
(perfmodel.seesaw, perfmodel.disagg), which estimate in turn dispatches to: they live below all of them.
"""
from __future__ import annotations

import numpy as np

from .batch import decode_batch, make_batch, prefill_batch
from .cost import dispatches_experts, step_cost
from .deploy import instance_layout
from .framework import DEFAULT_FRAMEWORK, SchedulerLimits


def _step_s(dep, spec, hw, batch, tokens, prof, fw, lone: bool = True):
    """A step of one instance. `lone`: a lone request's, whose rank, where it is one of dp attention-DP
    ranks of an EP group, runs beside idle ones, so the routed experts see 1 / dp of an equally loaded
    group's tokens (as the simulator's lock-step ticks cost them: simulator/engine/lockstep.py); else
    every rank equally loaded (the saturated steady state)."""
    lay = instance_layout(dep.layout_for(tokens))
    share = 1.0 / lay.dp if lone and dispatches_experts(lay) else 1.0
    return step_cost(spec, lay, hw, batch, prof, fw, load_share=share)


def frontend_s(fw, input_tokens: int) -> float:
    """Seconds from a lone request's send to its engine: the front end's micro-batch window, if it waits
    for more prompts, and the tokenization (simulator/cluster/frontend.py; none without a tokenization cost)."""
    if fw.tokenize_s_per_token <= 0:
        return 0.0
    return fw.tokenize_batch_wait_s + fw.tokenize_s_per_token * input_tokens


def ttft_s(dep, spec, hw, input_tokens: int, limits: SchedulerLimits, prof=None, fw=DEFAULT_FRAMEWORK):
    """Time to first token of one request alone: the front end's tokenization of its prompt (alone, it
    waits out a micro-batch window: frontend_s), then its prompt in chunks of the token budget."""
    chunk = limits.max_num_batched_tokens
    t, done = frontend_s(fw, input_tokens), 0
    while done < input_tokens:
        n = min(chunk, input_tokens - done)
        t += float(_step_s(dep, spec, hw, prefill_batch(n, 1, done), n, prof, fw).total_s)
        done += n
    return t


def tpot_s(dep, spec, hw, input_tokens: int, output_tokens: int, prof=None, fw=DEFAULT_FRAMEWORK):
    """Mean time per output token of one request alone (decode steps after the first token)."""
    steps = max(1, output_tokens - 1)
    ctx = input_tokens + 1 + np.arange(steps)
    return float(np.mean(_step_s(dep, spec, hw, decode_batch(np.ones(steps), ctx), 1, prof, fw).total_s))


def saturated_throughput(dep, spec, hw, input_tokens: int, output_tokens: int, limits: SchedulerLimits,
                         prof=None, fw=DEFAULT_FRAMEWORK) -> dict:
    """Steady state of vLLM v1 continuous batching under unlimited demand, per instance x instances.

    Each step decodes every running request and fills the rest of the token budget with prefill
    chunks. A request takes I prefill tokens (its first token comes with the last chunk) and O - 1
    decode steps. Little's law with r completions per step: prefill tokens p = r I, decoding
    requests d = r (O - 1), p + d = budget, r capped by max_num_seqs and KV capacity (a running
    request holds I + O/2 tokens on average: admission takes the blocks free now).
    """
    I, O = input_tokens, max(output_tokens, 1)
    dec = O - 1
    budget = limits.max_num_batched_tokens * dep.base.pp  # pp batches in flight (vLLM V1 batch queue)
    kv_seqs = dep.plan.kv_capacity_tokens / (I + O / 2.0)
    r = budget / (I + dec)
    if dec:
        r = min(r, limits.max_num_seqs / dec, kv_seqs / dec)
    elif kv_seqs < 1:
        r = 0.0
    d, p = r * dec, r * I
    if r <= 0 or (dec and d < 1):
        return {"throughput_tokens_per_s": 0.0, "concurrency": 0, "step_s": float("nan")}
    chunk_ctx = I / 2.0  # a prefill chunk attends on average to half the prompt before it
    batch = make_batch(prefill_tokens=p, prefill_seqs=max(1.0, r), prefill_pairs=p * (chunk_ctx + 0.5),
                       prefill_kv_tokens=p + max(1.0, r) * chunk_ctx,
                       decode_seqs=d, decode_kv_tokens=d * (I + O / 2.0))
    t = float(_step_s(dep, spec, hw, batch, d + p, prof, fw, lone=False).total_s)
    # the front end's one tokenizer thread passes at most 1 / (c x I) requests a second to every instance
    # together (simulator/cluster/frontend.py): below the engines' rate, the engines wait for it
    engines_rps = r / t * dep.instances
    front_rps = 1.0 / (fw.tokenize_s_per_token * I) if fw.tokenize_s_per_token > 0 else float("inf")
    share = min(1.0, front_rps / engines_rps)
    return {"throughput_tokens_per_s": share * engines_rps * (I + O), "concurrency": share * d * dep.instances,
            "step_s": t}
