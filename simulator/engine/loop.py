"""Engine: one model instance as a simpy process. Each turn: schedule -> run -> sleep -> apply.

    schedule  simulator.engine.scheduler.schedule: pure, decides what the step runs
    run       the Runner (perfmodel StepTables) says how long it takes, in the policy's mode
    sleep     one timeout; a decode-only stretch that nothing can change is advanced in closed
              form (step time is affine in total context) and cut short by a request routed here
    apply     the running batch advances; first tokens, completions and freed KV are recorded

Policies act on an engine only through its public methods: submit, hold/release (park it after
the step in progress or once drained), cut_stretch (re-plan after the step in progress), withdraw
(take a request back), add_finish_hook, and the read-only facts (num_running, context_tokens, kv).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from perfmodel.batch import aggregates

from .batch import BLOCKS, COMPUTED, GENERATED, IDX, OUTPUT, PROMPT, RunningBatch
from .kv import KVBlocks
from .scheduler import Waiting, schedule
from .stretch import Stretch, sleep_stretch


class _Hold:
    """A policy's request to park the engine: after this step, or once its batch is drained."""

    __slots__ = ("event", "drain", "on_parked")

    def __init__(self, event, drain: bool, on_parked):
        self.event, self.drain, self.on_parked = event, drain, on_parked


class Engine:
    """A simulated serving instance (vLLM v1 scheduler on paged KV) over one instance layout."""

    def __init__(self, env, index: int, runner, limits, kv_capacity_tokens: int, recs, steps,
                 fast_forward: bool = True, arrivals_due=None):
        self.env, self.index, self.runner, self.limits = env, index, runner, limits
        self.recs, self.steps, self.fast_forward = recs, steps, fast_forward
        self.kv = KVBlocks(kv_capacity_tokens, limits.block_size)
        self.batch = RunningBatch()
        self.waiting: deque = deque()
        self.req = Waiting(recs.input_tokens, recs.output_tokens, recs.generated, recs.priority, recs.arrival_s)
        self.outstanding_tokens = 0  # prompt + output of unfinished requests routed here
        self.outstanding_requests = 0
        self.finish_hooks: list = []  # f(pos) after each completion (the cluster's, a policy's)
        self.step_hooks: list = []  # f(engine, schedule, steps, stretch or None) after each step (tests, tracing)
        # () -> an event to wait for before applying a step that ends now, while arrivals due now
        # are still being delivered (an arrival at a step's end is seen by that boundary)
        self.arrivals_due = arrivals_due
        self._held = None
        self._idle = None  # the event an idle engine waits on
        self._stretch = None  # the decode stretch in progress, while it may be cut short
        self.proc = env.process(self._loop())

    # ---- what policies and the cluster use ------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.kv.capacity_tokens

    @property
    def max_request_tokens(self) -> int:
        """Longest prompt + output this engine can serve: its KV capacity, and without chunked
        prefill the step budget too (vLLM then requires max_model_len <= max_num_batched_tokens)."""
        cap = self.kv.capacity_tokens
        return cap if self.limits.chunked_prefill else min(cap, self.limits.chunk_cap)

    @property
    def num_running(self) -> int:
        return len(self.batch)

    @property
    def context_tokens(self) -> int:
        """Keys cached over the running batch (what its next decode step reads, less one per seq)."""
        return self.batch.sum_computed

    @property
    def in_stretch(self) -> bool:
        """A closed-form decode stretch is in progress and may still be cut short."""
        return self._stretch is not None and self._stretch.live

    @property
    def is_held(self) -> bool:
        return self._held is not None

    def fits(self, pos: int) -> bool:
        """Whether the request's whole sequence fits this engine (KV capacity; budget if unchunked)."""
        return self.recs.total_tokens[pos] <= self.max_request_tokens

    def add_finish_hook(self, fn) -> None:
        self.finish_hooks.append(fn)

    def submit(self, pos: int, at_boundary: bool = True) -> None:
        """Queue a request routed here; wake the engine or cut its decode stretch short.
        `at_boundary`: whether a step ending at this very instant sees it: True for arrivals; False
        for a closed-loop issue triggered by a completion, which runs after every step end of this
        instant was processed, so step by step those steps never see it. The first issue time is
        kept when a policy moves a request between engines."""
        r = self.recs
        self.outstanding_tokens += r.total_tokens[pos]
        self.outstanding_requests += 1
        if r.issued_s[pos] != r.issued_s[pos]:  # NaN: first issue
            r.issued_s[pos] = self.env.now
        r.engine[pos] = self.index
        self.waiting.append(pos)
        self._wake_or_cut(at_boundary)

    def cut_stretch(self, at_boundary: bool = True) -> None:
        """End the decode stretch in progress after its current step (a policy's re-plan)."""
        if self.in_stretch:
            self.proc.interrupt(at_boundary)

    def hold(self, drain: bool = False, on_parked=None) -> None:
        """Park before the next step (after the step in progress, or once the running batch is
        drained: no admissions meanwhile) until `release`; `on_parked(engine)` when it parks."""
        self._held = _Hold(self.env.event(), drain, on_parked)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()  # idle: parks at once
        elif not drain:
            self.cut_stretch(True)

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.event.succeed()

    def withdraw(self, pos: int) -> None:
        """Take a running or waiting request back (a policy moves it elsewhere): a running one is
        preempted (recompute), its KV freed."""
        hit = np.flatnonzero(self.batch.idx == pos)
        if len(hit):
            i = int(hit[0])
            keep = np.ones(len(self.batch), dtype=bool)
            keep[i] = False
            self.recs.generated[pos] = int(self.batch.generated[i])
            self.recs.preemptions[pos] += 1
            self.batch.remove(keep)
            self.kv.used = self.batch.used_blocks()
        else:
            self.waiting.remove(pos)
        self.outstanding_tokens -= self.recs.total_tokens[pos]
        self.outstanding_requests -= 1

    def _wake_or_cut(self, at_boundary: bool) -> None:
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()
        elif self.in_stretch:
            self.proc.interrupt(at_boundary)

    # ---- the process ----------------------------------------------------------------------
    def _loop(self):
        env, steps, kv, lim = self.env, self.steps, self.kv, self.limits
        codes: dict = {}  # mode name -> its code in the step records
        while True:
            held = self._held
            if held is not None and not (held.drain and len(self.batch)):
                if held.on_parked is not None:
                    held.on_parked(self)
                yield held.event
                continue
            if not len(self.batch) and not self.waiting:
                self._idle = env.event()
                yield self._idle
                self._idle = None
                continue
            s = schedule(self.batch, self.waiting, kv.free, self.req, lim, admit=held is None)
            self._start(s)
            agg, all_decode = self._aggregates(s)
            mode, table = self.runner.mode_for(agg[0] + agg[4])
            k = self._stretch_steps(s, all_decode)
            start = env.now
            st = None
            if k > 1:
                c0, c1 = self.runner.decode_affine(mode, table, agg[4])
                self._stretch = st = Stretch(start, c0, c1, agg[5], agg[4], k)
                k, dur = yield from sleep_stretch(env, st, st.duration_s())
                self._stretch = None
            else:
                dur = table.time_s(*agg)
                yield env.timeout(dur)
            if self.arrivals_due is not None:
                due = self.arrivals_due()
                if due is not None:  # arrivals at this very instant are seen by this boundary
                    yield due
            code = codes.get(mode)
            if code is None:
                code = codes[mode] = steps.mode_code(mode)
            steps.append(start, dur, self.index, code, k, *agg, kv.used * kv.block_size, len(self.waiting), 0.0)
            self._apply(s, k, all_decode)
            for hook in self.step_hooks:
                hook(self, s, k, st)

    def _start(self, s) -> None:
        """Carry out the schedule's preemptions and admissions before the step runs."""
        r, batch = self.recs, self.batch
        for _ in range(s.preempt):  # recompute preemption from the tail; each re-queued first
            pos, gen, blocks = batch.pop_tail()
            self.kv.used -= blocks
            r.preemptions[pos] += 1
            r.generated[pos] = gen
            self.waiting.appendleft(pos)
        if s.admitted:
            now, waiting = self.env.now, self.waiting
            for c in s.admitted:
                pos = c[0]
                if waiting[0] == pos:
                    waiting.popleft()
                else:
                    waiting.remove(pos)
                if r.scheduled_s[pos] != r.scheduled_s[pos]:  # NaN: the first time it runs
                    r.scheduled_s[pos] = now
            batch.append(list(s.admitted))
        if len(s.granted) == 0 or (not s.decode_running and int(s.granted.sum()) == 0):
            raise RuntimeError(f"engine {self.index}: nothing schedulable with {len(self.waiting)} "
                               f"waiting, batch={batch}")  # impossible for requests that fit

    def _aggregates(self, s) -> tuple[tuple, bool]:
        """The step's cost aggregates (perfmodel.batch.aggregates order) and whether it is an
        all-decode step (every request past its first token, one token each)."""
        if s.decode_running:  # decoders first (one token, context = computed), admitted prefill from 0
            adm = s.admitted_tokens
            dn = len(s.granted) - len(adm)
            dkv = float(self.batch.sum_computed + dn) if dn else 0.0  # admitted hold no KV yet
            pt = sum(adm)
            return (pt, len(adm), float(sum(g * (g + 1) // 2 for g in adm)), float(pt), dn, dkv), not adm
        # a 1-token last prefill chunk costs as a decode (perfmodel.batch) but is not one here: it
        # may sample the first token or (output 0) none
        g, n = s.granted, len(s.granted)
        all_decode = bool(n and not s.admitted and int(g.max()) == 1 and int(g.min()) == 1
                          and int(self.batch.generated.min()) > 0)
        return aggregates(g, self.batch.computed), all_decode

    def _stretch_steps(self, s, all_decode: bool) -> int:
        """Decode steps that can run in closed form from here (1: a single step). Only when this
        step decodes every running request and neither admitted nor preempted anything: then the
        next steps have the same budget, fewer free blocks and the same running set, so nothing can
        change before the first completion or the KV bound (each sequence takes at most
        ceil(k / block_size) new blocks in k steps)."""
        if not all_decode or not self.fast_forward or s.preempt:
            return 1
        k_done = self.batch.first_completion()
        k_kv = (self.kv.free // len(self.batch)) * self.kv.block_size
        return max(1, min(k_done, k_kv))

    def _apply(self, s, k: int, all_decode: bool) -> None:
        """State after the step (k = 1) or the k-step decode stretch that just ended."""
        batch, now, r = self.batch, self.env.now, self.recs
        bs = self.kv.block_size
        if all_decode:  # every request computed and sampled k tokens; none is new
            done = batch.decode(k, bs)
            self.kv.used = batch.used_blocks()
            if done is None:
                return
        elif s.decode_running:  # decoders (first dn) decoded one token; admitted requests ran a chunk
            a, adm = batch.a, s.admitted_tokens
            dn = len(batch) - len(adm)
            a[COMPUTED:GENERATED + 1, :dn] += 1
            batch.sum_computed += dn + sum(adm)
            done = a[GENERATED] >= a[OUTPUT] if dn else np.zeros(len(batch), dtype=bool)
            for j, (g, (pos, prompt, out, _, gen, _)) in enumerate(zip(adm, s.admitted)):
                a[COMPUTED, dn + j] = g
                if g == prompt + gen:  # its prompt (and recompute) is done: it samples, unless output 0
                    if out > 0:
                        a[GENERATED, dn + j] = gen + 1
                        if gen == 0:
                            r.first_token_s[pos] = now
                    done[dn + j] = gen + (out > 0) >= out
                else:
                    done[dn + j] = False
            np.floor_divide(a[COMPUTED] + (bs - 1), bs, out=a[BLOCKS])
            self.kv.used = batch.used_blocks()
            batch.steps_to_done = None
        else:
            batch.grow(s.granted, bs)
            self.kv.used = batch.used_blocks()
            a = batch.a
            full = (s.granted > 0) & (a[COMPUTED] == a[PROMPT] + a[GENERATED])  # prompt (+ recompute) done
            samples = full & (a[OUTPUT] > 0)
            first = samples & (a[GENERATED] == 0)
            if first.any():
                r.first_token_s[a[IDX][first]] = now
            a[GENERATED] += samples
            done = full & (a[GENERATED] >= a[OUTPUT])
        at = done.nonzero()[0]
        finished = self._complete(at, done) if len(at) else ()
        if not all_decode:  # (after an all-decode step the rest still decode)
            batch = self.batch
            batch.decoding = s.admitted_whole if s.decode_running else \
                bool((batch.generated > 0).all() and (batch.wants() == 1).all())
        for p in finished:
            for hook in self.finish_hooks:
                hook(p)

    def _complete(self, at: np.ndarray, done: np.ndarray) -> list:
        """Record the requests at columns `at` as finished now and free their KV; their positions."""
        a, r, now = self.batch.a, self.recs, self.env.now
        pos = a[IDX, at].tolist()
        r.finish_s[pos] = now
        r.generated[pos] = a[GENERATED, at]
        self.outstanding_tokens -= sum([r.total_tokens[p] for p in pos])
        self.outstanding_requests -= len(pos)
        self.batch.remove(~done)
        self.kv.used = self.batch.used_blocks()
        return pos
