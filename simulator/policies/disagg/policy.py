"""Disaggregated prefill/decode (`--policy disagg`): a prefill pool and a decode pool of instances.

    --policy-arg prefill=2x(tp=2) --policy-arg decode=1x(tp=4)      (N x instance layout; ';' or ','
    inside the parentheses: 1x(tp=2;pp=2)); in --compare: disagg:prefill=2x(tp=2),decode=1x(tp=4)

Per-pool engine limits (each instance's, under attention DP each DP rank's, as TRT-LLM's max_batch_size
and SGLang's max-running-requests are; default: the run's --max-num-seqs / --max-num-batched-tokens):
    --policy-arg decode_max_seqs=16 --policy-arg prefill_max_seqs=2 --policy-arg prefill_max_tokens=2048
Speculative decoding on the decode pool (perfmodel.specdec: MTP / EAGLE draft chain of d tokens, each
accepted with probability p once its predecessors were; default p: specdec.MTP_ACCEPTANCE, fitted):
    --policy-arg decode_mtp=3 [--policy-arg mtp_acceptance=0.7]
Per-pool memory (each pool's engine setting, in its framework's meaning: pool_framework below):
    --policy-arg prefill_memory_fraction=0.6 --policy-arg decode_memory_fraction=0.9
Decode routing (coordinator.py): `decode_routing=least_loaded` (default: any decode instance with room) or
`round_robin` (each request bound to the next decode worker in turn: Dynamo's default router).
A full decode pool holds requests (their first token waits, prefill backs up behind them): Dynamo's
disaggregated deployments size decode's max batch below the client count on purpose.

Defaults (perfmodel.disagg.default_pools): half the GPUs prefill, the rest decode, each half laid out as
`--policy dp` would (one TP instance where it holds one replica); one pool given, the other takes the
GPUs left. Engines: prefill instances first (plain Engines over perfmodel StepTables, each request capped
at its first token: coordinator.PrefillView; an attention-DP instance's ranks step in lock-step, as an aggregated
one's do: EnginePlan.lockstep), then decode instances (decode.DecodeEngine); the
Coordinator (coordinator.py) is the cluster's front door and moves each request's KV between them with
perfmodel.disagg's transfer time. Placement node-major, prefill pool first (perfmodel.disagg.placement).
"""
from __future__ import annotations

import dataclasses

from perfmodel import disagg, memory, specdec
from perfmodel.framework import with_knobs
from simulator.engine.limits import engine_limits
from simulator.engine.loop import Engine
from simulator.engine.ratio import NewTokenRatio
from simulator.policies.base import EnginePlan, parse_args

from .coordinator import Coordinator
from .decode import DecodeEngine

ARGS = {"prefill": str, "decode": str, "prefill_max_seqs": int, "prefill_max_tokens": int, "decode_max_seqs": int,
        "decode_mtp": int, "mtp_acceptance": float, "decode_routing": str, "prefill_memory_fraction": float,
        "decode_memory_fraction": float}


def pool_framework(fw, fraction: float | None, key: str):
    """`fw` with one pool's engine memory setting, in its framework's meaning (None: fw unchanged): vLLM's
    --gpu-memory-utilization and SGLang's --mem-fraction-static are fractions of the GPU's memory for
    weights + KV (an explicit SGLang fraction replaces its reserve rule: server_args.py sets
    mem_fraction_static only when none is given), TRT-LLM's free_gpu_memory_fraction a fraction of what
    the weights leave free (perfmodel.framework.FRAMEWORKS, perfmodel.memory.plan)."""
    if fraction is None:
        return fw
    if not 0 < fraction <= 1:
        raise ValueError(f"policy argument {key}={fraction} must be in (0, 1]")
    return with_knobs(fw, fraction)  # (--gpu-memory-utilization's own path, SGLang's reserve rule included)


@dataclasses.dataclass(frozen=True)
class PoolMode:
    """A mode entry: the instance layout's StepTable, named by the whole deployment (summary `layout`)."""

    layout: object
    label: str

    def __call__(self, table_fn):
        return table_fn(self.layout)

    def __str__(self) -> str:
        return self.label


def _prefill_maker(coord: Coordinator, i: int, layout, seqs: int | None, tokens: int | None):
    def make(*, env, index, runner, ec, budget, max_seqs, kv_capacity_tokens, recs, steps, finished):
        # (the cluster passes the run's budget as is: a PoolMode is not a layout to it; engine_limits gives a PP
        # instance pp batches of it in flight, as the aggregated engines have)
        budget, max_seqs = tokens or budget, seqs or max_seqs
        e = Engine(env=env, index=index, runner=runner, limits=engine_limits(ec, budget, max_seqs, layout.pp),
                   kv_capacity_tokens=kv_capacity_tokens, recs=recs, steps=steps, fast_forward=ec.fast_forward,
                   prefix_caching=recs.prefix_caching, ratio=NewTokenRatio.of(ec) if ec.scheduler == "sglang" else None,
                   prefill_only=True)
        coord.attach_prefill(i, e, finished)
        return e
    return make


def _decode_maker(coord: Coordinator, j: int, seqs: int | None, spec_dec):
    def make(*, env, index, runner, ec, budget, max_seqs, kv_capacity_tokens, recs, steps, finished):
        e = DecodeEngine(env=env, index=index, table=runner.tables["decode"], max_seqs=seqs or max_seqs,
                         capacity_tokens=kv_capacity_tokens, block_size=ec.block_size, recs=recs, steps=steps,
                         fast_forward=ec.fast_forward, spec=spec_dec,
                         num_layers=coord.spec.num_layers, floor_at=runner.floor_at if runner.floored else None)
        coord.attach_decode(j, e)
        return e
    return make


def disagg_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list:
    """Prefill and decode pools over `gpus` GPUs. Arguments: prefill, decode (N x (layout); defaults above),
    and the per-pool limits above."""
    a = parse_args(policy_args, ARGS)
    for k in ("prefill_max_seqs", "prefill_max_tokens", "decode_max_seqs"):
        if k in a and a[k] < 1:
            raise ValueError(f"policy argument {k}={a[k]} must be >= 1")
    pools = disagg.pools_from_args(spec, hw, gpus, fw, a.get("prefill"), a.get("decode"))
    p, d, pg, dg = pools.prefill, pools.decode, pools.prefill_gpus, pools.decode_gpus
    label = f"prefill {p} / decode {d}"
    note = "" if "prefill" in a or "decode" in a else (
        f"disagg: default pools {label} (half the GPUs each, laid out as --policy dp); "
        "--policy-arg prefill=Nx(...) / decode=Nx(...) set them")
    if "mtp_acceptance" in a and "decode_mtp" not in a:
        raise ValueError("policy argument mtp_acceptance needs decode_mtp (the draft tokens per step)")
    spec_dec = (specdec.SpecDecode(a["decode_mtp"], a.get("mtp_acceptance", specdec.MTP_ACCEPTANCE))
                if "decode_mtp" in a else None)
    coord = Coordinator(spec, hw, p.layout, d.layout, pg, dg, a.get("decode_routing", "least_loaded"),
                        fw.pd_handoff_s)
    cap_p, cap_d = (memory.plan(spec, lay, hw, pool_framework(fw, a.get(k), k)).kv_capacity_tokens
                    for lay, k in ((p.layout, "prefill_memory_fraction"), (d.layout, "decode_memory_fraction")))
    # an instance of one pool: the policy builds its engine (engine_cls), the Coordinator routes
    plans = [EnginePlan({"prefill": PoolMode(p.layout, label)}, lambda t: "prefill", cap_p, ids, note,
                        engine_cls=_prefill_maker(coord, i, p.layout, a.get("prefill_max_seqs"),
                                                 a.get("prefill_max_tokens")), front=coord, lockstep=True)
              for i, ids in enumerate(pg)]
    plans += [EnginePlan({"decode": PoolMode(d.layout, label)}, lambda t: "decode", cap_d, ids, note,
                         engine_cls=_decode_maker(coord, j, a.get("decode_max_seqs"), spec_dec), front=coord)
              for j, ids in enumerate(dg)]
    return plans
