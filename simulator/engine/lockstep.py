"""Lock-step engines: DP ranks whose steps start and end together.

Attention-DP ranks that share one expert-parallel MoE run every step together: each MoE layer's
dispatch/combine all_to_all is a collective over all of them, so no rank finishes a step before the
slowest one, and an idle rank runs a dummy batch while any other has work (vLLM's DP engine
`execute_dummy_batch`, SGLang's idle batches under DP attention, TRT-LLM's attention-DP dummy
requests). A prefill on one rank therefore stretches every other rank's decode step. The reference
serving loop (kernels.serve) steps its DP replicas in lock-step ticks as well, by construction.

A tick: every member with work schedules at the tick's start (simulator.engine.scheduler, as an
engine alone would), the tick lasts as long as the slowest member's step, and every member applies its
step at the tick's end. A request routed to an idle member during a tick waits for the tick to end.
The dummy batch of an idle member costs nothing here (one token through the model, less than any busy
member's step). Where the members' MoE dispatches to experts spread over all of them (attention DP + EP),
each member's routed experts serve the whole group's tokens: they are costed at the members' mean
(CUDA-graph padded) tokens this tick, idle members counting 0 (perfmodel.steptable.StepTable.time_s's
`rank_tokens`), not at the costed member's own as if every rank were as busy. Steps are taken one at a
time (no closed-form decode stretches): the cost grows with ticks, as it does step by step.

With `balance` (TRT-LLM's attention_dp_config enable_balance: engine/adpbalance.py), the members schedule first,
the group decides from all of their schedules whether this tick holds every member's prompts, and then each
carries out its schedule (or, held, the one without admissions).
"""
from __future__ import annotations

from . import adpbalance
from .core import Wakeup


class Lockstep:
    """Steps `engines` (simulator.engine.loop.Engine, built with arrivals_due, or without it where nothing arrives
    at a step boundary: disagg's prefill instances, fed by the coordinator) in lock-step ticks; `balance`:
    (timeout_iters, batching_wait_iters) of TRT-LLM's attention-DP balance, or None (off)."""

    def __init__(self, env, engines: list, balance: tuple[int, int] | None = None):
        self.env, self.engines = env, list(engines)
        for e in self.engines:
            if e.group is not None:
                raise ValueError(f"engine {e.index} is already in a lock-step group")
            e.group = self
        self.balance = balance
        self._waiting = self._batching = 0  # the balance's counts (adpbalance.hold), the same on every rank
        self.idle = Wakeup(env)
        self.proc = env.process(self._loop())

    def wake(self) -> None:
        """A request was routed to a member: an idle group starts a tick now; a tick in progress
        runs to its end first (the member schedules at the next tick)."""
        self.idle.wake()

    def _loop(self):
        env, engines = self.env, self.engines
        while True:
            busy = [e for e in engines if len(e.batch) or e.waiting]
            if not busy:
                yield from self.idle.wait()
                if engines[0].wake_s:  # (the members' loop wakes once for all)
                    yield env.timeout(engines[0].wake_s)
                continue
            start = env.now
            plans = [(e, e.begin_step()) for e in busy] if self.balance is None else self._balanced(busy)
            # routed experts serving the whole EP group run at the group's mean load (idle members: 0)
            load = (sum(p.table.padded(p.agg.prefill_tokens, p.agg.decode_seqs) for _, p in plans) / len(engines)
                    if plans[0][1].table.dispatch else None)
            dur = max(e.runner.step_s(p.table, p.agg, rank_tokens=load) for e, p in plans)  # (each rank's host floor)
            yield env.timeout(dur)
            due = engines[0].arrivals_due() if engines[0].arrivals_due is not None else None
            if due is not None:  # arrivals at this very instant are seen by this boundary
                yield due
            for e, p in plans:
                e.end_step(p, steps=1, start_s=start, duration_s=dur, stretch=None)

    def _balanced(self, busy: list) -> list:
        """The members' plans for a tick under the attention-DP balance: each schedules, the group decides on
        every member's counts (an idle member counts its dummy generation request), each carries out."""
        decided = [(e, e.next_schedule()) for e in busy]
        ranks = [adpbalance.rank_counts(s, e.batch) for e, (s, _) in decided]
        ranks += [adpbalance.IDLE] * (len(self.engines) - len(busy))
        timeout, wait = self.balance
        got = adpbalance.hold(ranks, self.engines[0].limits.max_seqs, timeout, wait, self._waiting, self._batching)
        self._waiting, self._batching = got.waiting, got.batching
        if got.held:  # the prompts stay queued: every member runs what it runs
            decided = [(e, (e.without_admissions(), late) if s.admitted else (s, late)) for e, (s, late) in decided]
        return [(e, e.begin_step(d)) for e, d in decided]
