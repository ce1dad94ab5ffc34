"""The serving loop: rank 0 schedules with the simulator's pure scheduler, every rank runs the step.

Each turn (a "tick") rank 0 issues the requests that are due (open loop: at their trace times on
the wall clock; closed loop: at most max_concurrency in flight, in trace order), asks
`simulator.engine.scheduler.schedule` what each engine's next step runs, carries the answer out on
its `RunningBatch` with `simulator.engine.step.begin` (the simulator's engine does exactly this),
and broadcasts the plan: per engine, which requests compute which tokens, plus the sequences whose
KV to free. Every rank runs its engine's share of the step (real collectives for TP/SP/Shift) and
times it; the slowest rank of an engine is the step's measured duration. Rank 0 then applies the
step with `step.advance` at the wall time it ended: first tokens, completions, freed KV.

DP engines are separate schedulers (one per rank, requests routed by the simulator's Router) but
step in lockstep ticks: an idle replica waits for the tick to end (docs in kernels/serve/__init__.py).
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque

import torch
import torch.distributed as dist

from simulator.cluster.router import Router
from simulator.engine import step as sim_step
from simulator.engine.batch import RunningBatch
from simulator.engine.kv import KVBlocks
from simulator.engine.scheduler import Waiting, schedule
from simulator.results.records import RequestRecords, StepRecords, step_row

from .workers import Runner, engine_of, num_engines

IDLE_TICK_S = 1.0  # longest sleep between broadcasts while nothing runs (collectives time out at 60 s)
WARMUP_SID = 10**9  # a sequence id no trace uses


@dataclasses.dataclass
class ServeConfig:
    """Everything the ranks need, picklable."""

    strategy: str
    spec: object  # perfmodel ModelSpec
    workload: object  # anything with .requests (the trace's DataFrame)
    limits: object  # simulator.engine.scheduler.Limits
    num_blocks: int  # KV blocks per engine (the scheduler's and the reference cache's)
    max_concurrency: int = 0
    router: str = "least-tokens"
    seed: int = 0
    dtype: str = "float32"
    threshold: int = 256  # Shift: base model above this many tokens per step
    warmup: bool = True


class _Engine:
    """Rank 0's view of one serving engine: the simulator's batch, queue and KV accounting."""

    def __init__(self, index: int, lim, num_blocks: int, recs):
        self.index, self.recs = index, recs
        self.batch = RunningBatch(lim.block_size)
        self.waiting: deque = deque()
        self.kv = KVBlocks(num_blocks * lim.block_size, lim.block_size)
        self.outstanding_tokens = 0
        self.outstanding_requests = 0

    @property
    def capacity_tokens(self) -> int:
        return self.kv.capacity_tokens

    def fits(self, pos: int) -> bool:
        return self.recs.total_tokens[pos] <= self.kv.capacity_tokens

    def busy(self) -> bool:
        return bool(len(self.batch) or self.waiting)


def _mode(cfg: ServeConfig, tokens: int) -> str:
    if cfg.strategy == "shift":  # kernels.shift.shift_step's rule
        return "base" if tokens > cfg.threshold else "shift"
    return cfg.strategy


def _warmup(runner: Runner, cfg: ServeConfig) -> None:
    """One prefill (above Shift's threshold when it fits) and one decode, then free it: the first
    real step does not pay for lazy initialisation."""
    n = max(8, min(cfg.threshold + 1, cfg.limits.budget, (cfg.num_blocks - 1) * cfg.limits.block_size))
    runner.run(runner.batch(((WARMUP_SID,), (n,), (0,), (n + 1,))))
    runner.run(runner.batch(((WARMUP_SID,), (1,), (n,), (n + 1,))))
    runner.release([WARMUP_SID])


def serve(rank: int, world_size: int, cfg: ServeConfig, make_lead=None):
    """Run the trace; rank 0 returns (RequestRecords, StepRecords, extra step columns), others None.
    `make_lead(cfg, n_engines)` builds rank 0's Lead (kernels/serve/http.py: requests from HTTP)."""
    runner = Runner(cfg.strategy, cfg.spec, rank, world_size, cfg.num_blocks, cfg.seed,
                    getattr(torch, cfg.dtype), cfg.threshold)
    if cfg.warmup:
        _warmup(runner, cfg)
    me = engine_of(cfg.strategy, rank)
    n_eng = num_engines(cfg.strategy, world_size)
    members = [[r for r in range(world_size) if engine_of(cfg.strategy, r) == e] for e in range(n_eng)]
    dist.barrier()
    lead = (make_lead or Lead)(cfg, n_eng) if rank == 0 else None
    while True:
        box = [lead.plan() if lead else None]
        dist.broadcast_object_list(box, src=0)
        plan = box[0]
        if plan["stop"]:
            break
        runner.release(plan["release"])
        runner.release_kv(plan["preempt"].get(me, ()))
        run = plan["runs"].get(me)
        dt = 0.0
        if run is not None:
            b = runner.batch(run)
            t = time.perf_counter()
            runner.run(b)
            dt = time.perf_counter() - t
        if not plan["runs"]:
            continue
        mine = torch.zeros(world_size, dtype=torch.float64, device=runner.dev)  # (NCCL reduces GPU tensors only)
        mine[rank] = dt
        dist.all_reduce(mine)  # every rank's step time (a sum of one-hot vectors)
        if lead:
            times = mine.tolist()
            lead.apply({e: max(times[r] for r in members[e]) for e in plan["runs"]})
    return lead.result() if lead else None


class Lead:
    """Rank 0: issuing, scheduling, records."""

    def __init__(self, cfg: ServeConfig, n_eng: int):
        self.cfg, lim = cfg, cfg.limits
        self.recs = recs = RequestRecords(cfg.workload)
        self.steps = StepRecords()
        self.tick_s: list = []  # wall time of each row's tick (schedule + broadcast + step + gather)
        self.req = Waiting(recs.input_tokens, recs.output_tokens, recs.generated, recs.priority, recs.arrival_s)
        self.engines = [_Engine(i, lim, cfg.num_blocks, recs) for i in range(n_eng)]
        self.router = Router(self.engines, cfg.router)
        self.next, self.in_flight, self.release = 0, 0, []
        self.pending: dict = {}
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # ---- issuing -------------------------------------------------------------------------
    def _issue_due(self, t: float) -> None:
        r, c = self.recs, self.cfg.max_concurrency
        while self.next < len(r) and r.arrival_s[self.next] <= t and (not c or self.in_flight < c):
            pos = self.next
            self.next += 1
            # open loop: the client sent it at its trace time; closed loop: when a slot freed (now)
            r.issued_s[pos] = r.arrival_s[pos] if not c else max(t, r.arrival_s[pos])
            self._route(pos)

    def _route(self, pos: int) -> bool:
        """Queue request `pos` on the engine the router picks; False (reject_reason set) if none can."""
        r, mml = self.recs, self.cfg.spec.max_model_len
        if r.total_tokens[pos] > mml:
            r.reject_reason[pos] = f"context_length: prompt + output > max_model_len ({mml})"
            return False
        e = self.router.pick(pos)
        if e is None:
            cap = self.engines[0].capacity_tokens
            r.reject_reason[pos] = f"longer than every engine's KV capacity ({cap} tokens)"
            return False
        r.engine[pos] = e.index
        e.outstanding_tokens += r.total_tokens[pos]
        e.outstanding_requests += 1
        e.waiting.append(pos)
        self.in_flight += 1
        return True

    def _finished(self) -> bool:
        """Nothing runs: is the run over? (the trace is all issued)"""
        return self.next >= len(self.recs)

    def _idle(self) -> None:
        """Nothing runs and more will come: wait for it (at most IDLE_TICK_S: the ranks hear a plan)."""
        wait = self.recs.arrival_s[self.next] - self.now()
        time.sleep(min(max(wait, 0.0), IDLE_TICK_S))

    # ---- one tick ------------------------------------------------------------------------
    def plan(self) -> dict:
        t = self.now()
        self._issue_due(t)
        release, self.release = self.release, []
        if not any(e.busy() for e in self.engines):
            if self._finished():
                return {"stop": True}
            self._idle()
            return {"stop": False, "release": release, "preempt": {}, "runs": {}}
        self.tick_start, runs, preempt = t, {}, {}
        for e in self.engines:
            if not e.busy():
                continue
            b = e.batch
            s = schedule(b, e.waiting, e.kv.free, self.req, self.cfg.limits)
            if s.preempt:
                preempt[e.index] = list(b.idx[len(b) - s.preempt:])
            if s.preempt or s.admitted:
                sim_step.begin(b, e.waiting, self.recs, s, t)
                e.kv.used = b.used_blocks
            if not s.granted or (not s.decode_running and sum(s.granted) == 0):
                raise RuntimeError(f"engine {e.index}: nothing schedulable with {len(e.waiting)} waiting, batch={b}")
            agg = sim_step.aggregates(b, s)
            all_decode = sim_step.all_decode(b, s, agg)
            total = self.recs.total_tokens
            rows = [(p, g, c, total[p]) for p, g, c in zip(b.idx, s.granted, b.computed()) if g > 0]
            runs[e.index] = tuple(tuple(x) for x in zip(*rows))
            self.pending[e.index] = (s, agg, all_decode)
        return {"stop": False, "release": release, "preempt": preempt, "runs": runs}

    def apply(self, durations: dict) -> None:
        """The step of every engine that ran has ended now: record it and advance the batches."""
        end = self.now()
        for i, dur in durations.items():
            e = self.engines[i]
            s, agg, all_decode = self.pending.pop(i)
            mode = _mode(self.cfg, agg.tokens)
            self.steps.append(step_row(start_s=self.tick_start, duration_s=dur, engine=i,
                                       mode=self.steps.mode_code(mode), steps=1, agg=agg,
                                       kv_used_tokens=e.kv.used * e.kv.block_size, waiting=len(e.waiting)))
            self.tick_s.append(end - self.tick_start)
            done = sim_step.advance(e.batch, self.recs, s, 1, all_decode, end)
            e.kv.used = e.batch.used_blocks
            if done:
                self._complete(e, done, end)
            if not all_decode:
                e.batch.decoding = sim_step.still_decoding(e.batch, s)

    def _complete(self, e: _Engine, at: list, now: float) -> None:
        r = self.recs
        for p, gen in e.batch.remove(at):
            r.finish_s[p] = now
            r.generated[p] = gen
            e.outstanding_tokens -= r.total_tokens[p]
            e.outstanding_requests -= 1
            self.in_flight -= 1
            self.release.append(p)
        e.kv.used = e.batch.used_blocks

    def result(self):
        return self.recs, self.steps, {"tick_s": self.tick_s}
