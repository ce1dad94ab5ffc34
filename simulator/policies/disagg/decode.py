"""DecodeEngine: one decode instance of the disagg policy, continuous batching of requests whose KV
arrived from a prefill instance.

Admission (the Coordinator's, at the decode side): a request is admitted when its whole sequence,
prompt + output tokens, fits the blocks not yet reserved and a max_num_seqs slot is free; the blocks
are reserved then (before the KV transfer, as vLLM's NIXL connector allocates them before it reads),
so a decode instance never preempts (a preempted request would need its KV sent or computed again).
A delivered request joins the running batch at the next step boundary, and its first token (sampled by the
prefill, carried with the KV) reaches the client then: the decode side streams it from its scheduler turn,
which waits for the step in flight (SGLang 0.5.8 disaggregation/decode.py event loop: transfer polling and the
"prebuilt" batch run between decode steps; TRT-LLM's generation worker answers from its iteration loop).
Every step decodes one token for every running request (perfmodel's StepTable decode line: c0 + c1 x keys
seconds), advanced in closed form until the first completion (simulator.engine.stretch), cut short by a
delivery.
With speculative decoding (`spec`, perfmodel.specdec) a step stands for one emitted token at the per-token
cost of draft + verify steps (the means are those of whole steps; step rows are T x as many).
"""
from __future__ import annotations

from perfmodel.batch import StepAgg
from perfmodel.specdec import per_token_affine
from perfmodel.steptable import decode_stretch_s
from simulator.engine.core import EngineCore
from simulator.engine.runner import DecodeLine, floored_line
from simulator.engine.stretch import Stretch


class DecodeEngine(EngineCore):
    """Decode-only instance on the engine core (simulator.engine.core: idle wait, stretch, step rows,
    completions); the cluster's interface (index, capacity_tokens, waiting, outstanding_*, fits) plus
    can_reserve / reserve / deliver for the Coordinator."""

    def __init__(self, *, env, index, table, max_seqs, capacity_tokens, block_size, recs, steps,
                 fast_forward: bool = True, spec=None, num_layers: int = 1, floor_at=None):
        super().__init__(env=env, index=index, recs=recs, steps=steps, fast_forward=fast_forward)
        self.table, self.max_seqs, self.block_size = table, int(max_seqs), int(block_size)
        self.num_blocks = int(capacity_tokens) // self.block_size
        self.reserved_blocks = 0  # blocks held by admitted requests (in transfer or running)
        self.slots = 0  # admitted requests (in transfer or running)
        self.run: list = []  # running requests (positions); `waiting`: delivered, joining at the next step
        self.spec, self.num_layers = spec, num_layers  # perfmodel.specdec.SpecDecode or None
        self.floor_at = floor_at  # seqs -> the loop's host floor (Runner.floor_at; None: no floor)
        # the attention-DP ranks of this instance's EP group (the Coordinator sets them): their routed experts
        # serve the group's tokens, costed at the members' mean load when a stretch starts
        self.siblings: list = [self]
        self.mode_code("decode")  # (its code in the step records from the start)
        self.proc = env.process(self._loop())

    def _load(self, rows: int) -> float:
        """Mean padded tokens per rank of the EP group when each running request adds `rows` rows (the
        group's running batches now; a sibling's later changes do not re-cost a stretch in progress)."""
        t = self.table
        return sum(t.padded(0, rows * len(s.run)) for s in self.siblings) / len(self.siblings)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks(self, pos: int) -> int:
        return -(-self.recs.total_tokens[pos] // self.block_size)

    def fits(self, pos: int) -> bool:
        """Whether the request's whole sequence fits this instance's KV at all."""
        return self.blocks(pos) <= self.num_blocks

    def can_reserve(self, pos: int) -> bool:
        return self.slots < self.max_seqs and self.reserved_blocks + self.blocks(pos) <= self.num_blocks

    def reserve(self, pos: int) -> None:
        """Admit `pos`: its prompt + output blocks are held from now until it finishes; it waited for
        them since its prefill ended (records' kv_wait_s)."""
        self.reserved_blocks += self.blocks(pos)
        self.slots += 1
        self.accept(pos)
        self.recs.kv_wait_s[pos] = self.env.now - self.recs.prefill_end_s[pos]

    def transferred(self, pos: int, transfer_s: float) -> None:
        """Its KV took `transfer_s` to arrive (records' kv_transfer_s)."""
        self.recs.kv_transfer_s[pos] = transfer_s

    def deliver(self, pos: int) -> None:
        """Its KV has arrived (and the hand-off is done): it joins the batch after the step in progress
        (a stretch is cut there)."""
        self.waiting.append(pos)
        if not self.idle.wake():
            self.cut(True)

    def _loop(self):
        env, r = self.env, self.recs
        while True:
            if not self.run and not self.waiting:
                yield from self.idle.wait()
                continue
            for q in self.waiting:  # the client's first token leaves as the request joins the batch: at the
                r.first_token_s[q] = env.now  # step boundary after its KV arrived (module docstring)
            self.run.extend(self.waiting)
            self.waiting.clear()
            run = self.run
            n = len(run)
            keys = float(sum(int(r.input_tokens[q] + r.generated[q]) for q in run))  # first step reads these
            k = int(min(r.output_tokens[q] - r.generated[q] for q in run))  # steps to the first completion
            load = self._load if self.table.dispatch and len(self.siblings) > 1 else None
            line = (per_token_affine(self.table, n, self.spec, self.num_layers, load) if self.spec is not None
                    else self.table.decode_affine(n, load(1) if load else None))
            if self.floor_at is not None:  # at the floor up to where the kernels' line crosses it
                line = floored_line(DecodeLine(line.c0_s, line.c1_s_per_key, k), keys, n, self.floor_at(n))
                k = line.steps
            start = env.now
            if k > 1 and self.fast_forward:
                ended = yield from self.sleep_stretch(Stretch(start, line.c0_s, line.c1_s_per_key, keys, n, k))
                k, dur = ended.steps, ended.duration_s
            else:
                k, dur = 1, decode_stretch_s(line.c0_s, line.c1_s_per_key, keys, n, 1)
                yield env.timeout(dur)
            self.record(start_s=start, duration_s=dur, mode="decode", steps=k,
                        agg=StepAgg(0, 0, 0.0, 0.0, n, keys), kv_used_tokens=self.reserved_blocks * self.block_size)
            done = []
            for q in run:
                r.generated[q] += k
                if r.generated[q] >= r.output_tokens[q]:
                    done.append(q)
            for q in done:
                run.remove(q)
                self.reserved_blocks -= self.blocks(q)
                self.slots -= 1
                self.complete(q, r.generated[q])
            self.report(done)
