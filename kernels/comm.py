"""Collectives named like the perf model's terms; each one counts its nccl-tests bytes per step.

Sizes follow perfmodel/comm.py exactly: all_reduce = the reduced tensor, all_gather = the
gathered output, all_to_all = the send buffer, send_recv = the bytes sent. Copies (p2p, h2d,
d2h) count the bytes copied, on the rank that issues the copy (as perfmodel.ops.copy_time_s
charges the copier). Groups of one rank issue nothing and count nothing (as comm.py).
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class Group:
    """One process group: its global ranks in logical order (e.g. Shift's SP_TP order), the
    torch ProcessGroup (members sorted, as torch makes them) and this rank's logical index."""

    ranks: tuple
    pg: object
    index: int

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def pg_to_logical(self) -> list[int]:
        """Logical index of the ProcessGroup's j-th member (torch orders members by global rank)."""
        return [self.ranks.index(r) for r in sorted(self.ranks)]


SOLO = Group((0,), None, 0)  # a group of one: every collective is the identity


@dataclasses.dataclass(frozen=True)
class Record:
    """One issued collective or copy: op name, group size, nccl-tests bytes, model part."""

    op: str
    group: int
    size_bytes: int
    where: str


_open: list[list[Record]] = []  # record lists of the open counting() blocks


@contextlib.contextmanager
def counting():
    """Collect the Records of everything issued inside the block (one engine step)."""
    recs: list[Record] = []
    _open.append(recs)
    try:
        yield recs
    finally:
        _open.remove(recs)


def count(op: str, group: int, size_bytes: int, where: str) -> None:
    for recs in _open:
        recs.append(Record(op, group, int(size_bytes), where))


def bytes_by_op(records) -> dict:
    """{op: bytes} over records: the same totals as perfmodel.comm.bytes_by_op."""
    out: dict = {}
    for r in records:
        out[r.op] = out.get(r.op, 0) + r.size_bytes
    return out


def bytes_by_where(records) -> dict:
    """{(op, where): bytes} over records, keyed like perfmodel.comm.Call (op, where)."""
    out: dict = {}
    for r in records:
        out[(r.op, r.where)] = out.get((r.op, r.where), 0) + r.size_bytes
    return out


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# ---- collectives ----------------------------------------------------------------------------
def all_reduce(x: torch.Tensor, group: Group, where: str) -> torch.Tensor:
    """Sum x over the group in place; counts the reduced tensor."""
    if group.size > 1:
        count("all_reduce", group.size, nbytes(x), where)
        if x.numel():
            dist.all_reduce(x, group=group.pg)
    return x


def all_gather(x: torch.Tensor, group: Group, where: str) -> torch.Tensor:
    """(size, *x.shape): every member's x in logical order; counts the gathered output."""
    if group.size == 1:
        return x.unsqueeze(0)
    x = x.contiguous()
    count("all_gather", group.size, nbytes(x) * group.size, where)
    outs = [torch.empty_like(x) for _ in range(group.size)]
    if x.numel():
        dist.all_gather(outs, x, group=group.pg)
    logical = [None] * group.size
    for j, i in enumerate(group.pg_to_logical):
        logical[i] = outs[j]
    return torch.stack(logical)


def all_to_all(x: torch.Tensor, group: Group, where: str, send_splits=None, recv_splits=None):
    """Rows of x go to members in logical order (equal chunks, or `send_splits` rows each);
    returns the received rows in member order. Counts the send buffer."""
    if group.size == 1:
        return x
    x = x.contiguous()
    count("all_to_all", group.size, nbytes(x), where)
    if send_splits is None:  # equal chunks, possibly in a non-sorted logical order
        perm, chunks = group.pg_to_logical, (group.size, x.shape[0] // group.size, *x.shape[1:])
        xs = x.view(chunks)[perm].reshape(x.shape)
        out = torch.empty_like(xs)
        if x.numel():
            dist.all_to_all_single(out, xs, group=group.pg)
        res = torch.empty_like(out).view(chunks)
        res[perm] = out.view(chunks)
        return res.reshape(x.shape)
    if list(group.ranks) != sorted(group.ranks):
        raise ValueError(f"uneven all_to_all needs a sorted group, got ranks {group.ranks}")
    out = x.new_empty(sum(recv_splits), *x.shape[1:])
    dist.all_to_all_single(out, x, list(recv_splits), list(send_splits), group=group.pg)
    return out


# ---- point to point and copies -----------------------------------------------------------
def isend(x: torch.Tensor, dst: int, where: str, tag: int = 0):
    """Send x to global rank dst (async); counts send_recv bytes sent."""
    count("send_recv", 2, nbytes(x), where)
    return dist.isend(x.contiguous(), dst, tag=tag)


def irecv(buf: torch.Tensor, src: int, tag: int = 0):
    """Receive into buf from global rank src (async); the sender counts the bytes."""
    return dist.irecv(buf, src, tag=tag)


def p2p(buf: torch.Tensor, src: int, where: str, tag: int = 0):
    """One-sided read of a peer's tensor into buf (emulated by irecv + the peer's p2p_expose);
    counted as a 'p2p' copy by the reader."""
    count("p2p", 2, nbytes(buf), where)
    return dist.irecv(buf, src, tag=tag)


def p2p_expose(x: torch.Tensor, dst: int, tag: int = 0):
    """The owner's side of a p2p read (NVLink one-sided on GPUs): not counted, the reader counts."""
    return dist.isend(x, dst, tag=tag)


def h2d(x: torch.Tensor, device, where: str) -> torch.Tensor:
    """Copy a host tensor to the device (a new tensor); counts the bytes."""
    count("h2d", 1, nbytes(x), where)
    return x.to(device, copy=True)


def d2h(x: torch.Tensor, out: torch.Tensor, where: str) -> torch.Tensor:
    """Copy a device tensor into host memory `out`; counts the bytes."""
    count("d2h", 1, nbytes(x), where)
    return out.copy_(x)


def barrier(group: Group | None = None) -> None:
    """Synchronise (no payload, not counted)."""
    if group is None:
        dist.barrier()
    elif group.size > 1:
        dist.barrier(group=group.pg)
