"""Megatron tensor parallelism applied to the built model in place (gpt-fast's tp.py pattern).

Column-parallel wq/wk/wv and w1/w3 (heads / FFN columns split), row-parallel wo and w2 with an
all_reduce of the (n, d) output each (attn_out, ffn_out), vocab-parallel embedding (all_reduce,
'embedding') and LM head (all_gather of the logits rows, 'logits'). TP rank = the group's
logical index, so Shift's shift model gets its heads in the SP_TP order. When TP exceeds the KV
heads each rank keeps the one KV head its query heads read (replicated TP/h_kv times).
`views=True` shards by zero-copy views of the existing weights (Flying Serving).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .comm import Group, all_gather, all_reduce
from .model import MLP, MoE


def _param(t: torch.Tensor, views: bool) -> nn.Parameter:
    return nn.Parameter(t if views else t.clone(), requires_grad=False)


def shard_out(lin: nn.Linear, start: int, size: int, views: bool = False) -> None:
    """Keep output features [start, start+size) (column parallel: a slice of weight rows)."""
    lin.weight = _param(lin.weight[start:start + size], views)
    if lin.bias is not None:
        lin.bias = _param(lin.bias[start:start + size], views)
    lin.out_features = size


def shard_in(lin: nn.Linear, start: int, size: int, views: bool = False) -> None:
    """Keep input features [start, start+size) (row parallel); the partial sums need an all_reduce."""
    lin.weight = _param(lin.weight[:, start:start + size], views)
    lin.in_features = size


def kv_heads_of(rank: int, degree: int, num_kv_heads: int) -> tuple:
    """(first KV head, count) that shard `rank` of `degree` holds (one replicated head if degree > h_kv)."""
    if degree <= num_kv_heads:
        per = num_kv_heads // degree
        return rank * per, per
    return rank // (degree // num_kv_heads), 1


def _reduce_hook(group: Group, where: str):
    def hook(module, args, out):
        return all_reduce(out, group, where)
    return hook


class VocabParallelEmbedding(nn.Module):
    """Rows [start, start + V/TP) of the embedding; tokens outside give zeros; all_reduce sums."""

    def __init__(self, weight: torch.Tensor, start: int, group: Group):
        super().__init__()
        self.weight, self.start, self.group = nn.Parameter(weight, requires_grad=False), start, group

    def forward(self, ids):  # (n,) -> (n, d); all_reduce n*d*act_bytes
        local = ids - self.start
        hit = (local >= 0) & (local < self.weight.shape[0])
        out = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)
        return all_reduce(out.masked_fill(~hit[:, None], 0.0), self.group, "embedding")


def _gather_vocab_hook(group: Group):
    def hook(module, args, out):  # (rows, V/TP) -> (rows, V); all_gather rows*V*act_bytes
        parts = all_gather(out, group, "logits")  # (TP, rows, V/TP)
        return parts.permute(1, 0, 2).reshape(out.shape[0], parts.shape[0] * out.shape[1])
    return hook


def shard_ffn(mlp: nn.Module, rank: int, degree: int, group: Group, views: bool = False) -> None:
    """Column-parallel w1/w3, row-parallel w2 of an MLP (every expert and the shared expert of
    an MoE, router replicated) and the ffn_out all_reduce."""
    mlps = [mlp] if isinstance(mlp, MLP) else [*mlp.experts, *([mlp.shared] if mlp.shared else [])]
    for m in mlps:
        f = m.w1.out_features // degree
        shard_out(m.w1, rank * f, f, views), shard_out(m.w3, rank * f, f, views), shard_in(m.w2, rank * f, f, views)
    mlp.register_forward_hook(_reduce_hook(group, "ffn_out"))


def apply_tp(model, layout, group: Group, views: bool = False, vocab: bool = True):
    """Shard `model` over the TP `group` (degree layout.tp) in place and return it."""
    spec, rank, tp = model.spec, group.index, group.size
    if layout.tp != tp:
        raise ValueError(f"layout tp={layout.tp} but the TP group has {tp} ranks {group.ranks}")
    hs = spec.head_dim
    h = spec.num_heads // tp
    kv0, kvn = kv_heads_of(rank, tp, spec.num_kv_heads)
    for layer in model.layers:
        a = layer.attn
        shard_out(a.wq, rank * h * hs, h * hs, views)
        shard_out(a.wk, kv0 * hs, kvn * hs, views), shard_out(a.wv, kv0 * hs, kvn * hs, views)
        shard_in(a.wo, rank * h * hs, h * hs, views)
        a.core.n_heads, a.core.n_kv_heads = h, kvn
        a.register_forward_hook(_reduce_hook(group, "attn_out"))
        if isinstance(layer.mlp, (MLP, MoE)):  # EP replaces MoE layers with its own module
            shard_ffn(layer.mlp, rank, tp, group, views)
    if vocab:
        vs = spec.vocab_size // tp
        if hasattr(model, "embed") and isinstance(model.embed, nn.Embedding):
            w = model.embed.weight[rank * vs:(rank + 1) * vs]
            model.embed = VocabParallelEmbedding(w if views else w.clone(), rank * vs, group)
        if hasattr(model, "head"):
            shard_out(model.head, rank * vs, vs, views)
            model.head.register_forward_hook(_gather_vocab_hook(group))
    return model
