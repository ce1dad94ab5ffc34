"""Engine: one model instance as a simpy process (request state, KV blocks, scheduler, runner).

Each loop: schedule -> ask the runner for the step time -> sleep -> apply. A decode-only stretch
that no arrival, completion, preemption or mode change can interrupt is advanced in closed form
(step time is affine in total context); an arrival routed here mid-stretch interrupts the
process, which then finishes the step in progress and re-plans, exactly as step-by-step would.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import simpy

from perfmodel.steptable import decode_stretch_s, steps_within

from .scheduler import Batch, blocks_for, grant_in_order, step_aggregates


class Engine:
    """A simulated serving instance. `on_finish(pos)` is called when a request completes."""

    def __init__(self, env, index, runner, cfg, budget, max_seqs, kv_capacity_tokens, recs, steps, on_finish):
        self.env, self.index, self.runner, self.cfg = env, index, runner, cfg
        self.budget, self.max_seqs = int(budget), int(max_seqs)
        self.bs = cfg.block_size
        self.num_blocks = int(kv_capacity_tokens // self.bs)
        self.capacity_tokens = self.num_blocks * self.bs
        self.recs, self.steps, self.on_finish = recs, steps, on_finish
        self.run = Batch.empty()
        self.waiting: deque = deque()
        self.used_blocks = 0
        self.outstanding_tokens = 0  # prompt + output of unfinished requests routed here
        self.outstanding_requests = 0
        self._wakeup = None
        self._stretch = None  # (start_s, c0, c1, k0, n, steps) while a stretch may be cut short
        self._preempted = self._admitted = False
        self.proc = env.process(self._loop())

    # ---- arrivals -------------------------------------------------------------------------
    def submit(self, pos: int) -> None:
        """Queue a request routed here; wake the engine or cut its decode stretch short."""
        r = self.recs
        self.outstanding_tokens += int(r.input_tokens[pos] + r.output_tokens[pos])
        self.outstanding_requests += 1
        r.issued_s[pos] = self.env.now
        r.engine[pos] = self.index
        self.waiting.append(pos)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        elif self._stretch is not None:
            self.proc.interrupt()

    def fits(self, pos: int) -> bool:
        """Whether the request's whole sequence fits this engine's KV capacity."""
        return int(self.recs.input_tokens[pos] + self.recs.output_tokens[pos]) <= self.capacity_tokens

    # ---- scheduling -----------------------------------------------------------------------
    def _preempt_last(self) -> None:
        """Recompute preemption of the last running request: free its KV, queue it first."""
        pos = int(self.run.idx[-1])
        self.used_blocks -= int(self.run.blocks[-1])
        self.recs.preemptions[pos] += 1
        self.recs.generated[pos] = int(self.run.generated[-1])
        self.run = self.run.keep(slice(0, -1))
        self.waiting.appendleft(pos)

    def _schedule(self):
        """(granted tokens per running request incl. admitted ones, number admitted)."""
        preempted = self._preempted = False
        while True:
            wants = self.run.wants()
            granted = wants if int(wants.sum()) <= self.budget else grant_in_order(wants, self.budget)
            need = blocks_for(self.run.computed + granted, self.bs) - self.run.blocks  # >= 0
            if int(need.sum()) <= self.num_blocks - self.used_blocks or len(self.run) == 0:
                break
            self._preempt_last()
            preempted = self._preempted = True
        left = self.budget - int(granted.sum())
        free = self.num_blocks - self.used_blocks - int(need.sum())
        adm_pos, adm_tok = [], []
        r = self.recs
        while self.waiting and left > 0 and not preempted and len(self.run) + len(adm_pos) < self.max_seqs:
            pos = self._peek_waiting()
            target = int(r.input_tokens[pos] + r.generated[pos])
            n_new = min(target, left) if self.cfg.enable_chunked_prefill else target
            if n_new > left or -(-n_new // self.bs) > free:
                break
            self._pop_waiting(pos)
            adm_pos.append(pos)
            adm_tok.append(n_new)
            left -= n_new
            free -= -(-n_new // self.bs)
        self._admitted = bool(adm_pos)
        if adm_pos:
            p = np.asarray(adm_pos, dtype=np.int64)
            self.run = self.run.extend(p, r.input_tokens[p], r.output_tokens[p], np.zeros(len(p)),
                                       r.generated[p], np.zeros(len(p)))
            granted = np.concatenate([granted, np.asarray(adm_tok, dtype=np.int64)])
            new = p[np.isnan(r.scheduled_s[p])]
            r.scheduled_s[new] = self.env.now
        return granted

    def _peek_waiting(self) -> int:
        if not self.cfg.priority_scheduling:
            return self.waiting[0]
        return min(self.waiting, key=lambda p: (self.recs.priority[p], self.recs.arrival_s[p], p))

    def _pop_waiting(self, pos: int) -> None:
        if self.waiting[0] == pos:
            self.waiting.popleft()
        else:
            self.waiting.remove(pos)

    def _stretch_steps(self, granted, agg) -> int:
        """Decode steps that can run in closed form from here (1: take a single step). Only when
        this step decodes every running request and neither admitted nor preempted anything:
        then the next steps have the same budget, fewer free blocks and the same running set, so
        nothing can change before the first completion or the KV bound (each sequence takes at
        most ceil(k / block_size) new blocks in k steps)."""
        if not self.cfg.fast_forward or agg[0] or self._preempted or agg[4] != len(self.run):
            return 1
        n = len(self.run)
        k_done = int((self.run.output - self.run.generated).min())
        k_kv = ((self.num_blocks - self.used_blocks) // n) * self.bs
        return max(1, min(k_done, k_kv))

    # ---- the process ----------------------------------------------------------------------
    def _loop(self):
        env = self.env
        while True:
            if len(self.run) == 0 and not self.waiting:
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            granted = self._schedule()
            if int(granted.sum()) == 0:  # cannot happen for requests that fit (checked at routing)
                raise RuntimeError(f"engine {self.index}: nothing schedulable with {len(self.waiting)} waiting, run={self.run}")
            n = len(granted)
            if n and not self._admitted and int(self.run.computed.min()) > 0 and int(granted.max()) == 1 \
                    and int(granted.min()) == 1:  # all decoding: the common case, computed cheaply
                agg = (0, 0, 0.0, 0.0, n, float(self.run.computed.sum() + n))
            else:
                agg = step_aggregates(self.run.computed, granted)
            mode, table = self.runner.mode_for(agg[0] + agg[4])
            k = self._stretch_steps(granted, agg)
            start = env.now
            if k > 1:
                n, k0 = agg[4], agg[5]
                c0, c1 = table.decode_affine(n)
                dur = decode_stretch_s(c0, c1, k0, n, k)
                self._stretch = (start, c0, c1, k0, n, k)
                k, dur = yield from self._sleep_stretch(dur)
            else:
                dur = table.time_s(*agg)
                yield env.timeout(dur)
            self.steps.append(start, dur, self.index, self.steps.mode_code(mode), k, *agg,
                              self.used_blocks * self.bs, len(self.waiting), 0.0)
            self._apply(granted, k, agg[4] == n)

    def _sleep_stretch(self, dur):
        """Sleep through a stretch; on an interrupt, end it after the step in progress."""
        start, c0, c1, k0, n, k = self._stretch
        end = start + dur
        while True:
            try:
                yield self.env.timeout(end - self.env.now)
                break
            except simpy.Interrupt:
                if self._stretch is None:
                    continue
                elapsed = self.env.now - start
                done = steps_within(c0, c1, k0, n, elapsed)
                on_boundary = done >= 1 and decode_stretch_s(c0, c1, k0, n, done) == elapsed
                k = min(k, done if on_boundary else done + 1)
                end = start + decode_stretch_s(c0, c1, k0, n, k)
                self._stretch = None  # later arrivals just queue
        self._stretch = None
        return k, end - start

    def _apply(self, granted, k: int, all_decode: bool) -> None:
        """State after the step (k = 1) or the k-step decode stretch that just ended."""
        run, now, r = self.run, self.env.now, self.recs
        run.computed = run.computed + granted * k  # k > 1: a stretch, every request decoding
        new_blocks = blocks_for(run.computed, self.bs)
        self.used_blocks += int((new_blocks - run.blocks).sum())
        run.blocks = new_blocks
        if all_decode:  # every request sampled k tokens; none is new
            run.generated = run.generated + k
            done = run.generated >= run.output
        else:
            full = (granted > 0) & (run.computed == run.prompt + run.generated)
            samples = full & (run.output > 0)
            first = samples & (run.generated == 0)
            if first.any():
                r.first_token_s[run.idx[first]] = now
            run.generated = run.generated + samples
            done = full & (run.generated >= run.output)
        if done.any():
            pos = run.idx[done]
            r.finish_s[pos] = now
            r.generated[pos] = run.generated[done]
            self.used_blocks -= int(run.blocks[done].sum())
            self.outstanding_tokens -= int((r.input_tokens[pos] + r.output_tokens[pos]).sum())
            self.outstanding_requests -= len(pos)
            self.run = run.keep(~done)
            for p in pos.tolist():
                self.on_finish(p)
