"""Closed-form estimates per strategy: single-request TTFT/TPOT, saturated throughput, max context.

Each estimate runs on a perfmodel.deploy.Deployment (the layouts and memory plan a strategy name
resolves to on N GPUs). The dynamic strategies (sidp, seesaw, flying) change layout or mode while
they serve; their rows give each number under the layout / mode it runs in, named in the row's
`mode` (see estimate_dynamic); `simulate --policy NAME` replays them on a trace.
"""
from __future__ import annotations

import math

import numpy as np

from . import deploy, memory, seesaw, sidp
from .batch import decode_batch, prefill_batch
from .closedform import frontend_s, saturated_throughput, tpot_s, ttft_s
from .cost import step_cost
from .deploy import DYNAMIC_STRATEGIES, SINGLE_NODE_STRATEGIES, deployment, instance_layout
from .disagg import estimate_row
from .framework import DEFAULT_FRAMEWORK, Framework, SchedulerLimits, vllm_default_limits
from .knobs import SHIFT_THRESHOLD_TOKENS
from .layout import LayoutError, ParallelLayout
from .modelspec import resolve_max_model_len


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
    if strategy.strip().lower() in DYNAMIC:
        return estimate_dynamic(strategy.strip().lower(), spec, hw, gpus, input_tokens, output_tokens, prof, fw,
                                limits, max_len)
    dep = deployment(strategy, spec, hw, gpus, fw, threshold_tokens)
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit {dep.describe()} on {hw.name}: "
                          f"{dep.plan.weight_bytes_per_gpu / 1e9:.1f} GB weights per GPU vs "
                          f"{dep.plan.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    sat = saturated_throughput(dep, spec, hw, input_tokens, output_tokens, limits, prof, fw)
    return {
        "strategy": strategy, "layout": dep.describe(),
        "mode": "static" if dep.shift is None else f"per step: shift layout at <= {dep.threshold_tokens} tokens",
        "ttft_ms": 1e3 * ttft_s(dep, spec, hw, input_tokens, limits, prof, fw),
        "tpot_ms": 1e3 * tpot_s(dep, spec, hw, input_tokens, output_tokens, prof, fw),
        "throughput_tokens_per_s": sat["throughput_tokens_per_s"],
        "max_context_tokens": int(min(max_len, dep.plan.kv_capacity_tokens,
                                      spec.attention_chunk_tokens or max_len)),  # (modelled up to one chunk)
        "kv_capacity_tokens": int(dep.plan.kv_capacity_tokens),
        "weights_gb_per_gpu": (dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu) / 1e9,
        "saturated_concurrency": sat["concurrency"],
    }


# ---------------------------------------------------------------------------------------------------
# Dynamic strategies. Each row holds the same keys as a static one; `mode` says which layout / mode
# each number was computed under and `note` what the closed form leaves out (simulate replays them).

DYNAMIC = DYNAMIC_STRATEGIES
SIDP_CACHE_SLOTS = 2  # the simulator's sidp defaults (simulator/policies/sidp/policy.py)


def sidp_default_tp(spec, hw, gpus: int, fw=DEFAULT_FRAMEWORK, slots: int = SIDP_CACHE_SLOTS) -> int:
    """GPUs per SiDP replica, the rule of `simulate --policy sidp` and of estimate: the static DP
    deployment's TP (the SiDP paper compares "under the same configurations") where that leaves two or
    more replicas, else the smallest TP whose SiDP plan (FFN shared over the replicas) fits with two or
    more: sharing the FFN is what lets it fit (405B bf16 on 8 x H200: static DP needs TP8, SiDP runs 2 x TP4)."""
    try:
        tp = deployment("dp", spec, hw, gpus, fw).base.tp
        if gpus // tp >= 2:
            return tp
    except LayoutError:
        pass
    for t in (t for t in range(1, gpus // 2 + 1) if gpus % t == 0):
        try:
            ParallelLayout(tp=t).validate(spec)
        except LayoutError:
            continue
        if memory.sidp_plan(spec, hw, gpus // t, t, slots, fw).fits:
            return t
    raise LayoutError(f"sidp: {spec.name} fits no SiDP layout of two or more replicas on {gpus} x {hw.name}")


def _row(layout: str, mode: str, note: str, ttft: float, tpot: float, tput: float, max_ctx: int, kv: int,
         weights_bytes: float, concurrency: float) -> dict:
    return {"layout": layout, "mode": mode, "ttft_ms": 1e3 * ttft, "tpot_ms": 1e3 * tpot,
            "throughput_tokens_per_s": tput, "max_context_tokens": int(max_ctx), "kv_capacity_tokens": int(kv),
            "weights_gb_per_gpu": weights_bytes / 1e9, "saturated_concurrency": concurrency, "note": note}


def _sidp(spec, hw, gpus, I, O, prof, fw, limits, max_len) -> dict:
    """SiDP (SYSTEMS.md 3): dp replicas of tp GPUs, layer l's FFN owned by replica l mod dp. Each step
    takes the orchestrator's mode for its mean FFN rows per replica (idle replicas count 0) against
    B* (perfmodel.sidp.b_star): WaS at or above, CaS below; hysteresis (16 decisions) is left out.
    TTFT / TPOT: one request alone (one replica busy); tok/s: every replica saturated."""
    tp = sidp_default_tp(spec, hw, gpus, fw)
    dp = gpus // tp
    cfg = sidp.SiDPConfig(dp=dp, tp=tp, cache_slots=SIDP_CACHE_SLOTS)
    plan = memory.sidp_plan(spec, hw, dp, tp, cfg.cache_slots, fw)
    if not plan.fits:
        raise LayoutError(f"{spec.name} does not fit SiDP dp={dp}, tp={tp} on {hw.name}")
    local_lay = ParallelLayout(tp=tp)
    dep = deploy.Deployment("sidp", ParallelLayout(tp=tp, dp=dp), plan)
    b_star = sidp.b_star(spec, hw, cfg, prof=prof, fw=fw)

    def mode_for(rows_mean: float) -> str:
        return "was" if rows_mean >= b_star else "cas"

    def step(local, rows: np.ndarray):
        m = mode_for(float(rows.mean()))
        if m == "was":
            return sidp.was_step_s(local, spec, hw, cfg, 0, prof, fw), m
        return sidp.cas_step_s(local, rows, 0, spec, hw, cfg, prof), m

    def alone(n: float) -> np.ndarray:
        return np.r_[float(n), np.zeros(dp - 1)]

    ttft, done, ttft_modes = frontend_s(fw, I), 0, set()  # (the front end first, as ttft_s)
    while done < I:
        n = min(limits.max_num_batched_tokens, I - done)
        local = float(step_cost(spec, local_lay, hw, prefill_batch(n, 1, done), prof, fw).total_s)
        t, m = step(local, alone(n))
        ttft, done = ttft + float(t), done + n
        ttft_modes.add(m)
    steps = max(1, O - 1)
    local = step_cost(spec, local_lay, hw, decode_batch(np.ones(steps), I + 1 + np.arange(steps)), prof, fw).total_s
    tpot_mode = mode_for(1.0 / dp)
    if tpot_mode == "was":
        tpot = float(np.mean(sidp.was_step_s(local, spec, hw, cfg, 0, prof, fw)))
    else:  # a CaS step is the local step with its own FFN swapped for the owners' service: a fixed shift
        tpot = float(np.mean(local)) + sidp.cas_step_s(1.0, alone(1.0), 0, spec, hw, cfg, prof) - 1.0
    sat = saturated_throughput(dep, spec, hw, I, O, limits, prof, fw)
    tput, sat_mode = 0.0, "-"
    if sat["throughput_tokens_per_s"] > 0:
        t_local = sat["step_s"]
        r = sat["throughput_tokens_per_s"] * t_local / (dp * (I + max(O, 1)))  # completions per replica step
        rows = np.full(dp, r * (I + max(O, 1) - 1))  # prefill + decode tokens of each replica's step
        t, sat_mode = step(t_local, rows)
        tput = sat["throughput_tokens_per_s"] * t_local / float(t)
    name = {"was": "WaS", "cas": "CaS", "-": "-"}
    mode = (f"B*={b_star} rows per replica: TTFT {'+'.join(name[m] for m in sorted(ttft_modes))}, TPOT "
            f"{name[tpot_mode]} (one request alone); tok/s {name[sat_mode]} (saturated)")
    note = ("closed form per step mode (WaS >= B* rows per replica > CaS), hysteresis left out; "
            "for a trace: simulate --policy sidp")
    return _row(f"dp={dp} x tp={tp}, FFN shared", mode, note, ttft, tpot, tput,
                min(max_len, plan.kv_capacity_tokens), plan.kv_capacity_tokens,
                plan.weight_bytes_per_gpu + plan.extra_bytes_per_gpu, sat["concurrency"])


def _seesaw(spec, hw, gpus, I, O, prof, fw, limits, max_len) -> dict:
    """Seesaw (SYSTEMS.md 4) as `simulate --policy seesaw` runs it: c_p and c_d each one tp x pp
    instance over every GPU, the fastest prefill and decode layout for this request's lengths
    (perfmodel.seesaw.prefill_rate / decode_rate). TTFT: the prompt under c_p, its KV swapped out to
    the CPU store alongside; TPOT: decode under c_d plus, spread over the O - 1 decode steps, the
    re-shard into c_d and what the first step does not hide of the KV pull. tok/s: the offline job
    (perfmodel.seesaw.seesaw_time_s: prefill phases under c_p, decode phases under c_d, CPU-parked KV)."""
    job = seesaw.Job(1, I, max(O, 1))
    whole = [lay for lay in seesaw.layouts(spec, hw, gpus, fw) if lay.gpus_per_instance == gpus]
    if not whole:
        raise LayoutError(f"seesaw: {spec.name} fits no tp x pp layout over {gpus} x {hw.name}")
    c_p = max(whole, key=lambda lay: seesaw.prefill_rate(spec, lay, hw, gpus, job, prof, fw))
    c_d = max(whole, key=lambda lay: seesaw.decode_rate(spec, lay, hw, gpus, job, prof, fw))
    plan_p, plan_d = memory.plan(spec, c_p, hw, fw), memory.plan(spec, c_d, hw, fw)
    dep_p, dep_d = deploy.Deployment("seesaw", c_p, plan_p), deploy.Deployment("seesaw", c_d, plan_d)
    switch = c_p != c_d and O > 1
    ttft = max(ttft_s(dep_p, spec, hw, I, limits, prof, fw), seesaw.swap_s("d2h", I, spec, hw, gpus, prof))
    step_d = tpot_s(dep_d, spec, hw, I, O, prof, fw)
    extra = (seesaw.reshard_s(spec, c_d, hw, prof) if switch else 0.0) \
        + max(0.0, seesaw.swap_s("h2d", I, spec, hw, gpus, prof) - step_d)
    tpot = step_d + extra / max(1, O - 1)
    big = seesaw.Job(10 ** 6, I, max(O, 1))  # a long job: the one-off trip back is negligible
    total = seesaw.seesaw_time_s(spec, c_p, c_d, hw, gpus, big, prof=prof, fw=fw)["total_s"]
    if c_p == c_d:  # never re-shards: Seesaw is its base engine on that layout, better schedule
        total = min(total, *seesaw.static_time_s(spec, c_p, hw, gpus, big, prof, fw).values())
    tput = big.requests * (I + max(O, 1)) / total if math.isfinite(total) and total > 0 else 0.0
    mode = (f"TTFT prefill c_p={c_p}; TPOT decode c_d={c_d}" + (" incl. 1 re-shard" if switch else "")
            + "; tok/s offline job (phases)")
    note = ("c_p / c_d picked for this input/output, each over all GPUs (as the simulator); "
            "tok/s is an offline job's, not a serving steady state; for a trace: simulate --policy seesaw")
    return _row(f"c_p={c_p} / c_d={c_d}", mode, note, ttft, tpot, tput,
                min(max_len, plan_p.kv_capacity_tokens, plan_d.kv_capacity_tokens), plan_d.kv_capacity_tokens,
                max(plan_p.weight_bytes_per_gpu, plan_d.weight_bytes_per_gpu),
                float(seesaw.decode_batch_seqs(spec, c_d, hw, job, fw)))  # a decode phase's batch


def _flying(spec, hw, gpus, I, O, prof, fw, limits, max_len) -> dict:
    """Flying Serving (SYSTEMS.md 5) in its two bindings. Units are the static DP instances (full
    weights each); under low load (fewer requests in flight than units) a request runs on all units
    bound into one TP group, at a live switch's cost (15 ms, before its first step): TTFT / TPOT are
    that TP binding's. Saturated, every unit serves alone: tok/s is the DP binding's. Max context:
    the widest group holds the units' KV together (zero-copy weight views move no weights)."""
    flying_switch_s = 15e-3  # simulator/policies/flying/config.py LIVE_SWITCH_MS (TARGETS.md)
    try:
        dep = deployment("dp", spec, hw, gpus, fw)
    except LayoutError as e:
        if not str(e).startswith("dp:"):
            raise
        raise LayoutError(f"flying: {spec.name} needs tp={1 << (gpus.bit_length() - 1)} per unit on {hw.name}, so "
                          f"{gpus} GPUs hold one unit: nothing to bind; use --strategies tp") from None
    unit, n = instance_layout(dep.base), dep.instances
    widths = []
    for k in (2, 4, 8):  # aligned contiguous groups inside a node (simulator/policies/flying/config.py WIDTHS)
        if k <= n and n % k == 0 and hw.gpus_per_node % (k * unit.tp) == 0:
            try:
                ParallelLayout(tp=k * unit.tp).validate(spec)
                widths.append(k)
            except LayoutError:
                pass
    k = max(widths, default=1)
    group = deploy.Deployment("flying", ParallelLayout(tp=k * unit.tp), dep.plan)
    switch = flying_switch_s if k > 1 else 0.0
    ttft = switch + ttft_s(group, spec, hw, I, limits, prof, fw)
    tpot = tpot_s(group, spec, hw, I, O, prof, fw)
    sat = saturated_throughput(dep, spec, hw, I, O, limits, prof, fw)
    mode = (f"TTFT/TPOT tp={k * unit.tp} binding (low load" + (", +15 ms switch" if k > 1 else "")
            + f"); tok/s dp={n} binding (saturated)")
    note = ("the two bindings in closed form; when the coordinator binds and releases under a trace "
            "(and priority / long-context groups): simulate --policy flying")
    return _row(f"unit {unit} x {n}, groups {'/'.join(str(w) for w in widths) or 'none'}", mode, note, ttft, tpot,
                sat["throughput_tokens_per_s"], min(max_len, k * dep.plan.kv_capacity_tokens),
                dep.plan.kv_capacity_tokens, dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu,
                sat["concurrency"])


def _disagg(spec, hw, gpus, I, O, prof, fw, limits, max_len) -> dict:
    """Disaggregated prefill/decode pools (default split): perfmodel.disagg.estimate_row says how."""
    return estimate_row(spec, hw, gpus, I, O, prof, fw, limits, max_len)


def estimate_dynamic(strategy: str, spec, hw, gpus: int, input_tokens: int, output_tokens: int, prof=None,
                     fw: Framework = DEFAULT_FRAMEWORK, limits: SchedulerLimits | None = None,
                     max_len: int | None = None) -> dict:
    """A row for sidp, seesaw, flying or disagg (keys as estimate's, plus `mode` and `note`)."""
    if gpus < 1 or gpus > hw.gpus_per_node:
        deployment("tp", spec, hw, gpus, fw)  # the static strategies' words for a bad --gpus
    if gpus > hw.gpus_per_node and strategy in SINGLE_NODE_STRATEGIES:
        raise LayoutError(f"{strategy} runs on one node ({hw.gpus_per_node} GPUs); --gpus {gpus} spans several")
    if strategy != "flying" and gpus < 2:
        raise LayoutError(f"{strategy} needs at least 2 GPUs (got --gpus {gpus})")
    limits = limits or vllm_default_limits(hw)
    max_len = max_len or spec.max_model_len
    fn = {"sidp": _sidp, "seesaw": _seesaw, "flying": _flying, "disagg": _disagg}[strategy]
    return {"strategy": strategy, **fn(spec, hw, gpus, input_tokens, output_tokens, prof, fw, limits, max_len)}
