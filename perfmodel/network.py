"""Collectives whose group spans nodes: hierarchical, NVLink inside a node, the NICs between nodes.

A Call placed by perfmodel.comm.placed spans N = call.nodes nodes with g = call.per_node of its n
ranks in each (n = N * g on aligned layouts). Every GPU has its own NIC (`hw.nic_bw_gbs` per GPU per
direction, `hw.nic_latency_us` per message; HGX/DGX rails), so the g GPUs of a node cross the
network in parallel, each carrying 1/g of the node's share:

    all_reduce(S)     = reduce_scatter(S over g) + ring all_reduce(S / g over N, NICs) + all_gather(S over g)
    all_gather(S)     = ring all_gather(S / g over N, NICs) + all_gather(S over g)
    reduce_scatter(S) = reduce_scatter(S over g) + ring reduce_scatter(S / g over N, NICs)
    all_to_all(S)     = max(NIC: the (n - g) / n of S bound off-node, NVLink: the g / n of S in-node)
    send_recv(S)      = one NIC message of S bytes

The intra-node legs are the single-node collectives (perfmodel.ops, calibrated where the profile
has curves); the inter-node ring of m ranks moves (m - 1) / m (x2 for all_reduce) of its bytes per
GPU and pays one NIC latency per ring step. This is the two-level all-reduce of Jia et al. 2018
(arXiv:1807.11205, its hierarchical all-reduce) and Horovod's hierarchical allreduce; the ring byte factors are
nccl-tests' (doc/PERFORMANCE.md). NCCL itself may pick a tree or a flat ring over all n ranks
(NCCL_ALGO); its ring/tree choice is not modelled.

Where the profile holds a curve measured over exactly this placement (Profile.spanning_time_s: the
same op, group and nodes, hence the same ranks per node), that measured time replaces the whole
composition (NCCL's own algorithm choice included). Other placements stay hierarchical with the NIC
numbers of the hardware preset (datasheet): the shipped profiles have no multi-node rows (nccl.csv:
num_gpus 2-8; docs/multinode.md says how to measure them).
"""
from __future__ import annotations

import numpy as np

from . import ops

SPANNING_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")  # spanning_time_s's


def _nic_ring_s(size, ranks: int, hw, factor: float) -> np.ndarray:
    """A ring over `ranks` nodes on one GPU's NIC: factor (m - 1) / m of `size` bytes cross it, in
    factor * (m - 1) latency-bound steps (factor 2 for all_reduce: reduce-scatter then all-gather)."""
    steps = factor * (ranks - 1)
    return steps * hw.nic_latency_us * 1e-6 + size * steps / ranks / (hw.nic_bw_gbs * 1e9)


def spanning_time_s(call, hw, prof=None) -> np.ndarray:
    """Seconds of one collective of `call` (one call, not `call.calls`) over call.nodes > 1 nodes."""
    if not hw.has_network:
        raise ValueError(f"{hw.name} has no inter-node network (nic_bw_gbs = 0): a {call.op} over "
                         f"{call.nodes} nodes cannot be costed")
    size = np.asarray(call.size_bytes, dtype=float)
    N, n = call.nodes, call.group
    g = call.per_node or max(1, n // N)
    if prof is not None and g * N == n:  # aligned: g ranks on each of N nodes, as a measured run places them
        t = prof.spanning_time_s(call.op, size, n, N)
        if t is not None:
            return np.where(size > 0, t, 0.0)

    def intra(op, s):  # a single-node collective over the g ranks of one node (0 for g = 1)
        return ops.collective_time_s(op, s, g, hw, prof)

    if call.op == "all_reduce":
        t = intra("reduce_scatter", size) + _nic_ring_s(size / g, N, hw, 2.0) + intra("all_gather", size)
    elif call.op == "all_gather":
        t = _nic_ring_s(size / g, N, hw, 1.0) + intra("all_gather", size)
    elif call.op == "reduce_scatter":
        t = intra("reduce_scatter", size) + _nic_ring_s(size / g, N, hw, 1.0)
    elif call.op == "all_to_all":  # each rank sends size / n to every rank; NVLink and NIC run at once
        off_node = size * (n - g) / n
        t = np.maximum(hw.nic_latency_us * 1e-6 + off_node / (hw.nic_bw_gbs * 1e9),
                       intra("all_to_all", size * g / n))
    elif call.op == "send_recv":
        t = hw.nic_latency_us * 1e-6 + size / (hw.nic_bw_gbs * 1e9)
    else:
        raise ValueError(f"no inter-node cost for collective {call.op!r}")
    return np.where(size > 0, t, 0.0)
