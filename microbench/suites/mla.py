"""Absorbed-MLA decode microbenchmark: one new token per sequence attending to its kv_len cached latents (576 wide,
shared by all heads), `num_heads` query heads on the GPU, through the first decode kernel the node can import
(microbench/mla_kernels.py: vLLM's FlashMLA, FlashMLA, FlashInfer), checked against a float64 reference,
reported as aiconfigurator's generation_mla_perf rows (latency in ms; isl 1 + step kv_len - 1 keys, as its
tables count them; columns: perfmodel/calibration/kernel_tables.py) in
generation_mla_perf_<framework>_<version>.csv beside --out, with perfmodel.mla's time for the same call.
`perfmodel calibrate` fits the profile's `mla_decode` section from them (calibration/measured.py).
Without CUDA or any of the kernels the suite writes one error row; an unsupported KV dtype, one per dtype."""
from __future__ import annotations

import dataclasses
import math

import torch

from perfmodel.calibration import kernel_tables

from .. import env, mla_kernels, timing

RANKS = "zero"
TABLE = kernel_tables.MLA  # rows go to generation_mla_perf_<framework>_<version>.csv
TOL = 2e-2  # bf16 latents and output, fp32 softmax inside the kernels
FULL_HEADS = 128  # DeepSeek-V3's query heads: tp_size column = 128 / heads on the GPU
KEY_BYTES = {"bfloat16": 2 * (mla_kernels.LATENT + mla_kernels.ROPE), "fp8": mla_kernels.LATENT + mla_kernels.ROPE}


def cases(ctx) -> list[dict]:
    sw = ctx.sweep
    found = mla_kernels.backend(ctx.device)
    fw, ver, name = ((found.framework, found.version, found.name) if isinstance(found, mla_kernels.Backend)
                     else ("vllm", env.dist_version("vllm"), "none"))
    base = dict(framework=fw, version=ver, op_name="mla_generation", kernel_source=name, mla_dtype="bfloat16",
                isl=1, cuda_graph=int(bool(ctx.args.cuda_graph and ctx.device.type == "cuda")))
    every = [dict(base, kv_cache_dtype=kv, num_heads=h, tp_size=max(1, FULL_HEADS // h), batch_size=b, step=s - 1)
             for kv in sw["mla_kv_dtypes"] for h in sw["mla_heads"] for b in sw["mla_batch"] for s in sw["mla_kv"]
             if b * s * KEY_BYTES.get(kv, 2) <= ctx.max_bytes]  # the cache within the case budget (--max-case-gb)
    if every and not isinstance(found, mla_kernels.Backend):
        return [dict(every[0], _error=found)]
    out, failed = [], set()
    for c in every:
        kv = c["kv_cache_dtype"]
        if kv in found.kv_dtypes and mla_kernels.TORCH_KV.get(kv) is not None:
            out.append(c)
        elif kv not in failed:
            failed.add(kv)
            out.append(dict(c, _error=f"unsupported kv_cache_dtype {kv!r}: {name} is timed with "
                                      f"{', '.join(found.kv_dtypes)} here"))
    return out


def predicted_ms(ctx, case):
    """perfmodel.mla.decode_time_s for the same call (DeepSeek-V3's latent), with the profile's `mla_decode`
    table where it has one; blank without a hardware preset."""
    if ctx.hw is None:
        return ""
    from perfmodel import mla  # the cost model: only when the case has run
    from perfmodel.modelspec import load_model

    spec = dataclasses.replace(load_model("deepseek-v3"), kv_dtype="fp8" if case["kv_cache_dtype"] == "fp8" else "bf16")
    b, kv = case["batch_size"], case["isl"] + case["step"]
    return float(mla.decode_time_s(float(b), float(b * kv), case["num_heads"], spec, ctx.hw, ctx.prof)) * 1e3


def run(ctx, case) -> dict:
    if case.get("_error"):
        raise RuntimeError(case["_error"])
    found = mla_kernels.backend(ctx.device)
    if not isinstance(found, mla_kernels.Backend):
        raise RuntimeError(found)
    b, h, kv, dt = case["batch_size"], case["num_heads"], case["isl"] + case["step"], case["kv_cache_dtype"]
    nbytes = b * kv * KEY_BYTES[dt]
    sets = max(1, min(timing.MAX_SETS, math.ceil(2 * ctx.cache / nbytes), ctx.max_bytes // nbytes))
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.args.seed)
    caches, table, seqlens = mla_kernels.paged(b, kv, sets, dt, ctx.device, gen)
    q = torch.randn(b, 1, h, mla_kernels.LATENT + mla_kernels.ROPE, device=ctx.device, generator=gen,
                    dtype=torch.bfloat16)  # (b, s_q = 1, heads, 576): absorbed queries
    op = found.make(seqlens, table, h, dt)
    out = op(q, caches[0])  # correctness first: the first and last sequence, every head
    for seq in sorted({0, b - 1}):
        ref = mla_kernels.reference(q, caches[0], table, kv, seq)
        timing.check(timing.rel_err(out[seq, 0].cpu(), ref), TOL, f"mla decode {found.name} b={b} kv={kv} h={h} {dt}")
    del out
    fn = lambda j: op(q, caches[j % len(caches)])  # noqa: E731
    samples, inner = timing.time_single(fn, ctx.device, ctx.sweep, ctx.args, graph=bool(case["cuda_graph"]))
    st = timing.row_times(samples, inner)
    return {"latency": st["median_us"] * 1e-3, "p10_ms": st["p10_us"] * 1e-3, "p90_ms": st["p90_us"] * 1e-3,
            "iterations": st["iterations"], "predicted_ms": predicted_ms(ctx, case)}
