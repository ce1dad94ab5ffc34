"""Multi-head latent attention (DeepSeek-V2/V3 MLA): a self-contained reference, not wired into
kernels/model.py (random weights, small dims).

Per token x (d):
    c_q  = norm(W_DQ x)                      (r_q = q_lora_rank)
    q    = W_UQ c_q -> per head [q_nope (dn), q_pe (dr)];  q_pe = rope(q_pe)
    [c_kv (r_kv), k_pe (dr)] = W_DKV x;  c_kv = norm(c_kv);  k_pe = rope(k_pe), one head shared by all
    k_nope, v = W_UK c_kv (H x dn), W_UV c_kv (H x dv)            (W_UKV = [W_UK; W_UV] per head)
    out  = W_O concat_h softmax((q_nope.k_nope + q_pe.k_pe) / sqrt(dn + dr)) v
RoPE touches only the dr rope dims. The KV cache holds the latent [c_kv, k_pe]: (r_kv + dr) elements
per token per layer (DeepSeek-V3: 512 + 64 = 576, vs 2 x 128 heads x 128 = 32768 for MHA).

Two forms of the same maths:
  * non-absorbed (prefill, many queries): up-project every cached latent to K and V (T x H x (dn+dr),
    T x H x dv) and run ordinary attention;
  * absorbed (decode, few queries): q_lat = W_UK^T q_nope (H x r_kv) scores directly against c_kv,
    the probabilities average the latents (H x r_kv) and W_UV is applied after (H x dv): no per-token
    K/V is ever materialised (FlashMLA / vLLM's MLA decode).
TP over heads (vLLM / SGLang): W_UQ, W_UK, W_UV column-split by head, W_O row-split with an all_reduce
('attn_out', t x d x b); W_DQ, W_DKV, the norms and so the latent cache are replicated on every rank.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .comm import Group, all_reduce
from .model import RMSNorm, rope
from .tp import shard_in, shard_out

BLOCK_TOKENS = 16


class LatentCache:
    """Paged latent cache: per layer a pool (blocks, BLOCK_TOKENS, r_kv + dr), per sequence a block table."""

    def __init__(self, layers: int, width: int, num_blocks: int = 32, dtype=torch.float32):
        self.pools = [torch.zeros(num_blocks, BLOCK_TOKENS, width, dtype=dtype) for _ in range(layers)]
        self.free, self.tables, self.lengths = list(range(num_blocks)), {}, {}

    def bytes_per_token_per_layer(self) -> int:
        p = self.pools[0]
        return p.shape[-1] * p.element_size()  # (r_kv + dr) x dtype bytes

    def write(self, layer: int, sid, pos0: int, lat: torch.Tensor) -> None:  # lat (t, r_kv + dr)
        table = self.tables.setdefault(sid, [])
        while len(table) * BLOCK_TOKENS < pos0 + lat.shape[0]:
            table.append(self.free.pop(0))
        pos = torch.arange(pos0, pos0 + lat.shape[0])
        self.pools[layer][torch.tensor(table)[pos // BLOCK_TOKENS], pos % BLOCK_TOKENS] = lat
        self.lengths[sid] = max(self.lengths.get(sid, 0), pos0 + lat.shape[0])

    def read(self, layer: int, sid, length: int) -> torch.Tensor:  # -> (length, r_kv + dr)
        return self.pools[layer][torch.tensor(self.tables[sid])].reshape(-1, self.pools[layer].shape[-1])[:length]


class MLA(nn.Module):
    """One MLA layer over `n_heads` heads (all of them, or a TP shard after shard_mla)."""

    def __init__(self, layer: int, d: int, n_heads: int, q_lora_rank: int, kv_lora_rank: int,
                 qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int):
        super().__init__()
        self.layer, self.h = layer, n_heads
        self.r_kv, self.dn, self.dr, self.dv = kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.w_dq = nn.Linear(d, q_lora_rank, bias=False)
        self.q_norm = RMSNorm(q_lora_rank)
        self.w_uq = nn.Linear(q_lora_rank, n_heads * (self.dn + self.dr), bias=False)
        self.w_dkv = nn.Linear(d, kv_lora_rank + self.dr, bias=False)  # latent and the shared rope key
        self.kv_norm = RMSNorm(kv_lora_rank)
        self.w_ukv = nn.Linear(kv_lora_rank, n_heads * (self.dn + self.dv), bias=False)
        self.w_o = nn.Linear(n_heads * self.dv, d, bias=False)
        self.tp: Group | None = None

    def latent(self, x, pos):  # (t, d) -> (t, r_kv + dr): what the cache stores
        c, k_pe = self.w_dkv(x).split([self.r_kv, self.dr], -1)
        return torch.cat([self.kv_norm(c), rope(k_pe[:, None], pos)[:, 0]], -1)

    def queries(self, x, pos):  # (t, d) -> q_nope (t, H, dn), q_pe (t, H, dr)
        q = self.w_uq(self.q_norm(self.w_dq(x))).view(x.shape[0], self.h, self.dn + self.dr)
        q_nope, q_pe = q.split([self.dn, self.dr], -1)
        return q_nope, rope(q_pe, pos)

    def up(self):  # W_UK (H, dn, r_kv), W_UV (H, dv, r_kv): views of w_ukv's rows
        w = self.w_ukv.weight.view(self.h, self.dn + self.dv, self.r_kv)
        return w[:, :self.dn], w[:, self.dn:]

    def forward(self, x, cache: LatentCache, sid, pos0: int, absorbed: bool):  # (t, d) -> (t, d)
        t = x.shape[0]
        pos = torch.arange(pos0, pos0 + t)
        cache.write(self.layer, sid, pos0, self.latent(x, pos))
        lat = cache.read(self.layer, sid, pos0 + t)  # (T, r_kv + dr)
        c, k_pe = lat.split([self.r_kv, self.dr], -1)  # (T, r_kv), (T, dr)
        q_nope, q_pe = self.queries(x, pos)
        w_uk, w_uv = self.up()
        mask = torch.arange(pos0 + t)[None, :] <= pos[:, None]  # (t, T) causal
        rope_scores = torch.einsum("thr,sr->hts", q_pe, k_pe)  # (H, t, T): shared rope key
        if absorbed:  # q_lat = W_UK^T q_nope: 2*t*H*dn*r_kv FLOPs instead of 2*T*H*dn*r_kv for K
            q_lat = torch.einsum("thn,hnr->thr", q_nope, w_uk)  # (t, H, r_kv)
            scores = torch.einsum("thr,sr->hts", q_lat, c) + rope_scores
        else:  # up-project the latent of every cached token: K_nope (T, H, dn), V (T, H, dv)
            k_nope = torch.einsum("sr,hnr->shn", c, w_uk)
            scores = torch.einsum("thn,shn->hts", q_nope, k_nope) + rope_scores
        probs = (scores / math.sqrt(self.dn + self.dr)).masked_fill(~mask, float("-inf")).softmax(-1)
        if absorbed:  # average the latents, then W_UV: (H, t, r_kv) -> (t, H, dv)
            o = torch.einsum("hts,sr->thr", probs, c)
            o = torch.einsum("thr,hvr->thv", o, w_uv)
        else:
            v = torch.einsum("sr,hvr->shv", c, w_uv)  # (T, H, dv)
            o = torch.einsum("hts,shv->thv", probs, v)
        out = self.w_o(o.reshape(t, self.h * self.dv))
        return all_reduce(out, self.tp, "attn_out") if self.tp is not None else out


def build_mla(layer: int = 0, d: int = 64, n_heads: int = 4, q_lora_rank: int = 32, kv_lora_rank: int = 16,
              qk_nope_head_dim: int = 16, qk_rope_head_dim: int = 8, v_head_dim: int = 16, seed: int = 0,
              dtype=torch.float32) -> MLA:
    """A small MLA layer with N(0, 1/fan_in) weights and norms 1 + N(0, 0.1) (as kernels/model.py)."""
    m = MLA(layer, d, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            scale = 0.1 if name.endswith("norm.weight") else 1 / math.sqrt(p.shape[-1])
            p.copy_((name.endswith("norm.weight")) + scale * torch.randn(p.shape, generator=gen))
    return m.to(dtype).requires_grad_(False).eval()


def shard_mla(m: MLA, tp: Group) -> MLA:
    """Heads [i*H/TP, (i+1)*H/TP) on TP rank i: column-split W_UQ and W_UKV, row-split W_O (all_reduce);
    the down projections, norms and latent cache stay replicated (the latent has no head axis)."""
    h = m.h // tp.size
    i = tp.index
    shard_out(m.w_uq, i * h * (m.dn + m.dr), h * (m.dn + m.dr))
    shard_out(m.w_ukv, i * h * (m.dn + m.dv), h * (m.dn + m.dv))
    shard_in(m.w_o, i * h * m.dv, h * m.dv)
    m.h, m.tp = h, tp
    return m


def run_seq(m: MLA, x: torch.Tensor, prompt: int, absorbed_decode: bool = True, absorbed_prefill: bool = False):
    """Prefill x[:prompt] in one step, then decode the rest one token per step: (len(x), d) outputs."""
    cache = LatentCache(m.layer + 1, m.r_kv + m.dr, dtype=x.dtype)
    outs = [m(x[:prompt], cache, 0, 0, absorbed_prefill)]
    outs += [m(x[p:p + 1], cache, 0, p, absorbed_decode) for p in range(prompt, x.shape[0])]
    return torch.cat(outs), cache


def tp_check(rank: int, world_size: int) -> dict:
    """Spawned world (gloo): {(dtype, absorbed): facts} of the TP-sharded layer against the single-device
    one on a 7-token prefill + 5 decode steps (max |output difference|, bytes, cache, heads held)."""
    from . import comm
    from .dist import make_group
    group, out = make_group([list(range(world_size))]), {}
    for dtype in ("float32", "float64"):
        dt = getattr(torch, dtype)
        x = torch.randn(12, 64, generator=torch.Generator().manual_seed(1)).to(dt)
        ref = {a: run_seq(build_mla(dtype=dt), x, 7, a, a)[0] for a in (False, True)}
        m = shard_mla(build_mla(dtype=dt), group)
        for a in (False, True):
            with comm.counting() as recs:
                y, cache = run_seq(m, x, 7, a, a)
            out[dtype, a] = {"max_diff": float((y - ref[a]).abs().max()), "bytes": comm.bytes_by_where(recs),
                             "cache_tokens": cache.lengths[0], "heads": m.h,
                             "cache_bytes_per_token": cache.bytes_per_token_per_layer()}
    return out
