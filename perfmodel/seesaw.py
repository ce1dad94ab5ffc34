"""Seesaw (MLSys 2025) in closed form: an offline job run as prefill phases under c_p and decode
phases under c_d, with KV parked in a CPU store between them, against static layouts.

Every time is perfmodel's: step_cost for the compute of each phase, ops.copy_time_s('h2d'/'d2h')
over the hardware's host link for the re-shard (weights reloaded from pinned host memory into the
new shards) and the KV swaps, memory.plan for GPU KV capacity and memory.cpu_kv_buffer_bytes for the
CPU store (SYSTEMS.md 4). Swaps overlap with compute (Seesaw's async swap-out and prefetcher);
weight reloads do not (the new shards are needed before the first step of the phase).
"""
from __future__ import annotations

import dataclasses
import math

from . import memory, ops, steptable
from .batch import decode_batch, prefill_batch
from .closedform import saturated_throughput
from .cost import step_cost
from .deploy import Deployment
from .framework import DEFAULT_FRAMEWORK, Framework, vllm_default_limits
from .hardware import Collective
from .layout import LayoutError, ParallelLayout


@dataclasses.dataclass(frozen=True)
class Job:
    """An offline job: `requests` prompts of `input_tokens`, each generating `output_tokens`."""

    requests: int
    input_tokens: int
    output_tokens: int

    def __post_init__(self):
        if self.requests < 1 or self.input_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"job needs requests, input_tokens, output_tokens >= 1, got {self}")


def layouts(spec, hw, gpus: int, fw: Framework = DEFAULT_FRAMEWORK) -> list[ParallelLayout]:
    """Every tp x pp instance (DP fills the GPUs) that is valid for the model and holds KV."""
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            if tp * pp > gpus or gpus % (tp * pp):
                continue
            try:
                lay = ParallelLayout(tp=tp, pp=pp).validate(spec)
            except LayoutError:
                continue
            if memory.plan(spec, lay, hw, fw).kv_capacity_tokens > 0:
                out.append(lay)
    return out


def prefill_rate(spec, lay, hw, gpus, job: Job, prof=None, fw=DEFAULT_FRAMEWORK) -> float:
    """Prompt tokens/s of the node when every instance prefills whole prompts, pp at a time (one per
    pipeline stage) or as many as the token budget holds, whichever is larger."""
    budget = vllm_default_limits(hw).max_num_batched_tokens
    seqs = max(lay.pp, budget // job.input_tokens, 1)
    t = float(step_cost(spec, lay, hw, prefill_batch(job.input_tokens, seqs), prof, fw).total_s)
    return seqs * job.input_tokens / t * (gpus // lay.gpus_per_instance)


def decode_batch_seqs(spec, lay, hw, job: Job, fw=DEFAULT_FRAMEWORK) -> int:
    """Sequences one instance decodes at once: KV capacity at full length, capped by max_num_seqs."""
    cap = memory.plan(spec, lay, hw, fw).kv_capacity_tokens // (job.input_tokens + job.output_tokens)
    return int(max(0, min(cap, vllm_default_limits(hw).max_num_seqs)))


def decode_rate(spec, lay, hw, gpus, job: Job, prof=None, fw=DEFAULT_FRAMEWORK) -> float:
    """Output tokens/s of the node decoding full batches at the mean context (input + output/2)."""
    b = decode_batch_seqs(spec, lay, hw, job, fw)
    if b < 1:
        return 0.0
    t = float(step_cost(spec, lay, hw, decode_batch(b, job.input_tokens + job.output_tokens / 2), prof, fw).total_s)
    return b / t * (gpus // lay.gpus_per_instance)


def static_time_s(spec, lay, hw, gpus, job: Job, prof=None, fw=DEFAULT_FRAMEWORK) -> dict:
    """A static layout under its two schedules. prefill-first (vLLM v0): waves of as many requests
    as the GPU KV holds, prefilled then decoded; decode-first (vLLM v1, chunked prefill): the
    saturated steady state of perfmodel.estimate. Returns {schedule: seconds}."""
    inst = gpus // lay.gpus_per_instance
    per_wave = decode_batch_seqs(spec, lay, hw, job, fw) * inst
    if per_wave < 1:
        return {"prefill-first": math.inf, "decode-first": math.inf}
    p, d = prefill_rate(spec, lay, hw, gpus, job, prof, fw), decode_rate(spec, lay, hw, gpus, job, prof, fw)
    waves = job.requests / per_wave
    prefill_first = waves * (per_wave * job.input_tokens / p + (job.output_tokens - 1) * per_wave / d)
    dep = Deployment("static", dataclasses.replace(lay, dp=inst), memory.plan(spec, lay, hw, fw))
    sat = saturated_throughput(dep, spec, hw, job.input_tokens, job.output_tokens, vllm_default_limits(hw), prof, fw)
    tput = sat["throughput_tokens_per_s"]
    chunked = job.requests * (job.input_tokens + job.output_tokens) / tput if tput > 0 else math.inf
    return {"prefill-first": prefill_first, "decode-first": chunked}


def reshard_s(spec, lay, hw, prof=None) -> float:
    """Weight reload of `lay`'s shards from pinned host memory: each GPU pulls its own bytes over
    its host link at once (Seesaw's re-sharding cost)."""
    return float(ops.copy_time_s("h2d", memory.weight_bytes_per_gpu(spec, lay), hw, prof))


def kv_bytes(spec, tokens) -> float:
    """KV bytes of `tokens` tokens over the whole model (the CPU store's unit; each GPU holds
    1/gpus of it under any tp x pp layout)."""
    return spec.kv_bytes_per_token * tokens


def swap_s(kind: str, tokens, spec, hw, gpus: int, prof=None) -> float:
    """Moving `tokens` tokens' KV between the GPUs and the CPU store ('d2h' out, 'h2d' in): every
    GPU copies its 1/gpus share over its own host link at once. Nothing to move costs nothing."""
    return float(ops.copy_time_s(kind, kv_bytes(spec, tokens) / gpus, hw, prof)) if tokens else 0.0


def prefill_step_s(compute_s: float, swap_out_tokens, spec, hw, gpus: int, prof=None) -> float:
    """A prefill step under c_p that swaps its prompts' KV (`swap_out_tokens`) out to the CPU store:
    Seesaw's async swap-out overlaps the compute, so the longer of the two paces the step."""
    return max(compute_s, swap_s("d2h", swap_out_tokens, spec, hw, gpus, prof))


def decode_stretch_s(c0: float, c1: float, kv_tokens: float, seqs: int, steps: int, pull_tokens,
                     spec, hw, gpus: int, prof=None) -> float:
    """`steps` decode steps of `seqs` sequences under c_d (step time c0 + c1 * keys, from `kv_tokens`
    keys, perfmodel.steptable) after pulling `pull_tokens` tokens' KV in from the CPU store: the
    prefetcher overlaps the pull with the first step, so only what that step does not hide adds."""
    first = c0 + c1 * kv_tokens
    pull = swap_s("h2d", pull_tokens, spec, hw, gpus, prof)
    return steptable.decode_stretch_s(c0, c1, kv_tokens, seqs, steps) + max(0.0, pull - first)


def seesaw_time_s(spec, c_p, c_d, hw, gpus, job: Job, cpu_buffer_bytes_per_gpu: float | None = None,
                  prof=None, fw=DEFAULT_FRAMEWORK) -> dict:
    """The transition-minimising schedule: prefill under c_p until the CPU store holds its fill of
    prompts' KV (swap-out overlapped with prefill), re-shard to c_d, decode them all pulling KV in
    from CPU (overlapped), re-shard back; repeat. Returns seconds per part and the total."""
    buf = cpu_buffer_bytes_per_gpu if cpu_buffer_bytes_per_gpu is not None else memory.cpu_kv_buffer_bytes(hw, gpus=gpus)
    kv_prompt_bytes = spec.kv_bytes_per_token * job.input_tokens  # whole model, one request
    per_cycle = min(job.requests, int(buf * gpus // kv_prompt_bytes))
    if per_cycle < 1 or decode_batch_seqs(spec, c_d, hw, job, fw) < 1:
        return {"total_s": math.inf}
    cycles = job.requests / per_cycle
    # each GPU swaps its shard out (none when nothing decodes: O = 1 ends at the prefill)
    swap = float(ops.copy_time_s("d2h", per_cycle * kv_prompt_bytes / gpus, hw, prof)) if job.output_tokens > 1 else 0.0
    prefill = per_cycle * job.input_tokens / prefill_rate(spec, c_p, hw, gpus, job, prof, fw)
    # the first token comes with the prefill: O - 1 decode steps (none, and no switch, for O = 1)
    decode = per_cycle * (job.output_tokens - 1) / decode_rate(spec, c_d, hw, gpus, job, prof, fw)
    no_switch = c_p == c_d or job.output_tokens == 1
    switch = 0.0 if no_switch else reshard_s(spec, c_d, hw, prof) + reshard_s(spec, c_p, hw, prof)
    parts = {"prefill_s": cycles * max(prefill, swap), "decode_s": cycles * max(decode, swap),
             "switch_s": switch * cycles - (reshard_s(spec, c_p, hw, prof) if switch else 0.0),  # no trip back at the end
             "cycles": cycles}
    parts["total_s"] = parts["prefill_s"] + parts["decode_s"] + parts["switch_s"]
    return parts


def fastest(spec, hw, gpus, job: Job, prof=None, fw=DEFAULT_FRAMEWORK) -> tuple:
    """(fastest prefill layout, fastest decode layout) among those that fit."""
    lays = layouts(spec, hw, gpus, fw)
    return (max(lays, key=lambda lay: prefill_rate(spec, lay, hw, gpus, job, prof, fw)),
            max(lays, key=lambda lay: decode_rate(spec, lay, hw, gpus, job, prof, fw)))


def compare(spec, hw, gpus, job: Job, prof=None, fw=DEFAULT_FRAMEWORK, c_p=None, c_d=None,
            cpu_buffer_bytes_per_gpu: float | None = None) -> dict:
    """Best static layout and schedule vs Seesaw. c_p / c_d not given: Seesaw's configuration search,
    the (c_p, c_d) pair with the shortest job time under this model. An equal pair never re-shards,
    so Seesaw on it is its base engine (vLLM) on that layout with the better schedule: for very short
    outputs (O <= 8 on 8 x A10) that is the search's pick, and "never below the best static" holds
    by construction there; wherever Seesaw re-shards it must win on its own."""
    lays = layouts(spec, hw, gpus, fw)
    static = {(str(lay), s): t for lay in lays for s, t in static_time_s(spec, lay, hw, gpus, job, prof, fw).items()}
    best = min(static, key=static.get)
    pairs = [(a, b) for a in ([c_p] if c_p else lays) for b in ([c_d] if c_d else lays)]
    runs = {pair: seesaw_time_s(spec, *pair, hw, gpus, job, cpu_buffer_bytes_per_gpu, prof, fw) for pair in pairs}
    for a, b in pairs:  # c_p == c_d never re-shards: Seesaw is then its base engine (vLLM) on that layout
        if a == b:
            t = min(static_time_s(spec, a, hw, gpus, job, prof, fw).values())
            if t < runs[(a, b)]["total_s"]:
                runs[(a, b)] = {"total_s": t, "prefill_s": 0.0, "decode_s": 0.0, "switch_s": 0.0,
                                "cycles": 0, "static_schedule": True}
    c_p, c_d = min(runs, key=lambda pair: runs[pair]["total_s"])
    tokens = job.requests * (job.input_tokens + job.output_tokens)
    return {"c_p": str(c_p), "c_d": str(c_d), "best_static": best, "static_tput": tokens / static[best],
            "seesaw_tput": tokens / runs[(c_p, c_d)]["total_s"], "seesaw": runs[(c_p, c_d)], "static": static}


def scaled_interconnect(hw, factor: float):
    """`hw` with GPU-GPU link and collective bandwidths times `factor` (host link unchanged): the
    what-if of SYSTEMS.md 4's "advantage shrinks as interconnect bandwidth grows"."""
    colls = {op: Collective(c.alpha_us, c.busbw_gbs * factor) for op, c in hw.collectives.items()}
    return dataclasses.replace(hw, link_bw_gbs=hw.link_bw_gbs * factor, collectives=colls)
