"""Ulysses sequence parallelism for inference (SYSTEMS.md section 1, Shift paper Algorithm 1).

Tokens of a step are padded to a multiple of SP and split over the SP ranks; every rank keeps
full weights. Around the attention core an all_to_all turns [n/SP, heads] into [n, heads/SP]
(Q, K, V in one call, 'ulysses_qkv') and the inverse one turns the output back ('ulysses_out').
When SP exceeds the KV heads (per TP shard), SP = SP_AA x SP_AG: Q takes the plain all_to_all
('ulysses_q'); K, V an all_to_all over SP_AA ('ulysses_kv'), an all_gather over SP_AG that
replicates each KV head ('ulysses_kv_replicate'), then a reorder into token order. The last
hidden states are all-gathered ('sp_output'). SP rank s holds head block s of its TP shard, and
the KV of those heads for every token: the TP layout over the same heads (Shift's invariance).
"""
from __future__ import annotations

import torch

from .comm import Group, all_gather, all_to_all
from .dist import make_group


def kv_groups(layout, num_kv_heads: int) -> tuple:
    """(SP_AA group, SP_AG group) of this rank. SP rank s = a * SP_AG + j: the all_to_all group
    fixes j (across GQA groups), the all_gather group fixes a (ranks sharing one KV head)."""
    sp_aa, sp_ag = layout.sp_split(num_kv_heads)
    aa, ag = [], []
    for g in layout.groups("sp"):
        aa += [[g[a * sp_ag + j] for a in range(sp_aa)] for j in range(sp_ag)]
        ag += [[g[a * sp_ag + j] for j in range(sp_ag)] for a in range(sp_aa)]
    return make_group(aa), make_group(ag)


def seq_to_heads(parts, group: Group, where: str) -> list:
    """[(n_loc, W_i)] sequence-sharded -> [(n_pad, W_i/SP)] head-sharded, in one all_to_all."""
    sp, n_loc = group.size, parts[0].shape[0]
    blocks = [p.reshape(n_loc, sp, p.shape[1] // sp) for p in parts]  # head block j goes to rank j
    buf = torch.cat(blocks, -1).transpose(0, 1)  # (SP, n_loc, sum W_i/SP)
    out = all_to_all(buf, group, where).reshape(sp * n_loc, buf.shape[-1])  # chunk i = rank i's tokens: token order
    return list(out.split([p.shape[1] // sp for p in parts], -1))


def heads_to_seq(o: torch.Tensor, group: Group, where: str) -> torch.Tensor:
    """(n_pad, W/SP) head-sharded -> (n_loc, W) sequence-sharded."""
    sp = group.size
    n_loc, w = o.shape[0] // sp, o.shape[1]
    out = all_to_all(o.reshape(sp, n_loc, w), group, where)  # chunk j: my tokens, head block j
    return out.transpose(0, 1).reshape(n_loc, sp * w)


def replicate_kv(k, v, aa: Group, ag: Group, head_dim: int) -> tuple:
    """Algorithm 1: k, v (n_loc, SP_AA*hs) -> the one KV head this rank serves, every token:
    (n_pad, hs) each."""
    n_loc = k.shape[0]
    buf = torch.cat([k.view(n_loc, aa.size, head_dim), v.view(n_loc, aa.size, head_dim)], -1)
    got = all_to_all(buf.transpose(0, 1), aa, "ulysses_kv")  # (SP_AA, n_loc, 2hs): my head, member a's tokens
    full = all_gather(got, ag, "ulysses_kv_replicate")  # (SP_AG, SP_AA, n_loc, 2hs) from member j
    full = full.transpose(0, 1).reshape(-1, 2 * head_dim)  # source rank a*SP_AG + j: token order
    return full[:, :head_dim], full[:, head_dim:]


def _core_hooks(group: Group, aa: Group, ag: Group, replicate: bool, head_dim: int):
    def pre(core, args):
        q, k, v, ctx = args  # (n_loc, H*hs), (n_loc, Hkv*hs) x2 for this rank's tokens
        if replicate:
            (q,) = seq_to_heads([q], group, "ulysses_q")
            k, v = replicate_kv(k, v, aa, ag, head_dim)
        else:
            q, k, v = seq_to_heads([q, k, v], group, "ulysses_qkv")
        n = ctx.n  # drop the padding rows: the core sees exactly the step's tokens
        return q[:n], k[:n], v[:n], ctx

    def post(core, args, out):  # (n, H/SP*hs) -> (n_loc, H*hs)
        n_pad = -(-args[3].n // group.size) * group.size
        out = torch.cat([out, out.new_zeros(n_pad - out.shape[0], out.shape[1])])
        return heads_to_seq(out, group, "ulysses_out")
    return pre, post


def _model_hooks(group: Group, split_logits: bool):
    def pre(model, args):  # pad the step's tokens to a multiple of SP and keep this rank's chunk
        tokens, ctx = args
        n_loc = -(-ctx.n // group.size)
        padded = torch.cat([tokens, tokens.new_zeros(n_loc * group.size - ctx.n)])
        if split_logits:  # TP x SP: each SP rank produces the logits of ceil(seqs/SP) sequences
            rows = -(-len(ctx.seq_ids) // group.size)
            mine = list(range(len(ctx.seq_ids)))[group.index * rows:(group.index + 1) * rows]
            idx = ctx.last_idx[mine].tolist()
            ctx.last_idx = torch.tensor(idx + [0] * (rows - len(idx)), dtype=torch.long, device=tokens.device)
            ctx.out_ids = [ctx.seq_ids[i] for i in mine]
        return padded[group.index * n_loc:(group.index + 1) * n_loc], ctx

    def gather(norm, args, out):  # (n_loc, d) -> (n_pad, d) on every SP rank
        return all_gather(out, group, "sp_output").reshape(-1, out.shape[-1])
    return pre, gather


def apply_sp(model, layout, group: Group, split_logits: bool = False):
    """Ulysses over the SP `group` (degree layout.sp) on a (possibly TP-sharded) model, in place."""
    if layout.sp != group.size:
        raise ValueError(f"layout sp={layout.sp} but the SP group has {group.size} ranks {group.ranks}")
    layout.validate(model.spec)
    aa, ag = kv_groups(layout, model.spec.num_kv_heads)
    replicate = ag.size > 1
    for layer in model.layers:
        core = layer.attn.core
        if not replicate and core.n_kv_heads % group.size:
            raise ValueError(f"{core.n_kv_heads} KV heads per TP shard not divisible by sp={group.size}")
        pre, post = _core_hooks(group, aa, ag, replicate, core.head_dim)
        core.register_forward_pre_hook(pre)
        core.register_forward_hook(post)
        core.n_heads //= group.size
        core.n_kv_heads = 1 if replicate else core.n_kv_heads // group.size
    pre, gather = _model_hooks(group, split_logits)
    model.register_forward_pre_hook(pre)
    model.norm.register_forward_hook(gather)
    return model
