"""The collectives one engine step issues, with their nccl-tests sizes (bytes per rank buffer).

One list for the perf model's times and for the kernels' byte counters to be checked against:
all_reduce size = the reduced tensor; all_gather = the gathered output; all_to_all = the send
buffer; send_recv = the bytes sent. Sizes are per call on one rank; `calls` is per step.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np


@dataclasses.dataclass(frozen=True)
class Call:
    """`calls` collectives `op` over `group` ranks, each moving `size_bytes` (nccl-tests size)."""

    op: str
    group: int
    size_bytes: np.ndarray
    calls: float
    where: str  # which part of the model issues it (for breakdowns and docs)
    axis: str = "tp"  # the rank-grid axis of its group: tp, sp, ep, pp, sp_aa / sp_ag (slices of SP)
    nodes: int = 1  # nodes the group spans (1: inside one node, the single-node costs)
    per_node: int = 0  # ranks of the group in its fullest node (0: all of them, i.e. `group`)


def padded_tokens(tokens, sp: int) -> np.ndarray:
    """Ulysses pads a step's tokens up to a multiple of SP (SYSTEMS.md: 9 tokens on SP=8 -> 16)."""
    tokens = np.asarray(tokens, dtype=float)
    return tokens if sp == 1 else np.ceil(tokens / sp) * sp


def ep_replicated(layout) -> bool:
    """EP inside one instance's TP group (no DP ranks in it: the instance layout has dp == 1 and
    ep <= tp): every rank holds every token, so experts need no dispatch, only a sum over EP. EP
    spanning DP ranks (attention DP, `dp=w,ep=w`) dispatches tokens with all_to_all."""
    return layout.ep > 1 and layout.dp == 1 and layout.sp == 1 and layout.tp % layout.ep == 0


def layer_calls(spec, layout, tokens, moe_layer: bool, act_bytes: float = 2.0) -> list[Call]:
    """Collectives of one transformer layer on one GPU for `tokens` new tokens of the instance."""
    tp, sp, ep = layout.tp, layout.sp, layout.ep
    dh, d = spec.head_dim, spec.hidden_size
    n_loc = padded_tokens(tokens, sp) / sp  # tokens each SP rank holds
    calls = []
    if sp > 1:
        q_loc = spec.num_heads // tp * dh  # Q width per TP shard
        kv_tp = max(1, spec.num_kv_heads // tp) * dh  # K (or V) width per TP shard
        sp_aa, sp_ag = layout.sp_split(spec.num_kv_heads)
        if sp_ag == 1:  # Q, K, V in one all-to-all: [n/SP, heads_tp] -> [n, heads_tp/SP]
            calls.append(Call("all_to_all", sp, n_loc * (q_loc + 2 * kv_tp) * act_bytes, 1, "ulysses_qkv", "sp"))
        else:  # Algorithm 1: Q over SP; KV all-to-all over SP_AA, then all-gather over SP_AG
            calls.append(Call("all_to_all", sp, n_loc * q_loc * act_bytes, 1, "ulysses_q", "sp"))
            if sp_aa > 1:
                calls.append(Call("all_to_all", sp_aa, n_loc * 2 * kv_tp * act_bytes, 1, "ulysses_kv", "sp_aa"))
            # output: every token's K and V of the one KV head this GPU serves
            calls.append(Call("all_gather", sp_ag, n_loc * sp * 2 * dh * act_bytes, 1, "ulysses_kv_replicate",
                              "sp_ag"))
        calls.append(Call("all_to_all", sp, n_loc * q_loc * act_bytes, 1, "ulysses_out", "sp"))
    a2a = moe_layer and ep > 1 and not ep_replicated(layout)
    if tp > 1:  # row-parallel O projection and FFN down projection
        calls.append(Call("all_reduce", tp, n_loc * d * act_bytes, 1, "attn_out"))
        if not (moe_layer and ep > 1):
            calls.append(Call("all_reduce", tp, n_loc * d * act_bytes, 1, "ffn_out"))
    if moe_layer and ep > 1 and not a2a:  # EP inside the TP group: each rank runs its experts on every
        # (replicated) token and the EP group sums the partial outputs (vLLM --enable-expert-parallel
        # without DP, TRT-LLM moe_expert_parallel_size inside tensor_parallel_size)
        # (ep < tp: the experts are TP-sharded over tp / ep as well, so the sum spans the whole TP group)
        calls.append(Call("all_reduce", tp, n_loc * d * act_bytes, 1, "ffn_out", "ep" if ep == tp else "tp"))
    if a2a:  # EP across DP ranks: dispatch each token's activation to its top-k experts and back
        n_moe = n_loc / tp
        size = n_moe * spec.experts_per_token * d * act_bytes
        # each rank first tells every other how many rows it sends to each expert (E int64 counts)
        calls.append(Call("all_to_all", ep, spec.num_experts * 8.0 * np.ones_like(size), 1, "moe_counts", "ep"))
        calls.append(Call("all_to_all", ep, size, 1, "moe_dispatch", "ep"))
        calls.append(Call("all_to_all", ep, size, 1, "moe_combine", "ep"))
        if tp > 1:  # gather the TP-split MoE tokens back (equal shards: padded to a multiple of TP)
            calls.append(Call("all_gather", tp, padded_tokens(n_loc, tp) * d * act_bytes, 1, "moe_tp_gather"))
    return calls


def step_calls(spec, layout, tokens, seqs, act_bytes: float = 2.0, micro_batches: int = 1) -> list[Call]:
    """All collectives of one engine step on the busiest GPU: every layer of its pipeline stage,
    the vocab-parallel embedding and LM head, SP's final all-gather and PP's stage sends.
    `tokens`/`seqs` are per micro-batch; `micro_batches` multiplies the per-micro-batch calls."""
    tp, sp, pp = layout.tp, layout.sp, layout.pp
    d = spec.hidden_size
    layers = max(layout.layers_per_stage(spec.num_layers))
    moe_frac = spec.num_moe_layers / spec.num_layers
    n_moe = round(layers * moe_frac)
    out = []
    for moe, count in ((False, layers - n_moe), (True, n_moe)):
        if count:
            for c in layer_calls(spec, layout, tokens, moe, act_bytes):
                out.append(dataclasses.replace(c, calls=c.calls * count * micro_batches))
    n_loc = padded_tokens(tokens, sp) / sp
    if tp > 1:  # vocab-parallel embedding (all-reduce) and logits gather of the last tokens
        out.append(Call("all_reduce", tp, n_loc * d * act_bytes, micro_batches, "embedding"))
        seqs_loc = np.ceil(np.asarray(seqs, dtype=float) / sp)
        out.append(Call("all_gather", tp, seqs_loc * spec.vocab_size * act_bytes, micro_batches, "logits"))
    if sp > 1:  # gather the last hidden states of every token back to all SP ranks
        out.append(Call("all_gather", sp, padded_tokens(tokens, sp) * d * act_bytes, micro_batches, "sp_output",
                        "sp"))
    if pp > 1:  # hidden states and residual to the next stage (vLLM's IntermediateTensors)
        out.append(Call("send_recv", 2, 2 * np.asarray(tokens, dtype=float) * d * act_bytes,
                        micro_batches, "pp_stage", "pp"))
    return out


@functools.lru_cache(maxsize=1024)
def group_span(layout, axis: str, group: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, ranks per node) of the widest group of `axis` (size `group`) of one instance placed
    node-major from rank 0 (global rank r on node r // gpus_per_node; deploy keeps every instance
    aligned to nodes, so instance 0's placement is every instance's). sp_aa / sp_ag are taken as runs
    of `group` consecutive ranks of each SP group (an assumption: Algorithm 1 fixes no order)."""
    if layout.world_size <= gpus_per_node or group <= 1:
        return 1, group
    groups = layout.groups(axis[:2])
    if axis in ("sp_aa", "sp_ag"):
        groups = [g[i:i + group] for g in groups for i in range(0, len(g), group)]
    best = (1, group)
    for g in groups:
        nodes, counts = np.unique(np.asarray(g) // gpus_per_node, return_counts=True)
        best = max(best, (len(nodes), int(counts.max())))
    return best


def placed(call: Call, layout, gpus_per_node: int) -> Call:
    """`call` with the nodes its group spans and its ranks per node (itself when inside one node)."""
    nodes, per_node = group_span(layout, call.axis, call.group, gpus_per_node)
    return call if nodes == 1 else dataclasses.replace(call, nodes=nodes, per_node=per_node)


def bytes_by_op(calls: list[Call]) -> dict:
    """Total nccl-tests bytes per op name over a list of calls (what the kernels count)."""
    tot: dict = {}
    for c in calls:
        tot[c.op] = tot.get(c.op, 0.0) + np.asarray(c.size_bytes, dtype=float) * c.calls
    return tot
