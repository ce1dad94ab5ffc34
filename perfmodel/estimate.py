"""Closed-form estimates per strategy: single-request TTFT/TPOT, saturated throughput, max context.

Each estimate runs on a perfmodel.deploy.Deployment (the layouts and memory plan a strategy name
resolves to on N GPUs).
"""
from __future__ import annotations

import numpy as np

from .batch import decode_batch, make_batch, prefill_batch
from .cost import step_cost
from .deploy import deployment, instance_layout
from .framework import DEFAULT_FRAMEWORK, Framework, SchedulerLimits, vllm_default_limits
from .knobs import SHIFT_THRESHOLD_TOKENS
from .layout import LayoutError
from .modelspec import resolve_max_model_len


def _step_s(dep, spec, hw, batch, tokens, prof, fw):
    lay = instance_layout(dep.layout_for(tokens))
    return step_cost(spec, lay, hw, batch, prof, fw)


def ttft_s(dep, spec, hw, input_tokens: int, limits: SchedulerLimits, prof=None, fw=DEFAULT_FRAMEWORK):
    """Time to first token of one request alone: its prompt in chunks of the token budget."""
    chunk = limits.max_num_batched_tokens
    t, done = 0.0, 0
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
    t = float(_step_s(dep, spec, hw, batch, d + p, prof, fw).total_s)
    return {"throughput_tokens_per_s": r * (I + O) / t * dep.instances, "concurrency": d * dep.instances,
            "step_s": t}


def estimate(strategy: str, spec, hw, gpus: int, input_tokens: int, output_tokens: int,
             prof=None, fw: Framework = DEFAULT_FRAMEWORK, limits: SchedulerLimits | None = None,
             threshold_tokens: int = SHIFT_THRESHOLD_TOKENS, max_model_len: int | None = None) -> dict:
    """One row: strategy, layout, ttft_ms, tpot_ms, throughput_tokens_per_s, max_context_tokens (the
    longest request that fits both max_model_len and one instance's KV), kv_capacity_tokens (one instance)."""
    max_len = resolve_max_model_len(spec, max_model_len)  # the model's, or --max-model-len (at most that)
    if input_tokens < 1:
        raise ValueError(f"--input {input_tokens}: a request has at least 1 prompt token")
    if output_tokens < 0:
        raise ValueError(f"--output {output_tokens} must be >= 0")
    if input_tokens + output_tokens > max_len:  # vLLM rejects it (context_length), as the simulator does
        raise ValueError(f"--input {input_tokens} + --output {output_tokens} tokens exceed max_model_len "
                         f"{max_len} of {spec.name}: vLLM rejects such a request")
    if spec.attention_chunk_tokens and input_tokens + output_tokens > spec.attention_chunk_tokens:
        raise ValueError(f"{spec.name}: attention_chunk_size={spec.attention_chunk_tokens}: chunked local attention "
                         f"past one chunk is not modelled yet (--input + --output <= {spec.attention_chunk_tokens})")
    limits = limits or vllm_default_limits(hw)
    dep = deployment(strategy, spec, hw, gpus, fw, threshold_tokens)
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit {dep.describe()} on {hw.name}: "
                          f"{dep.plan.weight_bytes_per_gpu / 1e9:.1f} GB weights per GPU vs "
                          f"{dep.plan.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    sat = saturated_throughput(dep, spec, hw, input_tokens, output_tokens, limits, prof, fw)
    return {
        "strategy": strategy, "layout": dep.describe(),
        "ttft_ms": 1e3 * ttft_s(dep, spec, hw, input_tokens, limits, prof, fw),
        "tpot_ms": 1e3 * tpot_s(dep, spec, hw, input_tokens, output_tokens, prof, fw),
        "throughput_tokens_per_s": sat["throughput_tokens_per_s"],
        "max_context_tokens": int(min(max_len, dep.plan.kv_capacity_tokens,
                                      spec.attention_chunk_tokens or max_len)),  # (modelled up to one chunk)
        "kv_capacity_tokens": int(dep.plan.kv_capacity_tokens),
        "weights_gb_per_gpu": (dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu) / 1e9,
        "saturated_concurrency": sat["concurrency"],
    }
