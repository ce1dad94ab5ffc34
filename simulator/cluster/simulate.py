"""Cluster: engines laid out by a policy, a router, and the arrival process, on one simpy clock.

Arrivals are scheduled URGENT so that a request arriving at the very time a step ends is seen
by that step boundary (the one same-time rule; tests/test_sim_ordering.py pins it).
"""
from __future__ import annotations

import dataclasses
import operator

import numpy as np
import simpy
from simpy.events import URGENT

from perfmodel.framework import DEFAULT_FRAMEWORK, vllm_default_limits
from perfmodel.steptable import StepTable

from simulator.engine.config import EngineConfig
from simulator.engine.loop import Engine
from simulator.policies import POLICIES
from simulator.results.records import RequestRecords, StepRecords
from simulator.engine.runner import Runner
from simulator.engine.stretch import event_at

ROUTERS = ("round-robin", "least-tokens", "shortest-queue")


def urgent_at(env, t: float):
    """An event at exactly time t that fires before NORMAL events of that instant (simpy's own
    URGENT priority, as its Initialize and Interruption events use)."""
    return event_at(env, t, URGENT)


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Everything a run needs besides the workload, model and hardware."""

    policy: str = "tp"
    layout: str | None = None
    gpus: int = 8
    policy_args: tuple = ()  # (("threshold", "256"), ...)
    engine: EngineConfig = EngineConfig()
    router: str = "least-tokens"
    max_concurrency: int = 0  # 0: open loop (trace arrivals); N: closed loop, N in flight
    framework: object = DEFAULT_FRAMEWORK

    def __post_init__(self):
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}: one of {', '.join(ROUTERS)}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}: one of {', '.join(sorted(POLICIES))}")
        if self.max_concurrency < 0:
            raise ValueError(f"max_concurrency={self.max_concurrency} must be >= 0")


@dataclasses.dataclass
class SimResult:
    """Per-request and per-step records of one run, and the engines' static facts."""

    requests: object  # RequestRecords
    steps: object  # StepRecords
    engines: list  # [{"index", "modes", "gpus", "kv_capacity_tokens"}]
    duration_s: float


_LOAD = {"least-tokens": operator.attrgetter("outstanding_tokens"),
         "shortest-queue": operator.attrgetter("outstanding_requests")}


def _route(engines, router: str, rr_state: list):
    """Pick an engine among those whose KV can hold the request (state changes only at
    arrivals and completions, so fast-forward and step-by-step route identically). Ties go to
    the lowest index (min keeps the first of equal keys; engines are in index order)."""
    if router == "round-robin":
        e = engines[rr_state[0] % len(engines)]
        rr_state[0] += 1
        return e
    return min(engines, key=_LOAD[router])


def simulate(workload, spec, hw, cfg: SimConfig, prof=None, progress=None) -> SimResult:
    """Replay `workload` through the engines of `cfg.policy`; every request ends completed or
    rejected with a reason."""
    fw = cfg.framework
    plans = POLICIES[cfg.policy](cfg.policy, cfg.layout, spec, hw, cfg.gpus, fw, dict(cfg.policy_args), prof=prof)
    limits = vllm_default_limits(hw)
    budget = cfg.engine.max_num_batched_tokens or limits.max_num_batched_tokens
    max_seqs = cfg.engine.max_num_seqs or limits.max_num_seqs
    env = simpy.Environment()
    recs, steps = RequestRecords(workload), StepRecords()
    tables: dict = {}  # one StepTable per distinct instance layout (built once, shared)

    def pp_of(plan) -> int:
        """Pipeline depth of a plan's engine: vLLM keeps pp batches of up to `budget` tokens in
        flight (V1's batch queue), so a PP engine's step holds pp x budget tokens."""
        return max([getattr(l, "pp", 1) for l in plan.modes.values() if not callable(l)] or [1])

    max_tokens = budget * max(pp_of(p) for p in plans) + max_seqs

    def table(lay):
        if lay not in tables:
            tables[lay] = StepTable(spec, lay, hw, prof, fw, max_tokens=max_tokens, max_seqs=max_seqs)
        return tables[lay]

    state = {"in_flight": 0, "slot": None}

    def on_finish(pos):
        if progress is not None:
            progress(1)
        state["in_flight"] -= 1
        if state["slot"] is not None and not state["slot"].triggered:
            state["slot"].succeed()

    # a mode is an instance layout (one StepTable) or a factory table_fn -> step-time object (SiDP);
    # a plan may name its own Engine class and observe its engine once built (dynamic policies)
    engines = [(getattr(p, "engine_cls", None) or Engine)(
        env, i, Runner({m: l(table) if callable(l) else table(l) for m, l in p.modes.items()}, p.choose),
        cfg.engine, budget * pp_of(p), max_seqs, p.kv_capacity_tokens, recs, steps, on_finish)
        for i, p in enumerate(plans)]
    for p, e in zip(plans, engines):
        if hasattr(e, "chunk_cap"):  # one request per batch: at most `budget` tokens a step
            e.chunk_cap = min(e.chunk_cap, budget)
        if getattr(p, "attach", None) is not None:
            p.attach(e)
    rr = [0]

    def admit(pos, at_boundary=True):
        e = None
        if cfg.router != "round-robin":  # the least loaded of all, if it fits, is that of those that fit
            e = _route(engines, cfg.router, rr)
            fit = [e] if e.fits(pos) else [x for x in engines if x.fits(pos)]
            e = e if fit and fit[0] is e else None
        else:
            fit = [x for x in engines if x.fits(pos)]
        if not fit:
            need = recs.total_tokens[pos]
            cap = max(e.capacity_tokens for e in engines)
            # one reason per cause (summary.json counts them), the request's own size is in its row
            if need <= cap:  # fits the KV but not the step budget: chunked prefill is off
                recs.reject_reason[pos] = f"longer than max_num_batched_tokens ({budget}) with chunked prefill off"
            else:
                recs.reject_reason[pos] = f"longer than every engine's KV capacity ({cap} tokens)"
            recs.issued_s[pos] = env.now
            if progress is not None:
                progress(1)
            return False
        e = e if e is not None else _route(fit, cfg.router, rr)
        if cfg.engine.max_waiting and len(e.waiting) >= cfg.engine.max_waiting:
            recs.reject_reason[pos] = f"admission cap: {cfg.engine.max_waiting} requests already waiting"
            recs.issued_s[pos] = env.now
            if progress is not None:
                progress(1)
            return False
        state["in_flight"] += 1
        e.submit(pos, at_boundary)
        return True

    arrivals = recs.arrival_s

    def open_loop():
        for pos in range(len(arrivals)):
            if arrivals[pos] > env.now:
                yield urgent_at(env, arrivals[pos])
            admit(pos)

    def closed_loop(limit: int):
        urgent = True  # resumed by an URGENT event (start, arrival), not by a completion's slot
        for pos in range(len(arrivals)):
            while state["in_flight"] >= limit:
                state["slot"] = env.event()
                yield state["slot"]
                urgent = False
            state["slot"] = None
            if arrivals[pos] > env.now:
                yield urgent_at(env, arrivals[pos])
                urgent = True
            admit(pos, urgent)

    env.process(closed_loop(cfg.max_concurrency) if cfg.max_concurrency else open_loop())
    env.run()
    info = [{"index": e.index, "modes": {m: str(l) for m, l in p.modes.items()}, "gpus": list(p.gpus),
             "kv_capacity_tokens": e.capacity_tokens} for e, p in zip(engines, plans)]
    duration = float(np.nanmax(recs.finish_s)) if np.isfinite(recs.finish_s).any() else 0.0
    return SimResult(recs, steps, info, duration)
