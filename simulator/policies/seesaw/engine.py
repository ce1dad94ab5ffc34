"""SeesawEngine: one node-wide instance alternating prefill under c_p and decode under c_d
(SYSTEMS.md 4), with a CPU KV store between the phases.

Transition-minimising schedule: prefill whole prompts (as many as the token budget holds, at least
one per pipeline stage) and swap each finished prompt's KV out to the CPU store, until the store
cannot take the next prompt or nothing waits; re-shard to c_d; decode with continuous batching,
pulling sequences' KV in from the store into c_d's GPU KV (up to its capacity and max_num_seqs)
until store and batch are empty; re-shard back. Every duration is perfmodel's: swaps overlap compute
(perfmodel.seesaw.prefill_step_s, decode_stretch_s); re-shards do not (perfmodel.seesaw.reshard_s:
the new shards' weights over the host link).
On the engine core (simulator.engine.core: idle wait, step rows, completions, outstanding counts), with
Engine's arrival interface (submit, fits), so cluster.simulate routes to it unchanged.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from perfmodel import seesaw
from perfmodel.batch import StepAgg
from simulator.engine.core import EngineCore
from simulator.engine.step import NO_WORK


class SeesawEngine(EngineCore):
    """Offline-oriented engine; `setup(cfg)` (the plan's attach) gives it the Seesaw parameters."""

    def __init__(self, *, env, index, runner, ec, budget, max_seqs, kv_capacity_tokens, recs, steps, finished):
        super().__init__(env=env, index=index, recs=recs, steps=steps)
        if runner.floored:  # (its phases cost whole stretches, perfmodel.seesaw: no per-step floor there yet)
            raise ValueError("--policy seesaw with a host floor (--host-floor-us / --host-floor-seq-us, or TRT-LLM "
                             "1.0's preset): not modelled in Seesaw's phased engine; pass --host-floor-us 0 "
                             "--host-floor-seq-us 0")
        self.runner = runner  # (ec: one of the cluster's engine-factory keywords, simulator/cluster/simulate.py; unused)
        self.budget, self.max_seqs, self.capacity_tokens = int(budget), int(max_seqs), int(kv_capacity_tokens)
        self.add_finish_hook(finished)
        self.store: deque = deque()  # prefilled requests whose KV sits in the CPU store
        self.store_bytes = 0.0
        self.ss = None
        self.proc = env.process(self._loop())

    def setup(self, ss) -> None:
        self.ss = ss  # SeesawSetup: spec, hw, prof, gpus, buffer bytes, re-shard seconds, pp, decode KV

    def submit(self, pos: int, at_boundary: bool = True) -> None:
        self.accept(pos)  # (issued_s: the client's send, set by the cluster's issue)
        self.waiting.append(pos)
        self.idle.wake()

    def fits(self, pos: int) -> bool:
        """Its prompt's KV fits the CPU store and its whole sequence the decode config's GPU KV."""
        r, ss = self.recs, self.ss
        return (int(r.input_tokens[pos] + r.output_tokens[pos]) <= ss.decode_kv_tokens
                and self._kv_bytes(int(r.input_tokens[pos])) <= ss.buffer_bytes)

    def _kv_bytes(self, tokens: float) -> float:
        return seesaw.kv_bytes(self.ss.spec, tokens)  # whole model; each GPU holds 1/gpus of it

    def _row(self, start, mode, steps, agg=NO_WORK, used=0, switch=0.0):
        self.record(start_s=start, duration_s=self.env.now - start, mode=mode, steps=steps, agg=agg,
                    kv_used_tokens=used, switch_s=switch)

    def _finish(self, pos: int) -> None:
        self.complete(pos, self.recs.output_tokens[pos])
        self.report((pos,))

    def _reshard(self, mode: str):
        if not self.ss.reshard_s[mode]:  # c_p == c_d: nothing moves
            return
        start = self.env.now
        yield self.env.timeout(self.ss.reshard_s[mode])
        self._row(start, mode, 0, switch=self.env.now - start)

    # ---- phases ------------------------------------------------------------------------------
    def _prefill_phase(self):
        r, table = self.recs, self.runner.tables["prefill"]
        while self.waiting:
            take, tokens = [], 0
            while self.waiting:
                pos = self.waiting[0]
                n = int(r.input_tokens[pos])
                full = self.store_bytes + self._kv_bytes(tokens + n) > self.ss.buffer_bytes and r.output_tokens[pos] > 1
                if full or (take and tokens + n > self.budget and len(take) >= self.ss.pp):
                    break
                take.append(self.waiting.popleft())
                tokens += n
            if not take:
                return  # the CPU store is full
            p = np.asarray(take)
            lens = r.input_tokens[p].astype(float)
            r.scheduled_s[p] = self.env.now
            agg = StepAgg(tokens, len(take), float((lens * (lens + 1) / 2).sum()), float(tokens), 0, 0.0)
            start = self.env.now
            parked = [q for q in take if r.output_tokens[q] > 1]  # the rest finish with their first token
            ss = self.ss  # (the swap-out overlaps the compute: perfmodel.seesaw)
            yield self.env.timeout(seesaw.prefill_step_s(table.step_s(agg), r.input_tokens[parked].sum(), ss.spec, ss.hw,
                                                         ss.gpus, ss.prof))
            self._row(start, "prefill", 1, agg)
            r.first_token_s[p] = self.env.now
            for q in take:
                if r.output_tokens[q] <= 1:
                    self._finish(q)
                else:
                    r.generated[q] = 1
                    self.store.append(q)
                    self.store_bytes += self._kv_bytes(int(r.input_tokens[q]))

    def _decode_phase(self):
        r, table = self.recs, self.runner.tables["decode"]
        run: list = []
        ctx = 0
        while self.store or run:
            pulled = 0
            while self.store and len(run) < self.max_seqs:  # fill the GPU KV from the CPU store
                q = self.store[0]
                if ctx + int(r.input_tokens[q] + r.output_tokens[q]) > self.ss.decode_kv_tokens:
                    break
                self.store.popleft()
                self.store_bytes -= self._kv_bytes(int(r.input_tokens[q]))
                run.append(q)
                ctx += int(r.input_tokens[q] + r.output_tokens[q])
                pulled += int(r.input_tokens[q])
            idx = np.asarray(run)
            left = r.output_tokens[idx] - r.generated[idx]
            n, keys = len(run), float((r.input_tokens[idx] + r.generated[idx]).sum())
            k = int(left.min())
            line, ss = table.decode_affine(n), self.ss
            start = self.env.now
            yield self.env.timeout(seesaw.decode_stretch_s(line.c0_s, line.c1_s_per_key, keys + n, n, k, pulled, ss.spec,
                                                           ss.hw, ss.gpus, ss.prof))
            self._row(start, "decode", k, StepAgg(0, 0, 0.0, 0.0, n, keys + n), used=ctx)
            r.generated[idx] += k
            done = [q for q in run if r.generated[q] >= r.output_tokens[q]]
            for q in done:
                run.remove(q)
                ctx -= int(r.input_tokens[q] + r.output_tokens[q])
                self._finish(q)

    def _loop(self):
        mode = "prefill"  # weights start in c_p's shards
        while True:
            if not self.waiting and not self.store:
                yield from self.idle.wait()
                continue
            if mode != "prefill" and self.waiting:
                yield from self._reshard("prefill")
                mode = "prefill"
            yield from self._prefill_phase()
            if self.store:
                if mode != "decode":
                    yield from self._reshard("decode")
                mode = "decode"
                yield from self._decode_phase()
