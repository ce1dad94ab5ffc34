"""SiDP: shared-weight intra-node DP. Attention weights stay replicated; layer l's FFN weights
live only on its owner o(l) = l mod D. Two numerically equivalent modes (SYSTEMS.md section 3):

* WaS (weight-as-a-service): a non-owner reads layer l's packed FFN weights from o(l) into one
  of K slot buffers ('p2p', 3*d*f elements), prefetching ahead in a peak-shifted order, then
  computes locally.
* CaS (compute-as-a-service): a non-owner sends its FFN input rows to o(l) ('send_recv',
  'sidp_cas_in'); the owner runs one fused GEMM over its own and all received rows and returns
  each slice ('sidp_cas_out'). Replicas with no rows (dummies) send nothing.

Replicas may be TP groups (layout dp=D, tp=T; apply_tp first): the DP group of a rank is the ranks
with its TP coordinate, so TP rank t of a replica fetches (WaS) or is served by (CaS) TP rank t of
the owner, which holds FFN shard t (3*d*f/T elements). Either way the result is shard t's partial
sum over the full (n, d) rows, and the replica all-reduces it over its TP group ('ffn_out'), the
all_reduce a TP FFN ends with anyway.
"""
from __future__ import annotations

import collections
import dataclasses

import torch
from torch import nn

from perfmodel.knobs import SIDP_HYSTERESIS_DECISIONS
from perfmodel.sidp import next_mode

from .comm import Group, all_reduce, irecv, isend, p2p, p2p_expose
from .kvcache import run_step
from .model import MLP, swiglu


def owner(layer: int, dp: int) -> int:
    return layer % dp


def prefetch_order(rank: int, dp: int, num_layers: int, cycle: int) -> list[int]:
    """Peak shifting: in each cycle of `cycle` consecutive layers rank r starts at offset r and
    wraps around, skipping layers it owns, so ranks read from different owners at a time."""
    out = []
    for c0 in range(0, num_layers, cycle):
        layers = list(range(c0, min(c0 + cycle, num_layers)))
        off = rank % len(layers)
        out += [l for l in layers[off:] + layers[:off] if owner(l, dp) != rank]
    return out


def min_slots(dp: int, num_layers: int, cycle: int) -> int:
    """Slots needed so the layer being computed is always in the fetch window: the most remote
    layers any rank has in one cycle."""
    return max(sum(1 for l in range(c, min(c + cycle, num_layers)) if owner(l, dp) != r)
               for r in range(dp) for c in range(0, num_layers, cycle))


@dataclasses.dataclass(frozen=True, slots=True)
class ModeState:
    """The orchestrator's state: the mode running and the decisions running the other side has won."""

    mode: str = "was"
    streak: int = 0


def choose_mode(state: ModeState, rows_per_replica: float, b_star: float,
                hysteresis: int = SIDP_HYSTERESIS_DECISIONS) -> ModeState:
    """The simulator's rule (perfmodel.sidp.next_mode): WaS wants the step when the mean FFN rows per
    replica are >= b_star (B*: perfmodel.sidp.b_star for a deployment; no default, it depends on the
    model and GPUs), CaS below; the mode flips after the other side won `hysteresis` decisions running."""
    want = "was" if rows_per_replica >= b_star else "cas"
    return ModeState(*next_mode(state.mode, state.streak, want, hysteresis))


class SiDPRuntime:
    """Per-rank state of one step: mode, rows per replica, WaS slots and fetches in flight."""

    def __init__(self, group: Group, num_layers: int, d: int, f: int, slots: int, cycle: int, dtype, device):
        self.group, self.d, self.f = group, d, f
        self.shape = (group.size, num_layers, cycle)
        self.order = prefetch_order(group.index, *self.shape)
        need = min_slots(group.size, num_layers, cycle)
        if slots < need:
            raise ValueError(f"SiDP: {slots} cache slots < {need} remote layers per cycle of {cycle}: "
                             f"the prefetch window could miss the layer being computed")
        self.slots = [torch.empty(3 * f * d, dtype=dtype, device=device) for _ in range(slots)]  # w1|w3|w2
        self.packed: dict = {}  # owned layer -> flat FFN weights
        self.mode, self.rows, self.sends = "was", [], []
        self.queue, self.inflight, self.free, self.max_inflight = collections.deque(), {}, [], 0

    def unpack(self, flat):  # flat (3*f*d,) -> w1 (f, d), w3 (f, d), w2 (d, f): views, no copy
        f, d = self.f, self.d
        return flat[:f * d].view(f, d), flat[f * d:2 * f * d].view(f, d), flat[2 * f * d:].view(d, f)

    def begin(self, mode: str, rows: list[int]) -> None:
        """Start a step in `mode` with `rows` FFN rows (tokens) on each replica."""
        self.mode, self.rows, self.sends = mode, list(rows), []
        me = self.group.index
        if mode == "was":  # expose owned layers to every reader with work, in the reader's fetch
            for r in range(self.group.size):  # order (NCCL matches p2p by order, not by tag)
                if r != me and rows[r] > 0:
                    self.sends += [p2p_expose(self.packed[l], self.group.ranks[r], tag=l)
                                   for l in prefetch_order(r, *self.shape) if l in self.packed]
            self.queue = collections.deque(self.order if rows[me] > 0 else [])
            self.inflight, self.free = {}, list(range(len(self.slots)))
            self._fill()

    def _fill(self) -> None:
        while self.free and self.queue:
            l, s = self.queue.popleft(), self.free.pop(0)
            src = self.group.ranks[owner(l, self.group.size)]
            self.inflight[l] = (s, p2p(self.slots[s], src, "sidp_was_fetch", tag=l))  # 3*d*f elements
        self.max_inflight = max(self.max_inflight, len(self.inflight))

    def ffn(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The FFN of `layer` on this replica's rows x (n, d), in the current mode."""
        flat = self.packed.get(layer)
        if self.mode == "was":
            if flat is not None:
                return swiglu(x, *self.unpack(flat))
            if x.shape[0] == 0:
                return torch.zeros_like(x)
            s, work = self.inflight[layer]
            work.wait()
            y = swiglu(x, *self.unpack(self.slots[s]))
            del self.inflight[layer]
            self.free.append(s)
            self._fill()
            return y
        return self._cas(layer, x, flat)

    def _cas(self, layer: int, x: torch.Tensor, flat) -> torch.Tensor:
        me, ranks, rows = self.group.index, self.group.ranks, self.rows
        o = owner(layer, self.group.size)
        if me != o:
            if x.shape[0] == 0:  # dummy replica: nothing to send
                return x
            self.sends.append(isend(x, ranks[o], "sidp_cas_in", tag=layer))  # n*d
            y = torch.empty_like(x)
            irecv(y, ranks[o], tag=layer).wait()
            return y
        peers = [r for r in range(self.group.size) if r != me and rows[r] > 0]
        bufs = {r: x.new_empty(rows[r], x.shape[1]) for r in peers}
        for w in [irecv(bufs[r], ranks[r], tag=layer) for r in peers]:
            w.wait()
        order = [r for r in range(self.group.size) if r == me or r in bufs]
        allx = torch.cat([x if r == me else bufs[r] for r in order])  # (sum rows, d)
        y = swiglu(allx, *self.unpack(flat))  # one fused GEMM: 6 * rows * d * f FLOPs
        parts = dict(zip(order, y.split([x.shape[0] if r == me else rows[r] for r in order])))
        self.sends += [isend(parts[r], ranks[r], "sidp_cas_out", tag=layer) for r in peers]  # n_r*d each
        return parts[me]

    def end(self) -> None:
        for w in self.sends:
            w.wait()
        self.sends = []


class SiDPFFN(nn.Module):
    """Stands in for layer `layer`'s MLP; holds its weights only on the owner. With TP inside the
    replica the FFN result is this rank's shard's partial sum: all_reduce over `tp` (n*d*b)."""

    def __init__(self, layer: int, runtime: SiDPRuntime, tp: Group | None = None):
        super().__init__()
        self.layer, self.runtime, self.tp = layer, runtime, tp

    def forward(self, x):  # (n, d) -> (n, d)
        y = self.runtime.ffn(self.layer, x)
        return y if self.tp is None else all_reduce(y, self.tp, "ffn_out")


def apply_sidp(model, layout, group: Group, slots: int | None = None, cycle: int | None = None,
               tp: Group | None = None) -> SiDPRuntime:
    """Keep FFN weights of owned layers only (packed w1|w3|w2), replace every MLP by SiDPFFN.
    Defaults: cycles of D layers, max(2, remote layers per cycle) slots. `tp`: the replica's TP
    group when layout.tp > 1 (the model already sharded by apply_tp: f/T FFN columns per rank)."""
    spec = model.spec
    if spec.is_moe or layout.dp != group.size:
        raise ValueError(f"SiDP needs a dense model and a DP group of dp={layout.dp}, got "
                         f"{spec.name} and {group.size} ranks")
    if layout.tp != (tp.size if tp is not None else 1):
        raise ValueError(f"SiDP layout tp={layout.tp} needs the model sharded over a TP group of that size")
    p = next(model.parameters())
    cycle = cycle or group.size
    slots = slots or max(2, min_slots(group.size, spec.num_layers, cycle))
    f_local = model.layers[0].mlp.w1.weight.shape[0]  # f / T after apply_tp
    rt = SiDPRuntime(group, spec.num_layers, spec.hidden_size, f_local, slots, cycle, p.dtype, p.device)
    for i, layer in enumerate(model.layers):
        assert isinstance(layer.mlp, MLP)
        if owner(i, group.size) == group.index:
            m = layer.mlp
            rt.packed[i] = torch.cat([m.w1.weight.flatten(), m.w3.weight.flatten(), m.w2.weight.flatten()])
        layer.mlp = SiDPFFN(i, rt, tp)  # non-owners drop the layer's FFN weights (and TP's ffn_out hook)
    return rt


def sidp_step(model, cache, runtime: SiDPRuntime, subs: list, mode: str) -> dict:
    """One SiDP step: every replica runs its sub-batch of `subs` (one per replica), even an empty
    one, since it still owns and serves FFN layers."""
    runtime.begin(mode, [s.num_tokens for s in subs])
    out = run_step(model, cache, subs[runtime.group.index])
    runtime.end()
    return out
