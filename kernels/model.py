"""Single-device Llama-style reference model built from a ModelSpec (never mentions parallelism).

Embedding, RMSNorm, RoPE, GQA attention over a paged KV cache (prefill, decode and mixed,
variable-length batches), SwiGLU MLP or a top-k MoE layer, LM head. The residual stream is
carried as (hidden, residual) like vLLM's fused add-norm, so a pipeline stage hands both on.
Strategies shard the *built* model in place or wrap it (kernels/tp.py, sp.py, ...).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

ROPE_THETA = 10000.0  # the bundled tiny presets' rope_theta (ModelSpec carries no rope field)
NORM_EPS = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):  # (n, d)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half convention) of x (n, H, hs) at positions pos (n,)."""
    half = x.shape[-1] // 2
    inv = ROPE_THETA ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    ang = (pos.to(torch.float64)[:, None] * inv)[:, None, :]  # (n, 1, hs/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def attend(q, k, v, pos0: int) -> torch.Tensor:
    """Causal GQA attention of t new queries q (t, H, hs) over keys k, v (Hkv, T, hs) whose
    last t entries are the new tokens (positions pos0..pos0+t-1). Returns (t, H, hs).

    torch's scaled_dot_product_attention, the kernel microbench's attention suite times (so the perf
    model's attention cost is this one's): a whole prompt (t == T) as its causal case, a decode
    (t == 1) unmasked, a later chunk with the explicit mask of its offset. The hand-written
    QK^T / mask / softmax / PV this replaced is ~4x slower at a 256-token prompt on a CPU
    (docs/sim_vs_real.md)."""
    t, T = q.shape[0], k.shape[1]
    qh, k, v = q.transpose(0, 1)[None], k[None], v[None]  # (1, H, t, hs), (1, Hkv, T, hs): 4-D inputs,
    # which the CPU flash kernel takes (3-D ones fall back to the math path, 4x slower at 256 tokens)
    if t == T or t == 1:
        o = F.scaled_dot_product_attention(qh, k, v, is_causal=t > 1, enable_gqa=True)
    else:
        qpos = pos0 + torch.arange(t, device=q.device)
        mask = torch.arange(T, device=q.device)[None, :] <= qpos[:, None]  # (t, T)
        o = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True)
    return o[0].transpose(0, 1)  # (t, H, hs)


class AttentionCore(nn.Module):
    """RoPE, KV-cache write/read and attention for the heads this module is given."""

    def __init__(self, layer_idx: int, n_heads: int, n_kv_heads: int, head_dim: int):
        super().__init__()
        self.layer_idx, self.n_heads, self.n_kv_heads, self.head_dim = layer_idx, n_heads, n_kv_heads, head_dim

    def forward(self, q, k, v, ctx):  # q (n, H*hs), k, v (n, Hkv*hs) -> (n, H*hs)
        n, hs = q.shape[0], self.head_dim
        q = rope(q.view(n, self.n_heads, hs), ctx.positions)
        k = rope(k.view(n, self.n_kv_heads, hs), ctx.positions)
        v = v.view(n, self.n_kv_heads, hs)
        out = q.new_empty(n, self.n_heads, hs)
        for i, sid in enumerate(ctx.seq_ids):
            s, e, p0 = ctx.cu[i], ctx.cu[i + 1], ctx.pos0[i]
            ctx.cache.write(self.layer_idx, sid, p0, k[s:e], v[s:e])
            kk, vv = ctx.cache.read(self.layer_idx, sid, p0 + e - s)  # (Hkv, T, hs)
            out[s:e] = attend(q[s:e], kk, vv, p0)
        return out.view(n, self.n_heads * hs)


class Attention(nn.Module):
    def __init__(self, spec, layer_idx: int):
        super().__init__()
        d, hs = spec.hidden_size, spec.head_dim
        self.wq = nn.Linear(d, spec.num_heads * hs, bias=spec.qkv_bias)
        self.wk = nn.Linear(d, spec.num_kv_heads * hs, bias=spec.qkv_bias)
        self.wv = nn.Linear(d, spec.num_kv_heads * hs, bias=spec.qkv_bias)
        self.wo = nn.Linear(spec.num_heads * hs, d, bias=False)
        self.core = AttentionCore(layer_idx, spec.num_heads, spec.num_kv_heads, hs)

    def forward(self, x, ctx):  # (n, d) -> (n, d)
        return self.wo(self.core(self.wq(x), self.wk(x), self.wv(x), ctx))


def swiglu(x, w1, w3, w2) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) with weights (f, d), (f, d), (d, f): 6*n*d*f FLOPs."""
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


class MLP(nn.Module):
    def __init__(self, d: int, f: int):
        super().__init__()
        self.w1, self.w3 = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)  # gate, up
        self.w2 = nn.Linear(f, d, bias=False)  # down

    def forward(self, x):  # (n, d) -> (n, d)
        return swiglu(x, self.w1.weight, self.w3.weight, self.w2.weight)


def route(logits: torch.Tensor, k: int) -> tuple:
    """Top-k experts per token and their weights (softmax over the k chosen logits, Mixtral)."""
    top, idx = logits.topk(k, -1)  # (n, k)
    return top.softmax(-1), idx


def run_experts(rows: torch.Tensor, expert_ids: torch.Tensor, experts, first: int = 0) -> torch.Tensor:
    """Each row through its expert (ids relative to `first`, the first expert held here)."""
    out = torch.zeros_like(rows)
    for e in expert_ids.unique().tolist():
        sel = expert_ids == e
        out[sel] = experts[e - first](rows[sel])
    return out


def combine(y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sum of each token's k expert outputs y (n*k, d) in top-k order -> (n, d)."""
    n, k = weights.shape
    return (y.view(n, k, y.shape[-1]) * weights[..., None]).sum(1)


class MoE(nn.Module):
    def __init__(self, spec):
        super().__init__()
        d = spec.hidden_size
        self.top_k = spec.experts_per_token
        self.router = nn.Linear(d, spec.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(d, spec.intermediate_size) for _ in range(spec.num_experts))
        self.shared = MLP(d, spec.shared_expert_size) if spec.shared_expert_size else None

    def forward(self, x):  # (n, d) -> (n, d)
        w, idx = route(self.router(x), self.top_k)
        out = combine(run_experts(x.repeat_interleave(self.top_k, 0), idx.flatten(), self.experts), w)
        return out + self.shared(x) if self.shared is not None else out


def is_moe_layer(spec, i: int) -> bool:
    """MoE layers spread evenly over the stack (all of them for Mixtral-like specs)."""
    m, L = spec.num_moe_layers, spec.num_layers
    return spec.is_moe and (i + 1) * m // L > i * m // L


class Block(nn.Module):
    def __init__(self, spec, i: int):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(spec.hidden_size), RMSNorm(spec.hidden_size)
        self.attn = Attention(spec, i)
        self.mlp = MoE(spec) if is_moe_layer(spec, i) else MLP(spec.hidden_size, spec.dense_ffn_width)

    def forward(self, h, res, ctx):  # (n, d), (n, d) or None -> (n, d), (n, d)
        res = h if res is None else h + res
        h = self.attn(self.attn_norm(res), ctx)
        res = h + res
        return self.mlp(self.mlp_norm(res)), res


class Transformer(nn.Module):
    def __init__(self, spec):
        super().__init__()
        if spec.sliding_window:
            raise ValueError(f"{spec.name}: sliding-window layers are not implemented in kernels/")
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def run_layers(self, h, res, ctx):
        for layer in self.layers:
            h, res = layer(h, res, ctx)
        return h, res

    def logits(self, h, res, ctx):  # -> (rows, V) for the tokens ctx.last_idx
        return self.head(self.norm(h + res)[ctx.last_idx])

    def forward(self, tokens, ctx):  # tokens (n,) -> (rows, V)
        h, res = self.run_layers(self.embed(tokens), None, ctx)
        return self.logits(h, res, ctx)


def build_model(spec, seed: int = 0, dtype=torch.float32, device="cpu") -> Transformer:
    """The model with deterministic weights: N(0, 1/fan_in) matrices (unit-scale activations, so
    logits are O(1) and tolerances mean something), N(0, 1) embeddings, norms 1 + N(0, 0.1)."""
    model = Transformer(spec)  # (torch.device("meta") would cost a 2-3 s torch._dynamo import)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        if spec.tie_embeddings:
            model.head.weight = model.embed.weight
    return model.to(dtype=dtype, device=device).requires_grad_(False).eval()
