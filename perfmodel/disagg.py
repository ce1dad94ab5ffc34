"""Disaggregated prefill/decode (DistServe OSDI'24, Splitwise ISCA'24, Mooncake FAST'25, NVIDIA Dynamo):
a prefill pool runs prompts and samples each request's first token, its KV moves to a decode pool,
which generates the rest. One source of truth for the pool syntax, the placement of instances on
nodes, the KV transfer (bytes, links, seconds) and the closed form that `perfmodel estimate` and
`simulate --policy disagg` (simulator/policies/disagg/) both use.

Pools: `N x (layout)`, e.g. `2x(tp=4)` or `1x(tp=2;pp=2)` (`,` or `;` inside the parentheses; a bare
layout `tp=8` is one instance). Ranks are placed node-major, the prefill pool first, then the decode
pool: node of GPU g = g // hw.gpus_per_node; an instance sits inside one node or on whole nodes.
An instance layout may have dp > 1 (attention DP with wide EP: `1x(dp=16,ep=16)`, DeepSeek's serving layout):
its DP ranks are separate engines (each costed with the whole layout, as `--policy layout` does), and a
request's KV moves from the prefill DP rank that ran it.

KV transfer of a P-token prompt from a prefill instance to a decode instance (docs/policies.md):
* bytes = spec.kv_bytes_for_context(P) x r_d, r_d = how many decode GPUs hold each KV head (1 unless the
  decode instance's tp x sp exceeds the KV heads: vLLM then replicates heads, and each replica needs
  its copy). The prefill layout does not change the bytes: its replicas of a head send one copy, and
  PP splits layers on both sides (each layer's KV goes from the stage that holds it to the one that
  needs it).
* links = min(P_gpus, D_gpus) GPU-to-GPU streams in parallel (each GPU sends its shard; the smaller
  side's ports bound it): NVLink (hw.link_bw_gbs, link_latency_us) when both instances are in one node,
  else one NIC per GPU (hw.nic_bw_gbs, nic_latency_us; the HGX/DGX one-NIC-per-GPU rail design).
* seconds = bytes / (links x bandwidth) + latency (one message: the KV is sent as one bulk RDMA read,
  as vLLM's NIXL connector and Dynamo do after the decode side allocated its blocks).
"""
from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

import numpy as np

from . import memory
from .batch import decode_batch, prefill_batch
from .closedform import tpot_s, ttft_s
from .cost import step_cost
from .deploy import Deployment, deployment
from .layout import LayoutError, ParallelLayout

POOL_RE = re.compile(r"^\s*(?:(\d+)\s*[xX*]\s*)?(?:\((?P<par>[^()]*)\)|(?P<bare>[^()]*))\s*$")


@dataclasses.dataclass(frozen=True)
class Pool:
    """`count` instances of one instance layout (dp > 1: attention-DP ranks of one instance, one engine each)."""

    count: int
    layout: ParallelLayout

    def __post_init__(self):
        if self.count < 1:
            raise LayoutError(f"a disagg pool needs at least 1 instance, got {self.count}")

    @property
    def gpus(self) -> int:
        return self.count * self.layout.world_size

    @property
    def engines(self) -> int:
        """Engines of the pool: one per DP rank of each instance."""
        return self.count * self.layout.dp

    def __str__(self) -> str:
        return f"{self.count}x({self.layout})"


def parse_pool(text: str, name: str = "pool") -> Pool:
    """'2x(tp=4)', '1x(tp=2;pp=2)', '2x(tp=2,pp=2)', '2xtp=4' (no parentheses to quote in a shell) or 'tp=8'
    (one instance) -> Pool; LayoutError naming it."""
    m = POOL_RE.match(str(text))
    body = (m.group("par") if m.group("par") is not None else m.group("bare")) if m else None
    if not m or not body or not body.strip():
        raise LayoutError(f"{name}={text!r}: expected N x (layout), e.g. {name}=2x(tp=4) or {name}=1x(tp=2;pp=2)")
    try:
        return Pool(int(m.group(1) or 1), ParallelLayout.parse(body.replace(";", ",")))
    except LayoutError as e:
        raise LayoutError(f"{name}={text!r}: {e}") from None


def pool_on(spec, hw, gpus: int, fw, name: str = "pool") -> Pool:
    """The default pool on `gpus` GPUs: as `--policy dp` lays them out (the smallest power-of-two TP that
    holds the model with room for KV, replicated), or one TP instance where they hold only one replica."""
    if gpus < 1:
        raise LayoutError(f"disagg: no GPUs left for the {name} pool")
    try:
        dep = deployment("dp", spec, hw, gpus, fw)
    except LayoutError:
        try:
            dep = deployment("tp", spec, hw, gpus, fw)
        except LayoutError as e:  # (2026-12-03 QA: the bare "tp=7" error named no pool the user had set)
            raise LayoutError(f"disagg: the {name} pool, not given, gets the {gpus} x {hw.name} left, and {spec.name} "
                              f"has no layout on them ({e}); give the pools, e.g. --policy-arg prefill=1x(tp=4) "
                              "--policy-arg decode=1x(tp=4)") from None
    if not dep.plan.fits:
        raise LayoutError(f"disagg: {spec.name} does not fit the {name} pool's {gpus} x {hw.name}; give the "
                          "pools, e.g. --policy-arg prefill=1x(tp=4) --policy-arg decode=1x(tp=4)")
    return Pool(dep.instances, dataclasses.replace(dep.base, dp=1))


def default_pools(spec, hw, gpus: int, fw) -> tuple[Pool, Pool]:
    """Half the GPUs (rounded down) prefill, the rest decode, each laid out by pool_on."""
    if gpus < 2:
        raise LayoutError(f"disagg needs at least 2 GPUs (a prefill and a decode pool), got {gpus}")
    return pool_on(spec, hw, gpus // 2, fw, "prefill"), pool_on(spec, hw, gpus - gpus // 2, fw, "decode")


def placement(prefill: Pool, decode: Pool, hw, gpus: int) -> tuple[list, list]:
    """GPU ids of each prefill and each decode engine (one per DP rank of an instance; node-major, prefill
    first); LayoutError when the pools need more than `gpus` GPUs or an instance straddles a node boundary
    (it must sit inside one node or on whole nodes)."""
    if prefill.gpus + decode.gpus > gpus:
        raise LayoutError(f"disagg pools need {prefill.gpus} (prefill {prefill}) + {decode.gpus} (decode {decode}) "
                          f"= {prefill.gpus + decode.gpus} GPUs but the run has {gpus}")
    out, g = [], 0
    for pool in (prefill, decode):
        inst = []
        n, per = pool.layout.world_size, pool.layout.gpus_per_instance
        for _ in range(pool.count):
            node = hw.gpus_per_node
            whole = g % node == 0 and n % node == 0
            if g // node != (g + n - 1) // node and not whole:
                raise LayoutError(f"disagg instance on GPUs {g}-{g + n - 1} straddles a {node}-GPU {hw.name} "
                                  f"node boundary; choose pool sizes that pack whole instances per node")
            for r in range(pool.layout.dp):
                inst.append(tuple(range(g + r * per, g + (r + 1) * per)))
            g += n
        out.append(inst)
    return out[0], out[1]


def cross_node(a: tuple, b: tuple, hw) -> bool:
    """Whether two instances (GPU ids) sit on different nodes."""
    return a[0] // hw.gpus_per_node != b[0] // hw.gpus_per_node


def decode_replication(spec, decode_layout: ParallelLayout) -> float:
    """Decode GPUs holding each KV head (>= 1): tp x sp x heads per GPU / KV heads. MLA: every TP rank
    holds the whole latent (memory.kv_bytes_per_token_per_gpu), so each of the tp ranks needs its copy."""
    lay = decode_layout
    if getattr(spec, "is_mla", False):
        return float(lay.tp * lay.sp)
    return max(1.0, lay.tp * lay.sp * lay.kv_heads_per_gpu(spec.num_kv_heads) / spec.num_kv_heads)


def kv_transfer_bytes(spec, prompt_tokens, prefill_layout: ParallelLayout, decode_layout: ParallelLayout):
    """Bytes one request's prompt KV puts on the wire (module docstring): the model's KV for the prompt
    x the decode side's head replication; the prefill layout does not change it."""
    return spec.kv_bytes_for_context(prompt_tokens) * decode_replication(spec, decode_layout)


def transfer_links(prefill_layout: ParallelLayout, decode_layout: ParallelLayout) -> int:
    """GPU-to-GPU streams a transfer uses in parallel: min(P, D) GPUs per instance."""
    return min(prefill_layout.gpus_per_instance, decode_layout.gpus_per_instance)


def kv_transfer_time_s(spec, prompt_tokens, prefill_layout, decode_layout, hw, across_nodes: bool):
    """Seconds to move one request's prompt KV: bytes / (links x per-GPU bandwidth) + one latency, over
    NVLink in one node or the NICs across nodes (LayoutError if the hardware has no network)."""
    if across_nodes:
        if not hw.has_network:
            raise LayoutError(f"{hw.name} has no inter-node network in its preset (nic_bw_gbs = 0): "
                              "disagg pools on two nodes cannot be costed")
        bw, lat = hw.nic_bw_gbs, hw.nic_latency_us
    else:
        bw, lat = hw.link_bw_gbs, hw.link_latency_us
    nbytes = kv_transfer_bytes(spec, prompt_tokens, prefill_layout, decode_layout)
    return float(nbytes / (transfer_links(prefill_layout, decode_layout) * bw * 1e9) + lat * 1e-6)


class Pools(NamedTuple):
    """The two pools of a disaggregated deployment and where their instances sit (a tuple of GPU ids each)."""

    prefill: object  # Pool
    decode: object  # Pool
    prefill_gpus: list
    decode_gpus: list


def pools_from_args(spec, hw, gpus: int, fw, prefill: str | None = None, decode: str | None = None):
    """Pools (prefill, decode, prefill instances' GPUs, decode instances' GPUs): the given pools or the
    defaults (default_pools; one pool given: the other on the GPUs left), each instance validated and fitting its GPUs' memory, placed on the run's `gpus`."""
    if prefill is None and decode is None:
        p, d = default_pools(spec, hw, gpus, fw)
    elif decode is None:  # one pool given: the other takes the GPUs left (pool_on's rule)
        p = parse_pool(prefill, "prefill")
        d = pool_on(spec, hw, gpus - p.gpus, fw, "decode")
    else:
        d = parse_pool(decode, "decode")
        p = parse_pool(prefill, "prefill") if prefill is not None else pool_on(spec, hw, gpus - d.gpus, fw, "prefill")
    for name, pool in (("prefill", p), ("decode", d)):
        pool.layout.validate(spec)
        plan = memory.plan(spec, pool.layout, hw, fw)
        if not plan.fits:
            raise LayoutError(f"disagg {name}={pool}: {spec.name} does not fit one {pool.layout} instance on "
                              f"{hw.name}: {plan.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU vs "
                              f"{plan.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    pg, dg = placement(p, d, hw, gpus)
    if not hw.has_network and any(cross_node(a, b, hw) for a in pg for b in dg):
        raise LayoutError(f"disagg pools on {gpus} GPUs span two {hw.name} nodes, whose preset has no inter-node "
                          "network (nic_bw_gbs = 0): the KV transfer cannot be costed")
    return Pools(p, d, pg, dg)


def estimate_row(spec, hw, gpus: int, I: int, O: int, prof, fw, limits, max_len: int,
                 prefill: str | None = None, decode: str | None = None) -> dict:
    """The closed form (perfmodel estimate --strategies disagg): TTFT = the prompt alone on a prefill
    instance + its KV transfer to the first decode instance (NVLink or NIC by placement); TPOT = the
    decode instance's step for this request alone (low load: what `simulate` shows before queues form);
    tok/s = min over the pools' saturated rates (prefill: whole prompts, as many as the token budget holds,
    pp at least; decode: the batch its KV holds at full length (decode admission reserves prompt + output),
    capped by max_num_seqs, at the mean context; links: one transfer at a time per prefill instance)."""
    pools = pools_from_args(spec, hw, gpus, fw, prefill, decode)
    p, d, pg, dg = pools.prefill, pools.decode, pools.prefill_gpus, pools.decode_gpus
    plan_p, plan_d = memory.plan(spec, p.layout, hw, fw), memory.plan(spec, d.layout, hw, fw)
    dep_p, dep_d = Deployment("disagg", p.layout, plan_p), Deployment("disagg", d.layout, plan_d)
    across = cross_node(pg[0], dg[0], hw)
    xfer = kv_transfer_time_s(spec, I, p.layout, d.layout, hw, across)
    ttft = ttft_s(dep_p, spec, hw, I, limits, prof, fw) + (xfer if O > 1 else 0.0)
    tpot = tpot_s(dep_d, spec, hw, I, O, prof, fw)
    seqs = max(p.layout.pp, limits.max_num_batched_tokens // I, 1)  # prompts per prefill step
    t_p = float(step_cost(spec, p.layout, hw, prefill_batch(I, seqs), prof, fw).total_s)
    rates = {"prefill": p.engines * seqs / t_p, "transfer": p.engines / xfer if O > 1 else np.inf}
    b = int(min(plan_d.kv_capacity_tokens // (I + max(O, 1)), limits.max_num_seqs))
    if O > 1:
        t_d = float(step_cost(spec, d.layout, hw, decode_batch(max(b, 1), I + O / 2.0), prof, fw).total_s)
        rates["decode"] = d.engines * b / ((O - 1) * t_d)  # requests/s: b sequences, O - 1 steps each
    name = min(rates, key=rates.get)
    tput = rates[name] * (I + max(O, 1))
    link = "NIC" if across else "NVLink"
    return {"layout": f"prefill {p} / decode {d}",
            "mode": f"TTFT prefill {p.layout} + KV over {link} ({1e3 * xfer:.2f} ms); TPOT decode {d.layout} alone; "
                    f"tok/s the {name} pool's rate (slowest)",
            "ttft_ms": 1e3 * ttft, "tpot_ms": 1e3 * tpot, "throughput_tokens_per_s": tput,
            "max_context_tokens": int(min(max_len, plan_p.kv_capacity_tokens, plan_d.kv_capacity_tokens)),
            "kv_capacity_tokens": int(plan_d.kv_capacity_tokens),
            "weights_gb_per_gpu": max(plan_p.weight_bytes_per_gpu, plan_d.weight_bytes_per_gpu) / 1e9,
            "saturated_concurrency": float(d.engines * b),
            "note": "pools as `simulate --policy disagg` lays them out (default: half the GPUs each, DP rule); "
                    "queueing for decode KV left out; for a trace: simulate --policy disagg"}
