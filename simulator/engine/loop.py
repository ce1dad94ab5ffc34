"""Engine: one model instance as a simpy process. Each turn: schedule -> run -> apply.

    schedule  begin_step: simulator.engine.scheduler.schedule (pure) decides what the step runs; it is
              carried out on the batch (engine/step.py) and the policy's mode picked for its tokens
    run       the Runner (perfmodel StepTables) says how long it takes; the engine sleeps that long, or
              through a decode-only stretch that nothing can change in closed form (step time is affine
              in total context), cut short by a request routed here (engine/core.py: EngineCore.sleep*)
    apply     end_step: the running batch advances; the step row, first tokens, completions and freed KV
              are recorded

Idle wait, sleep, step record, completion and the outstanding counts are the engine core's (core.py),
shared with the disaggregated decode engine and Seesaw's phased engine. Policies act on an engine only
through its public methods: submit, hold/release (park it after the step in progress or once drained),
cut (re-plan after the step in progress), withdraw (take a request back), add_finish_hook, report_queue,
and the read-only facts (num_running, context_tokens, kv; free_blocks_now: the free KV as step by step has it,
mid-stretch too). begin_step/end_step (one step's schedule and apply) are for a Lockstep group (lockstep.py) too.
"""
from __future__ import annotations

from typing import Any, Final

import numpy as np

from . import batchwait, headroom, step
from .batch import RunningBatch
from .core import EngineCore
from .kv import KVBlocks
from .prefix import PrefixCache
from .runner import Runner
from .scheduler import Schedule, Waiting, schedule
from .stretch import Stretch, steps_until

_NEW: Final = tuple.__new__  # (a NamedTuple built without its __new__ call: scheduler.Schedule's note)


class _Hold:
    """A policy's request to park the engine: after this step, or once its batch is drained."""

    __slots__ = ("event", "drain", "on_parked")

    def __init__(self, event, drain: bool, on_parked):
        self.event, self.drain, self.on_parked = event, drain, on_parked


class Engine(EngineCore):
    """A simulated serving instance (vLLM v1 scheduler on paged KV) over one instance layout.
    `prefill_only`: a disaggregated prefill instance (policies/disagg): a request's output here is its
    first token (sampled by the prefill), its end here the prefill's (records' prefill_end_s, on
    prefill_engine); a request of at most one output token ends here."""

    def __init__(self, *, env, index: int, runner, limits, kv_capacity_tokens: int, recs, steps,
                 fast_forward: bool = True, arrivals_due=None, prefix_caching: bool = False, ratio=None,
                 wake_s: float = 0.0, schedule_ahead: bool = False, prefill_only: bool = False,
                 kv_per_gpu_divisor: int = 1):
        out = np.minimum(recs.output_tokens, 1) if prefill_only else recs.output_tokens
        super().__init__(env=env, index=index, recs=recs, steps=steps, fast_forward=fast_forward,
                         total_tokens=(recs.input_tokens + out).tolist() if prefill_only else None,
                         finish_s=recs.prefill_end_s if prefill_only else None,
                         engine_of=recs.prefill_engine if prefill_only else None,
                         kv_per_gpu_divisor=kv_per_gpu_divisor)
        self.runner: Runner = runner  # (typed: the compiled loop calls its methods directly)
        self.limits, self.prefill_only = limits, prefill_only
        self.kv = KVBlocks(kv_capacity_tokens, limits.block_size)
        self.batch = RunningBatch(limits.block_size, limits.clip_output_tokens if limits.reserve == "sglang" else None)
        # automatic prefix caching (vLLM v1), for requests that carry trace block hashes
        self.cache = PrefixCache(limits.block_size, recs.prefix_blocks, recs.input_tokens) \
            if prefix_caching and recs.prefix_blocks is not None else None
        self.req = Waiting(recs.input_tokens, out, recs.generated, recs.priority, recs.arrival_s)
        self.step_hooks: list = []  # f(engine, schedule, steps, stretch or None) after each step (tests, tracing)
        # () -> an event to wait for before applying a step that ends now, while arrivals due now
        # are still being delivered (an arrival at a step's end is seen by that boundary)
        self.arrivals_due = arrivals_due
        self._held: Any = None
        self.ratio = ratio  # SGLang's NewTokenRatio (scheduler "sglang"), else None
        self.wake_s = wake_s  # an idle engine's first step starts this long after the request (HardwareSpec.host_wake_s)
        self.group: Any = None  # a Lockstep group stepping this engine (lockstep.py), else its own process
        # the framework schedules step n+1 while step n runs (perfmodel Framework.schedule_ahead): a request
        # queued while a step runs waits for the step after next. _queued_s: when each waiting request was
        # queued here; _step_start: when the step last scheduled began (None: idle or parked since)
        self.schedule_ahead, self.held_back = schedule_ahead, 0
        self._step_start: float | None = None
        self._queued_s: dict = {}
        self._queue_blocked = False  # the stretch in progress began with its queue's head refused (_blocks_tail)
        # TRT-LLM's batch waiting (Limits.batch_wait_*, engine/batchwait.py): iterations the scheduled prompts were held
        # so far, and whether this step holds them; a wait needs both bounds > 0, as in TRT-LLM
        self._batch_wait = limits.batch_wait_iters > 0 and limits.batch_wait_tokens > 0
        self._wait_iters, self._withheld = 0, False
        self.proc = env.process(self._loop())

    # ---- what policies and the cluster use ------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.kv.capacity_tokens

    @property
    def max_request_tokens(self) -> int:
        """Longest prompt + output this engine can serve: its KV capacity, and without chunked
        prefill under vLLM's rule the step budget too (max_model_len <= max_num_batched_tokens; TRT-LLM
        bounds only the context by it: `holds`)."""
        cap, lim = self.kv.capacity_tokens, self.limits
        return cap if lim.chunked_prefill or lim.reserve == "request" else min(cap, lim.chunk_cap)

    @property
    def num_running(self) -> int:
        return len(self.batch)

    @property
    def context_tokens(self) -> int:
        """Keys cached over the running batch (what its next decode step reads, less one per seq)."""
        return self.batch.sum_computed

    @property
    def is_held(self) -> bool:
        return self._held is not None

    def free_blocks_now(self, at_boundary: bool = True) -> int:
        """Free KV blocks as the step-by-step run has them at this instant. `kv.free` takes a decode stretch's new
        blocks only when the stretch is applied; mid-stretch, those of the steps it has completed are taken too: the
        steps before the one in progress, and one ending right now only for a reader that comes after that step's
        end (not `at_boundary`: stretch.steps_until's rule). What a policy deciding by free KV reads (Flying's hard
        switch; 2026-12-03 it read kv.free, and under KV pressure the fast path chose otherwise than step by step)."""
        st, free = self._stretch, self.kv.free  # (the stretch slept through, until end_step applies it)
        if st is None:
            return free
        done = min(steps_until(self.env.now, st.start_s, st.c0, st.c1, st.k0, st.n, at_boundary)[0] - 1, st.ran)
        return free - self.batch.opened_blocks(done) if done > 0 else free

    def fits(self, pos: int) -> bool:
        """Whether the request's whole sequence fits this engine (KV capacity; budget if unchunked)."""
        return self.holds(self.recs.input_tokens[pos], self.total_tokens[pos], self.kv.capacity_tokens)

    def holds(self, prompt, total, kv_tokens) -> bool:
        """Whether a request of `prompt` tokens, `total` with its output, can run here with `kv_tokens` of
        KV. Unchunked, vLLM needs the whole sequence in one step's budget (max_model_len <= max_num_batched_
        tokens); TRT-LLM (reserve "request") only the context (max_num_tokens bounds a context iteration)."""
        lim = self.limits  # (bool(): numpy ints from the records compare to numpy bools; compiled, a bool is a bool)
        if lim.chunked_prefill:
            return bool(total <= kv_tokens)
        if lim.reserve == "request":
            return bool(total <= kv_tokens and prompt <= lim.chunk_cap)
        return bool(total <= min(kv_tokens, lim.chunk_cap))  # (max_request_tokens with these KV tokens)

    def submit(self, pos: int, at_boundary: bool = True) -> None:
        """Queue a request routed here; wake the engine or cut its decode stretch short.
        `at_boundary`: whether a step ending at this very instant sees it: True for arrivals; False
        for a closed-loop issue triggered by a completion, which runs after every step end of this
        instant was processed, so step by step those steps never see it."""
        self.accept(pos)
        self.waiting.append(pos)
        if self.schedule_ahead:
            self._queued_s[pos] = self.env.now
        if not (self._queue_blocked and self.in_stretch):  # (else it cannot run before the stretch ends)
            self._wake_or_cut(at_boundary)

    def hold(self, drain: bool = False, on_parked=None) -> None:
        """Park before the next step (after the step in progress, or once the running batch is
        drained: no admissions meanwhile) until `release`; `on_parked(engine)` when it parks."""
        self._held = _Hold(self.env.event(), drain, on_parked)
        if not drain:
            self._wake_or_cut(True)  # idle: parks at once; decoding: after the step in progress
        else:
            self.idle.wake()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.event.succeed()

    def withdraw(self, pos: int) -> None:
        """Take a running or waiting request back (a policy moves it elsewhere): a running one is
        preempted (recompute), its KV freed."""
        if pos in self.batch.idx:
            left = self.batch.remove([self.batch.index(pos)])[0]
            self.recs.generated[pos] = left.generated
            self.recs.preemptions[pos] += 1
            if self.cache is not None:
                self.cache.release(pos)
            self._sync_kv()
        else:
            self.waiting.remove(pos)
            self._queued_s.pop(pos, None)
        self.leave(pos)

    def _wake_or_cut(self, at_boundary: bool) -> None:
        if self.group is not None:
            self.group.wake()
        elif not self.idle.wake():
            self.cut(at_boundary)

    # ---- the process ----------------------------------------------------------------------
    def _loop(self):
        env, batch = self.env, self.batch
        while self.group is None:  # (a Lockstep group's engine is stepped by the group: lockstep.py)
            if self._held is not None and self._park_now():  # a policy lent this engine's GPUs
                yield self._held.event
                self._step_start = None
            elif not batch.idx and not self.waiting:
                self._step_start = None
                yield from self.idle.wait()
                if self.wake_s:
                    yield env.timeout(self.wake_s)
            else:
                # (the clock read once at each end of a turn and handed down: simpy's `now` is a Python property,
                # ~600 instructions a read, ~4 reads a request fewer)
                start = env.now
                plan = self.begin_step(None, start)  # schedule
                st = self._stretch_for(plan, start)  # run: k decode steps in closed form, or one step
                if st is not None:  # (EngineCore.sleep_stretch written out: no generator object and no
                    # resume through it per stretch, ~2.5% of a replay's instructions at half load)
                    self._queue_blocked = self._blocks_tail()
                    self._stretch = st
                    yield env.timeout(st.duration_s())  # (cut_stretch may move this wait onto an earlier timeout)
                    more = st.wait_s(env.now)
                    while more > 0.0:
                        yield env.timeout(more)
                        more = st.wait_s(env.now)
                    st.live = False
                    k = st.ran
                else:
                    k, dur = 1, self.runner.step_s(plan.table, plan.agg) if self.runner.floored else \
                        plan.table.step_s(plan.agg)
                    yield env.timeout(dur)
                due = self.arrivals_due() if self.arrivals_due is not None else None
                if due is not None:  # arrivals at this very instant are seen by this boundary
                    yield due
                end = env.now
                if st is not None:
                    dur = end - st.start_s
                self.end_step(plan, k, start, dur, st, end)  # apply (steps, start_s, duration_s, stretch, now)

    def _stretch_for(self, plan: step.StepPlan, now: float) -> Stretch | None:
        """The decode stretch the step can start (an all-decode step that neither admitted nor preempted:
        nothing changes before the first completion or the KV bound; the step object may hold its line for
        fewer steps: SiDP's pending switch, a kink), or None: one step."""
        agg, batch, kv = plan.agg, self.batch, self.kv
        if not (plan.all_decode and self.fast_forward and not plan.schedule.preempt and not self.held_back):
            return None
        k = step.stretch_steps(batch, kv.free, kv.block_size)
        if self._withheld:  # the held prompts run at the step whose count reaches the timeout (batchwait.hold)
            k = min(k, self.limits.batch_wait_iters - self._wait_iters + 1)
        if self.ratio is not None and self.waiting and self._held is None and k > 1:  # SGLang: the queue's room
            if self.cache is not None:  # grows as the batch decodes (headroom.py); a prefix cache's evictions, step
                return None  # by step, move its hits too: one step at a time
            k = headroom.first_admission(batch, self.waiting, self.req, self.limits, kv.free, self.ratio, k)
        if k <= 1:
            return None
        line = self.runner.decode_line(plan.mode, plan.table, agg.decode_seqs, agg.decode_kv_tokens, k)
        if line.steps <= 1:
            return None
        return Stretch(now, line.c0_s, line.c1_s_per_key, agg.decode_kv_tokens, agg.decode_seqs, line.steps)

    def _blocks_tail(self) -> bool:
        """Whether a decode stretch starting now cannot admit a request that joins the queue's tail before it
        ends, so such a request need not cut it (issue 36: under overload every arrival cut every stretch).
        True when requests wait that this step's scheduler refused (it may admit: no hold) and nothing in the
        stretch can change that: FCFS order (the head stays first), a rule whose room never grows while
        decoding (vLLM's "chunk" and "prompt": fewer free blocks each step; TRT-LLM's "request": free less
        reserved stays put; not SGLang's decaying ratio), the same running set (same budget and seats) and no
        prefix cache (its hits move with evictions). Step by step, the same steps refuse the same head."""
        lim = self.limits
        return bool(self.waiting) and self._held is None and self.cache is None and not lim.priority \
            and lim.reserve != "sglang" and not self._withheld  # (an arrival may release held prompts)

    def next_schedule(self) -> tuple:
        """schedule (pure): what the next step runs, and the requests schedule-ahead hides from it (taken off the
        queue's tail until begin_step carries the schedule out)."""
        ratio = self.ratio
        late = self._hold_back() if self.schedule_ahead else ()
        # (admit, cache and ratio by position: a keyword call binds more slowly, every step)
        s = schedule(self.batch, self.waiting, self.kv.free, self.req, self.limits, self._held is None, self.cache,
                     ratio.value if ratio is not None else 0.0)
        if self._batch_wait:  # TRT-LLM's batch waiting (off: _withheld stays False, one line a step)
            s = self._wait_for_batch(s, self.batch, ratio)
        return s, late

    def without_admissions(self):
        """The schedule of the next step with the waiting requests held (what runs, runs: batch waiting, a
        lock-step group's attention-DP balance)."""
        ratio = self.ratio
        return schedule(self.batch, self.waiting, self.kv.free, self.req, self.limits, admit=False, cache=self.cache,
                        ratio=ratio.value if ratio is not None else 0.0)

    def begin_step(self, decided: tuple | None = None, now: float = -1.0) -> step.StepPlan:
        """schedule: what the next step runs (next_schedule's, or `decided`: one it returned that a lock-step
        group may have changed), carried out on the batch; with its aggregates, mode and step table."""
        batch, ratio, ahead = self.batch, self.ratio, self.schedule_ahead
        if now < 0.0:  # (the caller's clock, or simpy's: a lock-step group's steps read it here)
            now = self.env.now
        s: Schedule
        s, late = self.next_schedule() if decided is None else decided
        if s.preempt or s.admitted:
            step.begin(batch, self.waiting, self.recs, s, now, self.cache)
            self._sync_kv()
            if s.preempt and ratio is not None:
                ratio.retracted(batch, s.preempt)
        if ahead:
            self.waiting.extend(late)
            self.held_back = len(late)
            for adm in s.admitted:
                self._queued_s.pop(adm.pos, None)
            self._step_start = now
        if not s.granted or (not s.decode_running and not any(s.granted)):  # (grants are >= 0: any, not sum)
            raise RuntimeError(f"engine {self.index}: nothing schedulable with {len(self.waiting)} "
                               f"waiting, batch={batch}")  # impossible for requests that fit
        agg = step.aggregates(batch, s)
        runner = self.runner
        mode = runner.only or runner.choose(agg.prefill_tokens + agg.decode_seqs)  # the policy's mode for the step's tokens
        # (a NamedTuple without its generated __new__ call: scheduler.Schedule's note)
        return _NEW(step.StepPlan, (s, agg, step.all_decode(batch, s, agg), mode, runner.tables[mode]))

    def _wait_for_batch(self, s, batch, ratio):
        """The schedule the step runs under TRT-LLM's batch waiting (engine/batchwait.py): `s`, or without its
        admissions while they are held. None under attention DP (a lock-step group's engine), as in TRT-LLM."""
        self._withheld = False
        if s.admitted and self.group is None:
            self._withheld, self._wait_iters = batchwait.hold(s, batch, self.limits, self._wait_iters)
            if self._withheld:  # the step runs what runs, the prompts stay queued
                s = self.without_admissions()
        return s

    def _hold_back(self) -> list:
        """Schedule-ahead: the requests this step cannot see, taken off the queue's tail for it. The real
        engine scheduled this step when the previous one began, so a request queued since then (at
        that instant too: a closed-loop replacement) waits for the next. Nothing while the engine was idle
        (its first step is scheduled at once) or when nothing runs (no step was in flight)."""
        cut, w, queued = self._step_start, self.waiting, self._queued_s
        if cut is None or not len(self.batch):
            return []
        late = []
        while w and queued.get(w[-1], -1.0) >= cut:  # (re-queued preempted requests are not in `queued`)
            late.append(w.pop())
        late.reverse()
        return late

    def end_step(self, plan: step.StepPlan, steps: int, start_s: float, duration_s: float, stretch,
                 now: float = -1.0) -> None:
        """apply: record the step(s) that ran from `start_s` for `duration_s` (`steps` of them: a decode
        stretch, `stretch` while it was live), advance the batch, report completions."""
        batch, kv, ratio = self.batch, self.kv, self.ratio
        s, all_decode, k = plan.schedule, plan.all_decode, steps
        self._stretch = None  # (applied now: free_blocks_now reads kv.free alone)
        if stretch is not None and k > 1 and self.schedule_ahead:  # the step last scheduled is the stretch's last,
            # begun at its k-1th boundary: a request queued before it is seen by the next step (_hold_back; until
            # 2026-12-03 the stretch's start was taken, hiding every request queued during a stretch that the
            # queue's refused head kept uncut: TRT-LLM under KV pressure admitted one prompt where step by step two)
            self._step_start = stretch.start_s + stretch.duration_s(k - 1)
        if self._withheld:  # each step of a stretch that held the prompts counts (begin_step counted the first)
            self._wait_iters += k - 1
        self.record_step(start_s, duration_s, plan.mode, k, plan.agg, kv.used * kv.block_size)
        if ratio is not None and (s.decode_running or all_decode):
            ratio.decoded(k)
        if now < 0.0:
            now = self.env.now
        done = step.advance(batch, self.recs, s, k, all_decode, now, self.cache)
        self._sync_kv()
        finished = self._complete(done, now) if done else ()
        if not all_decode:
            batch.decoding = step.still_decoding(batch, s)
        if finished:
            self.report(finished)
        for hook in self.step_hooks:
            hook(self, s, k, stretch)

    def _park_now(self) -> bool:
        """Whether the hold applies now (a draining hold waits for the batch to finish)."""
        held = self._held
        if held.drain and len(self.batch):
            return False
        if held.on_parked is not None:
            held.on_parked(self)
        return True

    def _complete(self, at: list, now: float = -1.0) -> list:
        """Record the requests at batch positions `at` as finished now and free their KV; their
        positions in the workload."""
        pos, cache = [], self.cache
        for left in self.batch.remove(at):
            if cache is not None:
                cache.release(left.pos)
            self.complete(left.pos, left.generated, now)  # (compiled: a native call; a bound method was a Python call)
            pos.append(left.pos)
        self._sync_kv()
        return pos

    def _sync_kv(self) -> None:
        """KV in use = the batch's private blocks + the cache's referenced entries; unreferenced
        cache entries are free and evicted (oldest first) once the free blocks cannot hold them."""
        kv, cache = self.kv, self.cache
        if cache is None:
            kv.used = self.batch.used_blocks
            return
        kv.used = self.batch.used_blocks + cache.referenced_blocks
        cache.evict(kv.free)
