"""Fused-MoE microbenchmark: the routed experts of one MoE layer on one GPU of a moe_tp x moe_ep group, through the
kernel vLLM runs (microbench/vllm_moe.py: fused_experts), under aiconfigurator's routing skews (routing.py),
checked against a float64 reference, reported as aiconfigurator's moe_perf rows (latency in ms; columns:
perfmodel/calibration/kernel_tables.py) in moe_perf_vllm_<version>.csv beside --out, with the perf model's time
for the same layer. `perfmodel calibrate` fits the profile's `moe` section from them (calibration/measured.py).

A row's layer: num_tokens tokens enter the GPU (all of the group's tokens: EP inside the TP group, vLLM's naive
dispatch), routed over all num_experts; with EP the GPU holds experts 0 .. E/ep - 1 at full width (the busiest
rank's, routing.py), with MoE-TP 1/tp of every expert's width. Weights: (E/ep) x 3 x H x I/tp x bytes.
Without CUDA or vLLM the suite writes one error row; a format this vLLM cannot run, one error row per format.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from perfmodel.calibration import kernel_tables
from perfmodel.modelspec import load_model

from .. import routing, timing, vllm_moe
from ..shapes import moe_shapes, moe_splits

RANKS = "zero"  # single-device op: rank 0 times it while the other ranks wait
TABLE = kernel_tables.MOE  # rows go to moe_perf_<framework>_<version>.csv, not the measurement CSV
ROUTER_DRAWS = 5  # router outputs timed in turn (aiconfigurator's collector averages 5 power-law draws)
CHECK_TOKENS = 8  # tokens compared with the float64 reference
# ||out - ref|| / ||ref||: bf16 weights and output (2^-8 per element); fp8: the kernel quantises the activations
# per 128 channels twice (e4m3: up to 2^-4 relative per element, ~3% rms each)
TOL = {"bfloat16": 2e-2, "fp8_block": 1e-1}
ELEM = {"bfloat16": 2, "fp8_block": 1}  # weight bytes per parameter


def _weight_bytes(case) -> int:
    """One GPU's expert weights: (E/ep) experts x (gate, up, down) x H x I/tp x bytes."""
    return (case["num_experts"] // case["moe_ep_size"] * 3 * case["hidden_size"]
            * case["inter_size"] // case["moe_tp_size"] * ELEM.get(case["moe_dtype"], 2))


def _fits(case, max_bytes: int) -> bool:
    """The layer splits evenly, block-fp8 blocks tile it (H and I/tp multiples of 128), its weights fit the
    case budget (--max-case-gb)."""
    h, i, e, tp, ep = (case[c] for c in ("hidden_size", "inter_size", "num_experts", "moe_tp_size", "moe_ep_size"))
    blocks = vllm_moe.QUANTS.get(case["moe_dtype"]) is None or (h % vllm_moe.BLOCK == 0
                                                                and (i // tp) % vllm_moe.BLOCK == 0)
    return e % ep == 0 and i % tp == 0 and blocks and _weight_bytes(case) <= max_bytes


def cases(ctx) -> list[dict]:
    sw = ctx.sweep
    base = dict(framework="vllm", version=vllm_moe.version(), op_name="moe", kernel_source=vllm_moe.KERNEL,
                cuda_graph=int(bool(ctx.args.cuda_graph and ctx.device.type == "cuda")))
    every = [dict(base, moe_dtype=dt, num_tokens=n, hidden_size=s.hidden_size, inter_size=s.inter_size, topk=s.topk,
                  num_experts=s.num_experts, moe_tp_size=tp, moe_ep_size=ep, distribution=r, _model=s.model)
             for s in moe_shapes([ctx.spec, *map(load_model, sw["moe_models"])])
             for dt in sw["moe_dtypes"] for tp, ep in moe_splits(sw["moe_tp"], sw["moe_ep"])
             for r in sw["moe_routings"] for n in sw["moe_tokens"]]
    every = [c for c in every if _fits(c, ctx.max_bytes)]  # in order: one weight set serves a run of cases
    why = vllm_moe.unavailable(ctx.device) if every else ""
    if why:  # no CUDA or no vLLM: one row says so
        return [dict(every[0], _error=why)]
    out, failed = [], set()
    for c in every:
        bad = vllm_moe.dtype_unsupported(c["moe_dtype"], ctx.device)
        if bad and c["moe_dtype"] not in failed:
            out.append(dict(c, _error=bad))
            failed.add(c["moe_dtype"])
        elif not bad:
            out.append(c)
    return out


def _experts(ctx, case) -> list:
    """Rotating weight sets of the case's layer (enough that one pass reads twice the last-level cache, within
    the case budget), kept in ctx.pool while consecutive cases share the layer."""
    key = ("moe", *(case[c] for c in ("moe_dtype", "hidden_size", "inter_size", "num_experts", "moe_tp_size",
                                      "moe_ep_size")))
    if ctx.pool.get("moe_key") != key:
        ctx.pool.pop("moe_experts", None)  # free the previous layer's weights first (GPU memory)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        nbytes = _weight_bytes(case)
        sets = max(1, min(math.ceil(2 * ctx.cache / nbytes), ctx.max_bytes // nbytes))
        gen = torch.Generator(device=ctx.device).manual_seed(ctx.args.seed)
        ctx.pool["moe_experts"] = [
            vllm_moe.make_experts(case["num_experts"] // case["moe_ep_size"], case["hidden_size"],
                                  case["inter_size"] // case["moe_tp_size"], case["moe_dtype"], ctx.device, gen)
            for _ in range(sets)]
        ctx.pool["moe_key"] = key
    return ctx.pool["moe_experts"]


def _check_rows(ids: torch.Tensor, emap) -> torch.Tensor:
    """Up to CHECK_TOKENS tokens routed to at least one local expert (all-remote tokens give zeros)."""
    local = torch.ones_like(ids, dtype=torch.bool) if emap is None else emap.cpu()[ids.long()] >= 0
    rows = torch.nonzero(local.any(dim=1)).flatten()[:CHECK_TOKENS]
    return rows if len(rows) else torch.arange(min(CHECK_TOKENS, ids.shape[0]))


def predicted_ms(ctx, case):
    """perfmodel.cost's time for the same layer (its fused-MoE formula x the profile's measured factor), where
    the model's own routing skew is the row's (knobs.moe_routing), else blank."""
    from perfmodel import cost  # the cost model: only when the case has run
    from perfmodel.calibration.moe import layout_of
    from perfmodel.calibration.moe_sources import MODEL_DTYPE
    from perfmodel.knobs import moe_routing

    spec = load_model(case["_model"])
    if ctx.hw is None or moe_routing(spec) != case["distribution"] or case["moe_dtype"] not in MODEL_DTYPE:
        return ""
    one = dataclasses.replace(spec, num_layers=1, num_moe_layers=1, weight_dtype=MODEL_DTYPE[case["moe_dtype"]])
    t = cost.routed_experts_s(one, layout_of(case["moe_tp_size"], case["moe_ep_size"]), ctx.hw,
                              float(case["num_tokens"]), ctx.prof)
    return float(t) * 1e3


def run(ctx, case) -> dict:
    if case.get("_error"):
        raise RuntimeError(case["_error"])
    n, h, e, k, ep = (case[c] for c in ("num_tokens", "hidden_size", "num_experts", "topk", "moe_ep_size"))
    dt = case["moe_dtype"]
    experts = _experts(ctx, case)
    emap = vllm_moe.expert_map(e, ep, ctx.device)
    op = vllm_moe.make_op(e, emap, vllm_moe.QUANTS[dt], experts)
    gen = torch.Generator().manual_seed(ctx.args.seed)
    draws = [routing.route(n, e, k, ep, case["distribution"], gen) for _ in range(ROUTER_DRAWS)]
    draws = [(w.to(ctx.device), ids.to(ctx.device)) for w, ids in draws]
    xs = timing.input_sets(ctx.pool, ctx.device, torch.bfloat16, [(n, h)], ctx.cache, ctx.max_bytes,
                           seed=ctx.args.seed)  # hidden states (n, H) bf16
    with vllm_moe.config_context():
        out = op(xs[0][0], 0, *draws[0])  # correctness first
        rows = _check_rows(draws[0][1].cpu(), emap)
        ref = vllm_moe.reference(xs[0][0], experts[0], draws[0][0].cpu(), draws[0][1].cpu(), emap, rows)
        timing.check(timing.rel_err(out[rows.to(out.device)].cpu(), ref), TOL[dt],
                     f"moe {dt} n={n} h={h} i={case['inter_size']} e={e} k={k} tp={case['moe_tp_size']} ep={ep}")
        del out
        fn = lambda j: op(xs[j % len(xs)][0], j % len(experts), *draws[j % len(draws)])  # noqa: E731
        samples, inner = timing.time_single(fn, ctx.device, ctx.sweep, ctx.args, graph=bool(case["cuda_graph"]))
    st = timing.row_times(samples, inner)
    return {"latency": st["median_us"] * 1e-3, "p10_ms": st["p10_us"] * 1e-3, "p90_ms": st["p90_us"] * 1e-3,
            "iterations": st["iterations"], "predicted_ms": predicted_ms(ctx, case)}
