"""One run: engines laid out by a policy, a router, and the arrival process, on one simpy clock.

    policy plans (perfmodel layouts, KV capacity) -> engines (Runner over StepTables, Limits, KV)
    Arrivals issue requests -> Router picks an engine (or the policy's front door) -> Engine loop
    -> RequestRecords / StepRecords (simulator.results)

Every request ends completed or rejected with a reason (simulator.results.metrics checks totals).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import simpy

from perfmodel import graphs
from perfmodel.deploy import SINGLE_NODE_STRATEGIES as SINGLE_NODE_POLICIES  # (one list for both layers)
from perfmodel.framework import DEFAULT_FRAMEWORK, vllm_default_limits
from perfmodel.layout import LayoutError
from perfmodel.modelspec import resolve_max_model_len
from perfmodel.steptable import StepTable
from simulator.engine.config import EngineConfig
from simulator.engine.limits import engine_limits
from simulator.engine.lockstep import Lockstep
from simulator.engine.loop import Engine
from simulator.engine.ratio import NewTokenRatio
from simulator.engine.runner import Runner
from simulator.engine.scheduler import Limits
from simulator.policies import POLICIES
from simulator.engine.specstep import SpecStep
from simulator.policies.static import STATIC
from simulator.results.records import RequestRecords, StepRecords

from .arrivals import Arrivals
from .frontend import Tokenizer
from .gate import Gate
from .router import ROUTERS, Router


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Everything a run needs besides the workload, model, hardware and profile."""

    policy: str = "tp"
    layout: str | None = None
    gpus: int = 8
    policy_args: tuple = ()  # (("threshold", "256"), ...)
    engine: EngineConfig = EngineConfig()
    router: str = "least-tokens"
    max_concurrency: int = 0  # 0: open loop (trace arrivals); N: closed loop, N in flight
    framework: object = DEFAULT_FRAMEWORK
    client_turnaround_s: float = 0.0  # closed loop: a finished request's slot is handed on this much later
    spec_decode: object = None  # perfmodel.specdec.SpecDecode of an aggregated static deployment (None: off)

    def __post_init__(self):
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}: one of {', '.join(ROUTERS)}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}: one of {', '.join(sorted(POLICIES))}")
        if self.gpus < 1:
            raise ValueError(f"--gpus {self.gpus} must be >= 1")
        if self.max_concurrency < 0:
            raise ValueError(f"max_concurrency={self.max_concurrency} must be >= 0")
        if self.spec_decode is not None and self.policy not in STATIC:
            raise ValueError(f"--mtp (speculative decoding in an aggregated engine) applies to the static policies "
                             f"({', '.join(STATIC)}), not --policy {self.policy}" + (
                                 "; the disaggregated decode pool takes --policy-arg decode_mtp=D"
                                 if self.policy == "disagg" else ""))
        if not 0 <= self.client_turnaround_s < float("inf"):
            raise ValueError(f"client turnaround {self.client_turnaround_s} s must be >= 0 and finite")


@dataclasses.dataclass
class SimResult:
    """Per-request and per-step records of one run, and the engines' static facts."""

    requests: object  # RequestRecords
    steps: object  # StepRecords
    engines: list  # [{"index", "modes", "gpus", "kv_capacity_tokens", "note"}], one per engine
    duration_s: float
    max_model_len: int = 0  # longest request served (prompt + output): the model's or --max-model-len

    @property
    def kv_capacity_tokens(self) -> int:
        """KV capacity of the whole deployment in tokens: the sum over engines (node total)."""
        return int(sum(e["kv_capacity_tokens"] for e in self.engines))


def _pp_of(plan) -> int:
    """Pipeline depth of a plan's engine: vLLM keeps pp batches of up to `budget` tokens in flight
    (V1's batch queue), so a PP engine's step holds pp x budget tokens."""
    return max([lay.pp for lay in plan.modes.values() if not callable(lay)] or [1])


ADP_UNUSED = ("--adp-balance changed nothing: no attention-DP ranks step together in this deployment (the balance "
              "acts on a lock-step group: an attention-DP + EP instance under --dp-lockstep ep or all)")


def lockstep_groups(rule: str, plans, engines, every: bool = True) -> list[list]:
    """The engines that step together under `rule` (EngineConfig.dp_lockstep): "ep", each block of
    consecutive engines whose instance layout keeps dp = the DP ranks one expert group spans
    (perfmodel.deploy.instance_layout); "all", every engine (`every`: a static policy's; a pool of a
    policy's instances keeps "ep"'s groups); groups of one engine are left alone."""
    if rule == "off" or len(engines) < 2:
        return []
    if rule == "all" and every:
        return [list(engines)]
    groups, i = [], 0
    while i < len(engines):
        # (a pool's mode names its instance layout: disagg's PoolMode; a dynamic policy's step objects have none)
        lays = [getattr(m, "layout", m) for m in plans[i].modes.values()]
        lays = [lay for lay in lays if not callable(lay)]
        g = min(lay.dp for lay in lays) if lays else 1
        if g > 1:
            groups.append(list(engines[i:i + g]))
        i += max(g, 1)
    return groups


def simulate(workload, spec, hw, cfg: SimConfig, prof=None, progress=None, on_engine=None) -> SimResult:
    """Replay `workload` through the engines of `cfg.policy`; every request ends completed or
    rejected with a reason. `progress(n)` is told of every request that ends; `on_engine(engine)`
    sees each engine once built (e.g. to add step hooks that check invariants)."""
    fw, ec = cfg.framework, cfg.engine
    max_model_len = resolve_max_model_len(spec, ec.max_model_len)
    if cfg.gpus > hw.gpus_per_node and cfg.policy in SINGLE_NODE_POLICIES:
        raise LayoutError(f"--policy {cfg.policy} runs on one node ({hw.gpus_per_node} GPUs); {cfg.gpus} GPUs span "
                          f"several: run it with --nodes 1, or use shift, flying or a static policy")
    limits = vllm_default_limits(hw)
    budget = ec.max_num_batched_tokens or limits.max_num_batched_tokens
    max_seqs = ec.max_num_seqs or limits.max_num_seqs
    if fw.graph_rule == graphs.VLLM:  # vLLM captures graphs up to M, set by its limits (graphs.vllm_capture_max)
        fw = dataclasses.replace(fw, cuda_graph_max_bs=graphs.vllm_capture_max(fw.cuda_graph_max_bs, max_seqs, budget))
    plans = POLICIES[cfg.policy](policy=cfg.policy, layout=cfg.layout, spec=spec, hw=hw, gpus=cfg.gpus, fw=fw,
                                 policy_args=dict(cfg.policy_args), prof=prof)
    env = simpy.Environment()
    recs, steps = RequestRecords(workload), StepRecords()
    recs.prefix_caching = bool(ec.enable_prefix_caching and recs.prefix_blocks is not None
                               and any(len(b) for b in recs.prefix_blocks if isinstance(b, tuple)))
    max_tokens = budget * max(_pp_of(p) for p in plans) + max_seqs
    tables: dict = {}  # one StepTable per distinct instance layout (built once, shared)

    def table(lay):
        if lay not in tables:
            tables[lay] = StepTable(spec, lay, hw, prof, fw, max_tokens=max_tokens, max_seqs=max_seqs)
            if cfg.spec_decode is not None:  # per emitted token (simulator.engine.specstep)
                tables[lay] = SpecStep(tables[lay], cfg.spec_decode, spec.num_layers)
        return tables[lay]

    def build(i, p):
        # a mode is an instance layout (one StepTable) or a factory table_fn -> step-time object (SiDP)
        runner = Runner({m: lay(table) if callable(lay) else table(lay) for m, lay in p.modes.items()}, p.choose,
                        (fw.host_floor_s, fw.host_floor_seq_s))
        make = p.engine_cls
        if make is not None:  # an engine of its own kind (Seesaw's phased engine, the disagg pools')
            return make(env=env, index=i, runner=runner, ec=ec, budget=budget * _pp_of(p), max_seqs=max_seqs,
                        kv_capacity_tokens=p.kv_capacity_tokens, recs=recs, steps=steps, finished=finished)
        return Engine(env=env, index=i, runner=runner, limits=engine_limits(ec, budget, max_seqs, _pp_of(p)),
                      kv_capacity_tokens=p.kv_capacity_tokens, recs=recs, steps=steps, fast_forward=ec.fast_forward,
                      arrivals_due=None if fed else arrivals.due, prefix_caching=recs.prefix_caching,
                      ratio=NewTokenRatio.of(ec) if ec.scheduler == "sglang" else None, wake_s=hw.host_wake_s,
                      schedule_ahead=fw.schedule_ahead)

    front = plans[0].front  # a policy that places requests itself (Flying, disagg)
    gate = Gate(env, recs, int(max_model_len), int(spec.attention_chunk_tokens or 0), int(budget),
                int(ec.max_waiting or 0), front, progress)  # a request's way in (gate.py)
    finished = gate.finished

    tokenizer = Tokenizer(env, fw.tokenize_s_per_token, gate.tokenized, fw.tokenize_batch_wait_s,
                          fw.tokenize_max_batch)
    tokenizing = gate.tokenizing = tokenizer.active
    arrivals = Arrivals(env, recs.arrival_s, gate.issue, cfg.max_concurrency, cfg.client_turnaround_s)
    gate.tokenizer, gate.arrivals = tokenizer, arrivals
    # an open loop through the tokenizer: no event per arrival (frontend.py), and none an engine waits on
    fed = tokenizing and not cfg.max_concurrency
    engines = [build(i, p) for i, p in enumerate(plans)]
    for p, e in zip(plans, engines):
        if p.engine_cls is None:  # (an engine its policy
            e.add_finish_hook(finished)  # built reports completions itself: disagg's prefill ends no request)
        if p.attach is not None:  # a dynamic policy observes its engines
            p.attach(e)
        if on_engine is not None:
            on_engine(e)
    gate.router = Router(engines, cfg.router, front.fits if front is not None else None)
    gate.engines = engines
    if cfg.policy in STATIC:  # (dynamic policies hold and re-plan engines one by one: never lock-stepped)
        groups = lockstep_groups(ec.dp_lockstep, plans, engines)
    else:  # a policy's plain instances that step with their attention-DP siblings (disagg's prefill pool)
        own = [i for i, p in enumerate(plans) if p.lockstep]
        groups = lockstep_groups(ec.dp_lockstep, [plans[i] for i in own], [engines[i] for i in own], every=False)
    for group in groups:
        Lockstep(env, group, (ec.adp_timeout_iters, ec.adp_batching_wait_iters) if ec.adp_balance else None)
    # (as TRT-LLM ignores attention_dp_config without enable_attention_dp: said, not refused)
    unused = ADP_UNUSED if ec.adp_balance and not groups else ""

    if fed:
        tokenizer.feed(arrivals.arrival_s, gate.tokens_of)
    else:
        arrivals.start()
    env.run()
    info = [{"index": e.index, "modes": {m: str(lay) for m, lay in p.modes.items()}, "gpus": list(p.gpus),
             "kv_capacity_tokens": e.capacity_tokens, "note": "; ".join(n for n in (p.note, unused) if n)}
            for e, p in zip(engines, plans)]
    duration = float(np.nanmax(recs.finish_s)) if np.isfinite(recs.finish_s).any() else 0.0
    return SimResult(recs, steps, info, duration, max_model_len)
