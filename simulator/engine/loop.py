"""Engine: one model instance as a simpy process (request state, KV blocks, scheduler, runner).

Each loop: schedule -> ask the runner for the step time -> sleep -> apply. A decode-only stretch
that no arrival, completion, preemption or mode change can interrupt is advanced in closed form
(step time is affine in total context); an arrival routed here mid-stretch interrupts the
process, which then finishes the step in progress and re-plans, exactly as step-by-step would.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from perfmodel.batch import aggregates
from perfmodel.steptable import StepTable, decode_stretch_s

from simulator.engine.scheduler import Batch, blocks_for, grant_in_order
from simulator.engine.stretch import sleep_stretch


class Engine:
    """A simulated serving instance. `on_finish(pos)` is called when a request completes."""

    def __init__(self, env, index, runner, cfg, budget, max_seqs, kv_capacity_tokens, recs, steps, on_finish):
        self.env, self.index, self.runner, self.cfg = env, index, runner, cfg
        self.budget, self.max_seqs = int(budget), int(max_seqs)
        # tokens one request may get in a step: the per-batch budget. A PP engine's step holds pp
        # batches (budget = pp x chunk_cap, set by the cluster); one request is in one batch.
        self.chunk_cap = self.budget
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
        self._preempted = self._admitted = self._all_decode = False
        self._decoding = True  # every running request is past its prefill (kept by _apply/_schedule)
        self._fast = False  # this step's running part took _schedule's all-decoding fast path
        self._adm_tok: list = []  # tokens granted to the requests admitted this step
        self._adm_whole = True  # each of them got its whole prompt (+ tokens to recompute)
        self._ones = np.ones(0, dtype=np.int64)  # granted tokens of an all-decoding batch
        # kept up to date step by step for the batch object `_known` (any other, e.g. one a policy
        # swapped in, is recomputed): sum of computed tokens, all-decode steps to the first completion
        self._known, self._sum_computed, self._k_done = None, 0, None
        self._adm_cols: list = []  # (idx, prompt, output, computed, generated, blocks) of those admitted
        self._affine: dict = {}  # (id(StepTable), n) -> decode_affine(n)
        self.proc = env.process(self._loop())

    # ---- arrivals -------------------------------------------------------------------------
    def submit(self, pos: int, at_boundary: bool = True) -> None:
        """Queue a request routed here; wake the engine or cut its decode stretch short.
        `at_boundary`: whether a step ending at this very instant sees it. True for arrivals
        (URGENT events); False for a closed-loop issue triggered by a completion, which runs after
        every step end of this instant was scheduled, so step-by-step those steps never see it."""
        r = self.recs
        self.outstanding_tokens += r.total_tokens[pos]
        self.outstanding_requests += 1
        r.issued_s[pos] = self.env.now
        r.engine[pos] = self.index
        self.waiting.append(pos)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        elif self._stretch is not None:
            self.proc.interrupt(at_boundary)

    @property
    def max_request_tokens(self) -> int:
        """Longest prompt + output this engine can serve: its KV capacity, and without chunked
        prefill the step budget too (vLLM then requires max_model_len <= max_num_batched_tokens)."""
        return self.capacity_tokens if self.cfg.enable_chunked_prefill else min(self.capacity_tokens, self.chunk_cap)

    def fits(self, pos: int) -> bool:
        """Whether the request's whole sequence fits this engine (KV capacity; budget if unchunked)."""
        return self.recs.total_tokens[pos] <= self.max_request_tokens

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
        """Granted tokens per running request, then per request admitted from the waiting queue."""
        self._preempted = self._admitted = self._fast = False
        self._adm_tok, self._adm_cols = [], []
        run, n = self.run, len(self.run)
        free = self.num_blocks - self.used_blocks
        if self.waiting and self.cfg.schedule_order == "prefill-first":
            # vLLM V0's default: a step with admissible prompts runs only prompts; decodes wait
            granted = self._admit(np.zeros(n, dtype=np.int64), self.budget, free)
            if self._admitted:
                return granted
        if self._decoding and n <= self.budget and n <= free:
            # the common case: every running request decodes one token, each takes at most one new
            # block, so nothing is preempted (same decisions as below, a few numpy calls fewer)
            self._fast = True
            if len(self._ones) < n:
                self._ones = np.ones(max(n, 2 * len(self._ones)), dtype=np.int64)
            granted = self._ones[:n]  # (read-only: _admit concatenates it, _apply only reads it)
            if not self.waiting:
                return granted
            need = int(np.count_nonzero(run.a[3] % self.bs == 0)) if n else 0  # entering a new block
            return self._admit(granted, self.budget - n, free - need)
        while True:
            wants = np.minimum(self.run.wants(), self.chunk_cap)
            granted = wants if int(wants.sum()) <= self.budget else grant_in_order(wants, self.budget)
            need = blocks_for(self.run.computed + granted, self.bs) - self.run.blocks  # >= 0
            if int(need.sum()) <= self.num_blocks - self.used_blocks or len(self.run) == 0:
                break
            self._preempt_last()
            self._preempted = True
        if self._preempted:  # vLLM v1: no admission in a step that preempted
            return granted
        return self._admit(granted, self.budget - int(granted.sum()),
                           self.num_blocks - self.used_blocks - int(need.sum()))

    def _admit(self, granted, left: int, free: int):
        """Admit waiting requests (FCFS or by priority) into the `left` tokens and `free` blocks."""
        cols, adm_tok = self._adm_cols, self._adm_tok  # cols: (idx, prompt, output, computed, generated, blocks)
        r, whole = self.recs, True
        while self.waiting and left > 0 and len(self.run) + len(cols) < self.max_seqs:
            pos = self._peek_waiting()
            prompt, gen = int(r.input_tokens[pos]), int(r.generated[pos])
            target = prompt + gen  # a preempted request recomputes its generated tokens too
            n_new = min(target, left, self.chunk_cap) if self.cfg.enable_chunked_prefill else target
            fit = target if self.cfg.reserve_full_prompt else n_new  # tokens that must fit the free blocks
            if n_new > left or -(-fit // self.bs) > free:  # (blocks are still taken chunk by chunk)
                break
            self._pop_waiting(pos)
            whole = whole and n_new == target
            cols.append((pos, prompt, int(r.output_tokens[pos]), 0, gen, 0))
            adm_tok.append(n_new)
            left -= n_new
            free -= -(-n_new // self.bs)
            if r.scheduled_s[pos] != r.scheduled_s[pos]:  # NaN: first time it runs
                r.scheduled_s[pos] = self.env.now
        self._admitted, self._adm_whole = bool(cols), whole
        if cols:
            known = self.run is self._known
            self.run = self.run.extend(np.array(cols, dtype=np.int64).T)
            if known:  # admitted requests have computed nothing yet
                self._known, self._k_done = self.run, None
            granted = np.concatenate((granted, np.array(adm_tok, dtype=np.int64)))
            self._decoding = False
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

    def _computed_sum(self) -> int:
        """Sum of the running requests' computed tokens (the keys a decode step reads, less n)."""
        if self.run is not self._known:
            self._known, self._sum_computed, self._k_done = self.run, int(np.add.reduce(self.run.a[3])), None
        return self._sum_computed

    def _steps_to_completion(self) -> int:
        """All-decode steps until the first completion: min(output - generated)."""
        self._computed_sum()  # (drops a stale value)
        if self._k_done is None:
            a = self.run.a
            self._k_done = int(np.minimum.reduce(a[2] - a[4]))
        return self._k_done

    def _stretch_steps(self, granted, agg) -> int:
        """Decode steps that can run in closed form from here (1: take a single step). Only when
        this step decodes every running request and neither admitted nor preempted anything:
        then the next steps have the same budget, fewer free blocks and the same running set, so
        nothing can change before the first completion or the KV bound (each sequence takes at
        most ceil(k / block_size) new blocks in k steps)."""
        if not self._all_decode:
            return 1
        k_done = self._steps_to_completion()
        if not self.cfg.fast_forward or self._preempted:
            return 1
        k_kv = ((self.num_blocks - self.used_blocks) // len(self.run)) * self.bs
        return max(1, min(k_done, k_kv))

    # ---- the process ----------------------------------------------------------------------
    def park(self):
        """An event to wait on before the next step, or None; dynamic policies override it."""
        return None

    def _loop(self):
        env, steps = self.env, self.steps
        parks = type(self).park is not Engine.park  # only dynamic policies park engines
        codes: dict = {}  # mode name -> its code in the step records
        while True:
            hold = self.park() if parks else None
            if hold is not None:  # a dynamic policy lent this engine's GPUs (Flying Serving's TP groups)
                yield hold
                continue
            if len(self.run) == 0 and not self.waiting:
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            granted = self._schedule()
            n = len(granted)
            if (n == 0) if self._fast else (int(granted.sum()) == 0):  # impossible for requests that fit
                raise RuntimeError(f"engine {self.index}: nothing schedulable with {len(self.waiting)} "
                                   f"waiting, run={self.run}")
            if self._fast:  # running requests decode, admitted ones (computed 0) prefill a chunk
                adm = self._adm_tok
                dn = n - len(adm)
                dkv = float(self._computed_sum() + dn) if dn else 0.0  # admitted hold no KV yet
                pt = sum(adm)
                agg = (pt, len(adm), float(sum(g * (g + 1) // 2 for g in adm)), float(pt), dn, dkv)
                self._all_decode = not adm
            else:
                # all decoding: every request past its first token, one token each. A 1-token last
                # prefill chunk costs as a decode (perfmodel.batch) but is not one here: it may
                # sample the first token or (output 0) none.
                self._all_decode = bool(n and not self._admitted and int(granted.max()) == 1
                                        and int(granted.min()) == 1 and int(self.run.generated.min()) > 0)
                agg = aggregates(granted, self.run.computed)
            mode, table = self.runner.mode_for(agg[0] + agg[4])
            k = self._stretch_steps(granted, agg)
            start = env.now
            if k > 1:
                n, k0 = agg[4], agg[5]
                c0, c1 = self._decode_affine(table, n)
                dur = decode_stretch_s(c0, c1, k0, n, k)
                self._stretch = (start, c0, c1, k0, n, k)
                k, dur = yield from self._sleep_stretch(dur)
            else:
                dur = table.time_s(*agg)
                yield env.timeout(dur)
            code = codes.get(mode)
            if code is None:
                code = codes[mode] = steps.mode_code(mode)
            steps.append(start, dur, self.index, code, k, *agg, self.used_blocks * self.bs, len(self.waiting), 0.0)
            self._apply(granted, k, self._all_decode)

    def _decode_affine(self, table, n: int) -> tuple[float, float]:
        """table.decode_affine(n), remembered per StepTable (a pure function of n there; other
        step-time objects, e.g. SiDP's, depend on the moment and are asked every time)."""
        if type(table) is not StepTable:
            return table.decode_affine(n)
        key = (id(table), n)
        got = self._affine.get(key)
        if got is None:
            got = self._affine[key] = table.decode_affine(n)
        return got

    def _sleep_stretch(self, dur):
        """Sleep through the planned stretch (simulator.stretch.sleep_stretch); returns (k, duration)."""
        return (yield from sleep_stretch(self, dur))

    def _apply(self, granted, k: int, all_decode: bool) -> None:
        """State after the step (k = 1) or the k-step decode stretch that just ended."""
        run, now, r, bs = self.run, self.env.now, self.recs, self.bs
        a = run.a  # rows: idx, prompt, output, computed, generated, blocks
        known = run is self._known
        if all_decode:  # every request computed and sampled k tokens; none is new
            a[3:5] += k
            np.floor_divide(a[3] + (bs - 1), bs, out=a[5])  # blocks_for(computed)
            self.used_blocks = int(np.add.reduce(a[5]))  # only running requests hold blocks
            if known:
                self._sum_computed += k * len(run)
                if k < self._k_done:  # no completion inside or at the end of this stretch
                    self._k_done -= k
                    return
            done = a[4] >= a[2]
        elif self._fast:  # decoders (first dn) decoded one token; admitted requests ran a prefill chunk
            dn = len(run) - len(self._adm_tok)
            if known:
                self._sum_computed += dn + sum(self._adm_tok)
            a[3:5, :dn] += 1
            done = a[4] >= a[2] if dn else np.zeros(len(run), dtype=bool)
            for j, (g, (pos, prompt, out, _, gen, _)) in enumerate(zip(self._adm_tok, self._adm_cols)):
                a[3, dn + j] = g
                if g == prompt + gen:  # its prompt (and recompute) is done: it samples, unless output 0
                    if out > 0:
                        a[4, dn + j] = gen + 1
                        if gen == 0:
                            r.first_token_s[pos] = now
                    done[dn + j] = gen + (out > 0) >= out
                else:
                    done[dn + j] = False
            np.floor_divide(a[3] + (bs - 1), bs, out=a[5])
            self.used_blocks = int(np.add.reduce(a[5]))
        else:
            self._known = known = None
            held = int(np.add.reduce(a[5]))
            a[3] += granted
            np.floor_divide(a[3] + (bs - 1), bs, out=a[5])
            self.used_blocks += int(np.add.reduce(a[5])) - held
            full = (granted > 0) & (a[3] == a[1] + a[4])  # the prompt (and recompute) is done: it samples
            samples = full & (a[2] > 0)
            first = samples & (a[4] == 0)
            if first.any():
                r.first_token_s[a[0][first]] = now
            a[4] += samples
            done = full & (a[4] >= a[2])
        at = done.nonzero()[0]
        pos = None
        if len(at) == 1:  # one completion (the common case), in scalars
            i = int(at[0])
            pos = [int(a[0, i])]
            r.finish_s[pos[0]] = now
            r.generated[pos[0]] = a[4, i]
            self.used_blocks -= int(a[5, i])
            freed = int(a[3, i])
        elif len(at):
            pos = a[0, at].tolist()
            r.finish_s[pos] = now
            r.generated[pos] = a[4, at]
            self.used_blocks -= int(np.add.reduce(a[5, at]))
            freed = int(np.add.reduce(a[3, at]))
        if pos is not None:  # completions: recorded above, KV freed; drop them from the batch
            self.outstanding_tokens -= sum([r.total_tokens[p] for p in pos])
            self.outstanding_requests -= len(pos)
            self.run = run = run.keep(~done)
            if known:
                self._known, self._sum_computed, self._k_done = run, self._sum_computed - freed, None
        elif known and not all_decode:
            self._k_done = None
        if not all_decode:  # (after an all-decode step the rest still decode)
            # fast path: the decoders still decode, admitted requests do if their prompt was whole
            self._decoding = self._adm_whole if self._fast else \
                bool((run.generated > 0).all() and (run.wants() == 1).all())
        if pos is not None:
            for p in pos:
                self.on_finish(p)
