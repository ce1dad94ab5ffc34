"""Closed-form estimates per strategy: single-request TTFT/TPOT, saturated throughput, max context.

A Deployment is what a strategy name resolves to on N GPUs: the layout each step runs under
(Shift has two, chosen per step by a token threshold) and the memory plan of one instance.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import memory
from .batch import decode_batch, make_batch, prefill_batch
from .cost import step_cost
from .framework import DEFAULT_FRAMEWORK, Framework, SchedulerLimits, vllm_default_limits
from .layout import LayoutError, ParallelLayout

SHIFT_THRESHOLD_TOKENS = 256  # Shift's switch point; ArcticInference docs suggest 256 (code: 512)


@dataclasses.dataclass(frozen=True)
class Deployment:
    """A strategy on N GPUs: `base` layout per instance, optional Shift `shift` layout and threshold."""

    strategy: str
    base: ParallelLayout  # includes dp = number of instances
    plan: memory.MemoryPlan
    shift: ParallelLayout | None = None
    threshold_tokens: int = SHIFT_THRESHOLD_TOKENS

    @property
    def instances(self) -> int:
        return self.base.dp

    def layout_for(self, tokens):
        """Per step: Shift runs the shift (TP) layout when tokens <= threshold, else the base."""
        if self.shift is None:
            return self.base
        return self.shift if tokens <= self.threshold_tokens else self.base

    def describe(self) -> str:
        s = str(self.base)
        return f"{s} | shift tp={self.shift.tp}" if self.shift else s


SHIFT_MIN_KV_FRACTION = 0.25  # Shift's default base keeps >= 25% of usable HBM for KV: this picks the
#   paper's bases (SP=8 for Llama-3.3-70B fp8 on 8 x H200; SP=4 x TP=2 for the 109B Llama-4 Scout)


def _min_tp(spec, hw, fw, gpus: int | None = None, shift: bool = False) -> int:
    """Smallest TP (power of two) whose instance holds the weights with room for KV; for Shift
    (two weight copies) room for at least SHIFT_MIN_KV_FRACTION of the usable memory."""
    tp = 1
    while tp <= hw.gpus_per_node:
        try:
            lay = ParallelLayout(tp=tp).validate(spec)
            if shift:
                sp = (gpus or hw.gpus_per_node) // tp
                p = memory.shift_plan(spec, ParallelLayout(tp=tp, sp=sp).validate(spec), hw, fw)
                if p.kv_bytes_per_gpu >= SHIFT_MIN_KV_FRACTION * p.usable_bytes_per_gpu:
                    return tp
            elif memory.plan(spec, lay, hw, fw).kv_capacity_tokens > 0:
                return tp
        except LayoutError:
            pass
        tp *= 2
    raise LayoutError(f"{spec.name} ({spec.weight_bytes / 1e9:.0f} GB of weights) does not fit "
                      f"{hw.gpus_per_node} x {hw.name} with any TP degree")


def deployment(strategy: str, spec, hw, gpus: int, fw: Framework = DEFAULT_FRAMEWORK,
               threshold_tokens: int = SHIFT_THRESHOLD_TOKENS) -> Deployment:
    """Resolve a strategy name (dp, tp, pp, sp, shift, ep) or a layout ('tp=2,pp=4') on `gpus`."""
    s = strategy.strip().lower()
    if gpus > hw.gpus_per_node:
        raise LayoutError(f"--gpus {gpus} exceeds the {hw.gpus_per_node} GPUs of a {hw.name} node")
    if "=" in s:
        lay = ParallelLayout.parse(s)
        inst = lay.gpus_per_instance
        if gpus % inst:
            raise LayoutError(f"layout {s} uses {inst} GPUs per instance, which does not divide {gpus} GPUs")
        if lay.dp == 1:
            lay = dataclasses.replace(lay, dp=gpus // inst)
    elif s in ("tp", "pp", "sp"):
        lay = ParallelLayout(**{s: gpus})
    elif s == "dp":
        t = _min_tp(spec, hw, fw)
        lay = ParallelLayout(tp=t, dp=gpus // t)
    elif s == "ep":
        t = _min_tp(spec, hw, fw) if not spec.is_moe else 1
        lay = ParallelLayout(tp=t, dp=gpus // t, ep=gpus if spec.is_moe else 1)
    elif s == "shift":
        t = _min_tp(spec, hw, fw, gpus, shift=True)
        base = ParallelLayout(tp=t, sp=gpus // t).validate(spec, gpus)
        shift = ParallelLayout(tp=gpus).validate(spec, gpus)
        return Deployment("shift", base, memory.shift_plan(spec, base, hw, fw), shift, threshold_tokens)
    else:
        raise LayoutError(f"unknown strategy {strategy!r}: dp, tp, pp, sp, shift, ep or a layout like tp=2,pp=4")
    lay.validate(spec, gpus)
    return Deployment(s, lay, memory.plan(spec, instance_layout(lay), hw, fw))


def instance_layout(lay: ParallelLayout) -> ParallelLayout:
    """The layout one engine (a DP rank) runs: dp=1, unless EP spans several DP ranks, in which
    case dp stays the number of ranks one expert group spans (cost and memory ignore dp)."""
    return dataclasses.replace(lay, dp=max(1, lay.ep // (lay.tp * lay.sp)))


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
             threshold_tokens: int = SHIFT_THRESHOLD_TOKENS) -> dict:
    """One row: strategy, layout, ttft_ms, tpot_ms, throughput_tokens_per_s, max_context_tokens."""
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
        "max_context_tokens": int(dep.plan.kv_capacity_tokens),
        "weights_gb_per_gpu": (dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu) / 1e9,
        "saturated_concurrency": sat["concurrency"],
    }
