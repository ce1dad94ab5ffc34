"""Expert parallelism: MoE experts split over the EP group; tokens dispatched to their experts'
owners by all_to_all and combined back (SYSTEMS.md section 1, EP).

With TP attention alongside, TP rank t routes its ~n/TP slice of the (replicated) tokens, and an
all_gather over TP restores all n rows after the combine ('moe_tp_gather'). Per MoE layer and
rank: 'moe_counts' (all_to_all of E int64 per-expert row counts, so receivers know the split
sizes), 'moe_dispatch' (n/TP * k rows of d), 'moe_combine' (the rows this rank's experts got).

EP inside one TP group (`tp=4,ep=4`: no DP ranks in it, perfmodel.comm.ep_replicated) needs no
dispatch: every rank holds every token, runs its own experts on the rows routed to them and the
EP group sums the partial outputs with one all_reduce ('ffn_out', n x d), as vLLM's
--enable-expert-parallel without DP and TRT-LLM's moe_expert_parallel_size do. With ep < tp
(`tp=4,ep=2`: TRT-LLM's moe_tp_size x moe_expert_parallel_size = tensor_parallel_size) each expert is
also TP-sharded over tp / ep ranks (w1/w3 columns, w2 rows of its intermediate dimension), and the
sum spans the whole TP group (perfmodel.cost and perfmodel.memory cost and size it so).
"""
from __future__ import annotations

import torch
from torch import nn

from perfmodel.comm import ep_replicated

from .comm import Group, all_gather, all_reduce, all_to_all
from .model import MLP, MoE, combine, route, run_experts


def _shard(mlp: MLP, j: int, m: int) -> MLP:
    """Part j of m of an expert's intermediate dimension: w1/w3 rows and w2 columns [j f/m, (j+1) f/m)."""
    f = mlp.w1.weight.shape[0]
    sl = slice(j * f // m, (j + 1) * f // m)
    out = MLP(mlp.w1.weight.shape[1], sl.stop - sl.start).to(mlp.w1.weight)
    with torch.no_grad():
        out.w1.weight.copy_(mlp.w1.weight[sl])
        out.w3.weight.copy_(mlp.w3.weight[sl])
        out.w2.weight.copy_(mlp.w2.weight[:, sl])
    return out


class ExpertParallelMoE(nn.Module):
    """Experts [first, first + E/EP) of one MoE layer; dispatch/combine over the EP group."""

    def __init__(self, moe: MoE, ep: Group, tp: Group, replicated: bool = False):
        super().__init__()
        self.replicated = replicated
        if len(moe.experts) % ep.size:  # (perfmodel costs redundant expert slots, layout.expert_slots)
            raise ValueError(f"ep={ep.size} does not divide the {len(moe.experts)} experts: the reference "
                             f"kernels place E / ep experts per rank and implement no redundant expert slots")
        per = len(moe.experts) // ep.size
        self.first, self.num_experts, self.top_k, self.ep, self.tp = ep.index * per, len(moe.experts), moe.top_k, ep, tp
        self.router, self.shared = moe.router, moe.shared
        held = list(moe.experts)[self.first:self.first + per]
        # ep < tp inside the TP group: TP rank t holds experts of EP index t % ep, part t // ep of tp / ep
        self.moe_tp = tp.size // ep.size if replicated and tp.size > ep.size else 1
        if self.moe_tp > 1:
            held = [_shard(e, tp.index // ep.size, self.moe_tp) for e in held]
        self.experts = nn.ModuleList(held)

    def forward(self, x):  # (n, d), identical on the TP ranks -> (n, d)
        if self.replicated:
            return self._replicated(x)
        parts = x.tensor_split(self.tp.size)  # TP rank t routes its slice of the tokens
        xt = parts[self.tp.index]
        w, idx = route(self.router(xt), self.top_k)  # (n_t, k)
        e = idx.flatten()  # (n_t*k,) expert of each (token, slot) row
        order = torch.argsort(e, stable=True)  # rows grouped by expert, hence by owner rank
        per_expert = torch.bincount(e, minlength=self.num_experts)  # (E,)
        got_counts = all_to_all(per_expert, self.ep, "moe_counts").view(self.ep.size, -1)  # (EP, E/EP)
        send = per_expert.view(self.ep.size, -1).sum(1).tolist()
        recv = got_counts.sum(1).tolist()
        rows = xt.repeat_interleave(self.top_k, 0)[order]  # (n_t*k, d): send buffer n_t*k*d bytes
        got = all_to_all(rows, self.ep, "moe_dispatch", send, recv)  # (R, d) by source, then expert
        local = torch.arange(len(self.experts), device=x.device).repeat(self.ep.size)
        ids = local.repeat_interleave(got_counts.flatten()) + self.first
        y = run_experts(got, ids, self.experts, self.first)  # (R, d)
        back = all_to_all(y, self.ep, "moe_combine", recv, send)  # (n_t*k, d) in `order`
        out = torch.empty_like(back)
        out[order] = back
        out = combine(out, w)  # (n_t, d)
        if self.shared is not None:
            out = out + self.shared(xt)
        if self.tp.size == 1:
            return out
        rows_t = -(-x.shape[0] // self.tp.size)  # pad every slice to ceil(n/TP) for the gather
        pad = torch.cat([out, out.new_zeros(rows_t - out.shape[0], out.shape[1])])
        full = all_gather(pad, self.tp, "moe_tp_gather")  # (TP, ceil(n/TP), d)
        return torch.cat([full[t, :len(p)] for t, p in enumerate(parts)])


    def _replicated(self, x):  # (n, d) on every rank of the EP group -> (n, d)
        w, idx = route(self.router(x), self.top_k)  # (n, k)
        e = idx.flatten()  # (n*k,)
        mine = (e >= self.first) & (e < self.first + len(self.experts))
        rows = x.repeat_interleave(self.top_k, 0)  # (n*k, d)
        y = torch.zeros_like(rows)
        y[mine] = run_experts(rows[mine], e[mine], self.experts, self.first)
        out = combine(y, w)  # (n, d): this rank's experts' share
        group = self.tp if self.moe_tp > 1 else self.ep  # (ep < tp: the shards sum over the TP group)
        if self.shared is not None and group.index == 0:  # the shared expert counted once
            out = out + self.shared(x)
        return all_reduce(out, group, "ffn_out")


def apply_ep(model, layout, ep_group: Group, tp_group: Group):
    """Replace every MoE layer by its expert-parallel shard, in place (apply before apply_tp)."""
    layout.validate(model.spec)
    if layout.ep != ep_group.size:
        raise ValueError(f"layout ep={layout.ep} but the EP group has {ep_group.size} ranks {ep_group.ranks}")
    for layer in model.layers:
        if isinstance(layer.mlp, MoE):
            layer.mlp = ExpertParallelMoE(layer.mlp, ep_group, tp_group, ep_replicated(layout))
    return model
