"""The sweeps: GEMM / attention shapes from a model and its TP degrees, message sizes, group sizes.

Pure functions of (ModelSpec, numbers): no torch, so shape generation is unit-tested on its own.
GEMM convention (docs/measurements.md): C[m,n] = A[m,k] @ W[k,n], m = tokens.
"""
from __future__ import annotations

from typing import NamedTuple

# what the gemm suite can run (--dtypes); nvfp4: W4A4 on fp4 tensor cores (compute capability 10.x only)
GEMM_DTYPES = ("bf16", "fp16", "fp32", "fp8", "nvfp4")

# Sweep parameters per (device type, quick). Sizes in bytes; GEMM axes are full factorial grids
# (perfmodel calibrate interpolates an efficiency grid, so every n is measured at every m and k).
SWEEPS = {
    ("cpu", True): dict(
        model="tiny", tp=(1, 2), model_m=(1, 16, 128, 1024),
        grid_m=(1, 16, 128, 1024), grid_n=(256, 512, 1024, 2048, 4096), grid_k=(256, 1024, 4096),
        max_gemm_flops=4e10, dtypes=("bf16",),
        prefill=((1, 128), (1, 256), (2, 256), (1, 512), (4, 256), (1, 1024)),
        decode=((1, 512), (1, 2048), (8, 256), (8, 1024), (32, 512), (32, 2048)),
        msg=(1 << 10, 64 << 20, 2), copy=(4 << 10, 64 << 20, 2),
        ulysses_tokens=(256, 1024, 4096), cas_tokens=(1, 16, 256),
        moe_models=("qwen3-30b-a3b",), moe_dtypes=("bfloat16",), moe_tokens=(1, 2, 16), moe_tp=(1,), moe_ep=(),
        moe_routings=("power_law_1.2",), mla_heads=(16,), mla_batch=(1,), mla_kv=(512,), mla_kv_dtypes=("bfloat16",),
        warmup=2, repeats=9, min_sample_s=2e-3, coll_min_sample_s=0.0, coll_budget_s=0.25, coll_max_repeats=60,
        attempts=3, max_spread=1.5, coll_max_spread=2.5),
    ("cpu", False): dict(
        model="tiny", tp=(1, 2), model_m=(1, 4, 16, 64, 256, 1024, 4096),
        grid_m=(1, 4, 16, 64, 256, 1024, 4096), grid_n=(256, 512, 1024, 2048, 4096, 8192),
        grid_k=(256, 1024, 4096, 8192), max_gemm_flops=2e11, dtypes=("bf16", "fp32"),
        prefill=tuple((b, s) for b in (1, 4) for s in (128, 256, 512, 1024, 2048)),
        decode=tuple((b, kv) for b in (1, 8, 32) for kv in (256, 1024, 4096)),
        msg=(1 << 10, 256 << 20, 2), copy=(4 << 10, 256 << 20, 2),
        ulysses_tokens=(256, 1024, 4096, 16384), cas_tokens=(1, 4, 16, 64, 256),
        moe_models=("qwen3-30b-a3b",), moe_dtypes=("bfloat16",), moe_tokens=(1, 2, 16), moe_tp=(1,), moe_ep=(),
        moe_routings=("power_law_1.2",), mla_heads=(16,), mla_batch=(1,), mla_kv=(512,), mla_kv_dtypes=("bfloat16",),
        warmup=3, repeats=25, min_sample_s=5e-3, coll_min_sample_s=0.0, coll_budget_s=1.0, coll_max_repeats=200,
        attempts=3, max_spread=1.5, coll_max_spread=2.5),
    ("cuda", True): dict(
        model="llama-3.1-8b", tp=(1, 2, 4, 8), model_m=(1, 16, 128, 1024, 8192),
        grid_m=(1, 16, 128, 1024, 8192), grid_n=(1024, 4096, 16384), grid_k=(1024, 4096, 16384),
        max_gemm_flops=3e13, dtypes=("bf16", "fp8", "nvfp4"),
        prefill=((1, 1024), (1, 4096), (4, 2048), (1, 16384)),
        decode=((1, 4096), (16, 4096), (64, 2048), (128, 8192)),
        msg=(1 << 10, 1 << 30, 4), copy=(1 << 10, 1 << 30, 4),
        ulysses_tokens=(1024, 8192, 32768), cas_tokens=(1, 16, 256),
        moe_models=("qwen3-30b-a3b",), moe_dtypes=("bfloat16", "fp8_block"), moe_tokens=(1, 2, 8, 64, 512, 4096),
        moe_tp=(1, 4), moe_ep=(4, 8), moe_routings=("power_law_1.2", "power_law_1.01"),
        mla_heads=(16, 128), mla_batch=(1, 16, 128), mla_kv=(1024, 8192), mla_kv_dtypes=("bfloat16",),
        warmup=5, repeats=20, min_sample_s=1e-3, coll_min_sample_s=1e-3, coll_budget_s=0.2, coll_max_repeats=100,
        attempts=2, max_spread=1.3, coll_max_spread=2.0),
    ("cuda", False): dict(
        model="llama-3.1-8b", tp=(1, 2, 4, 8), model_m=tuple(2 ** i for i in range(15)),
        grid_m=tuple(2 ** i for i in range(0, 15)), grid_n=tuple(2 ** i for i in range(8, 16)),
        grid_k=tuple(2 ** i for i in range(8, 16)), max_gemm_flops=5e14, dtypes=("bf16", "fp16", "fp8", "nvfp4"),
        prefill=tuple((b, s) for b in (1, 2, 4, 8) for s in (512, 1024, 2048, 4096, 8192, 16384, 32768)),
        decode=tuple((b, kv) for b in (1, 4, 16, 64, 256) for kv in (512, 2048, 8192, 32768, 131072)),
        msg=(1 << 10, 1 << 30, 2), copy=(4 << 10, 1 << 30, 2),
        ulysses_tokens=(1024, 4096, 16384, 65536), cas_tokens=(1, 4, 16, 64, 256, 1024),
        moe_models=("qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "minimax-m2.5", "deepseek-v3"),
        moe_dtypes=("bfloat16", "fp8_block"),
        moe_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
        moe_tp=(1, 2, 4, 8), moe_ep=(2, 4, 8, 16, 32), moe_routings=("power_law_1.2", "power_law_1.01"),
        mla_heads=(16, 32, 64, 128), mla_batch=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        mla_kv=(128, 512, 2048, 8192, 32768, 131072), mla_kv_dtypes=("bfloat16",),
        warmup=10, repeats=50, min_sample_s=1e-3, coll_min_sample_s=1e-3, coll_budget_s=0.5, coll_max_repeats=200,
        attempts=2, max_spread=1.3, coll_max_spread=2.0),
}


def _freeze(v):
    """Lists (from JSON) become tuples, recursively; scalars stay."""
    if isinstance(v, (str, float, int)):
        return v
    return tuple(_freeze(x) for x in v)


def sweep(device_type: str, quick: bool, overrides: dict | None = None) -> dict:
    """The sweep parameters for a device type ('cpu' / 'cuda') and mode, with `overrides` (the
    --sweep JSON) applied; an unknown key raises ValueError naming the known ones."""
    s = {k: _freeze(v) for k, v in SWEEPS[(device_type, bool(quick))].items()}
    bad = sorted(set(overrides or {}) - set(s))
    if bad:
        raise ValueError(f"unknown sweep key {bad[0]!r}: known keys are {', '.join(sorted(s))}")
    s.update({k: _freeze(v) for k, v in (overrides or {}).items()})
    return s


def geometric(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo*factor, ... up to hi inclusive (message and copy sizes)."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"geometric range needs 0 < lo={lo} <= hi={hi} and factor={factor} >= 2")
    out, x = [], lo
    while x <= hi:
        out.append(x)
        x *= factor
    return out


def group_sizes(world: int) -> list[int]:
    """Collective group sizes 2, 4, 8, ... up to `world`, plus `world` itself (ranks 0..g-1)."""
    out = [g for g in (2 ** i for i in range(1, 16)) if g <= world]
    if world >= 2 and world not in out:
        out.append(world)
    return out


def model_gemms(spec, tp: int) -> list[tuple[int, int, str]]:
    """(n, k, name) of the GEMMs one GPU runs per layer at tensor parallelism `tp`:
    column-parallel QKV and gate/up, row-parallel O and down, vocab-parallel LM head."""
    d, dh = spec.hidden_size, spec.head_dim
    q = spec.num_heads // tp * dh
    kv = max(1, spec.num_kv_heads // tp) * dh  # KV heads replicate when tp > num_kv_heads
    f = spec.dense_ffn_width // tp
    out = [(q + 2 * kv, d, "qkv"), (d, q, "o_proj"), (2 * f, d, "gate_up"), (d, f, "down"),
           (-(-spec.vocab_size // tp), d, "lm_head")]
    if spec.is_moe:  # one routed expert at full width (EP) and TP-sharded (TP over experts)
        fe = spec.intermediate_size
        out += [(2 * fe, d, "expert_gate_up"), (d, fe, "expert_down"), (spec.num_experts, d, "router")]
        if tp > 1:
            out += [(2 * fe // tp, d, "expert_gate_up_tp"), (d, fe // tp, "expert_down_tp")]
    return out


def gemm_shapes(spec, tps, model_m, grid_m=(), grid_n=(), grid_k=(), max_flops: float = float("inf")):
    """Sorted unique (m, n, k, source) GEMM shapes: the model's per-layer GEMMs at each TP degree for
    each m in `model_m`, plus the full grid m x n x k; shapes over `max_flops` are dropped."""
    shapes: dict = {}
    for tp in tps:
        if spec.num_heads % tp:
            continue  # TP must split the query heads evenly
        for n, k, name in model_gemms(spec, tp):
            for m in model_m:
                shapes.setdefault((m, n, k), f"{spec.name} tp={tp} {name}")
    for m in grid_m:
        for n in grid_n:
            for k in grid_k:
                shapes.setdefault((m, n, k), "grid")
    return sorted((m, n, k, src) for (m, n, k), src in shapes.items() if 2.0 * m * n * k <= max_flops)


def attention_shapes(spec, tps, prefill, decode) -> list[dict]:
    """Attention cases with the model's GQA heads per GPU at each TP degree: prefill (batch, seq_len)
    pairs (causal, kv_len = seq_len) and decode (batch, kv_len) pairs (one query per sequence)."""
    out, seen = [], set()
    for tp in tps:
        if spec.num_heads % tp:
            continue
        h, hkv = spec.num_heads // tp, max(1, spec.num_kv_heads // tp)
        for b, s in prefill:
            out.append(dict(op="attention_prefill", batch=b, seq_len=s, kv_len=s, num_heads=h,
                            num_kv_heads=hkv, head_dim=spec.head_dim))
        for b, kv in decode:
            out.append(dict(op="attention_decode", batch=b, seq_len=1, kv_len=kv, num_heads=h,
                            num_kv_heads=hkv, head_dim=spec.head_dim))
    uniq = []
    for c in out:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return uniq


def ulysses_heads(spec, sp: int) -> tuple[int, int]:
    """(query heads, KV heads) that travel in one Ulysses all-to-all over `sp` ranks: Q, K and V
    together when the KV heads split evenly, else Q only (K/V then go by all-gather, SYSTEMS.md)."""
    if spec.num_heads % sp:
        return 0, 0
    return spec.num_heads, spec.num_kv_heads if spec.num_kv_heads % sp == 0 else 0


def sidp_layer_bytes(spec, elem_bytes: int = 2) -> int:
    """Bytes of one dense FFN layer's weights (gate, up, down: 3 * d * f) that SiDP fetches."""
    return 3 * spec.hidden_size * spec.dense_ffn_width * elem_bytes


class MoeShape(NamedTuple):
    """One MoE layer's shape and the model it is taken from (aiconfigurator's moe_perf key columns)."""

    model: str
    hidden_size: int
    inter_size: int  # moe_intermediate_size: one expert's FFN width
    num_experts: int
    topk: int


def moe_shapes(specs) -> list[MoeShape]:
    """The MoE layer shapes of the models among `specs`, unique by shape, in order (the moe suite: --model's
    first, then the sweep's moe_models)."""
    out, seen = [], set()
    for s in specs:
        shape = MoeShape(s.name, s.hidden_size, s.intermediate_size, s.num_experts, s.experts_per_token)
        if s.num_experts and shape[1:] not in seen:  # (shape[1:]: the layer without its model's name)
            seen.add(shape[1:])
            out.append(shape)
    return out


def moe_splits(tps, eps) -> list[tuple[int, int]]:
    """(moe_tp, moe_ep) of one GPU's MoE layer: experts TP-sharded (tp, 1), or split over EP ranks at full
    width (1, ep); never both (vLLM's fused MoE runs one or the other, as aiconfigurator's vLLM tables)."""
    return [(tp, 1) for tp in tps] + [(1, ep) for ep in eps if ep > 1]


def routing_alpha(distribution: str) -> float | None:
    """'power_law_1.2' -> 1.2 (aiconfigurator's routing-skew names); 'balanced' -> None; ValueError otherwise."""
    if distribution == "balanced":
        return None
    head, _, alpha = distribution.rpartition("_")
    try:
        if head == "power_law" and float(alpha) > 0 and float(alpha) != 1.0:
            return float(alpha)
    except ValueError:
        pass
    raise ValueError(f"routing {distribution!r}: use 'balanced' or 'power_law_<alpha>' (alpha > 0, != 1)")
