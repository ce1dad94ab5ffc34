"""The disagg Coordinator: the cluster's front door, and the hand-over from prefill to decode.

    arrival -> prefill instance (least outstanding tokens) -> prompt + first token (an Engine with
    prefill_only: output capped at 1 token) -> FIFO for decode KV -> decode instance with room
    (least outstanding tokens) reserves prompt + output blocks -> KV transfer (perfmodel.disagg; one at a
    time per prefill instance: its ports are the shared link) -> DecodeEngine generates the rest.

Decode routing: "least_loaded" (default): one FIFO for the whole decode pool, each request to any instance
with room (work-conserving: the ideal router). "round_robin": the request is bound to the next decode worker
in turn (a worker = one instance, all its attention-DP ranks) when its prefill ends, and waits in that
worker's FIFO even while another worker has room: the Dynamo frontend's default `--router-mode round-robin`
(docs.nvidia.com/dynamo, Router Guide, CLI arguments); inside a worker any DP rank with room takes it
(TRT-LLM's attention-DP scheduler balances new requests over the ranks: executor_request_queue.py).

First token: the prefill samples it; the client sees it when it reaches the decode instance with the KV
(vLLM's P/D proxy, SGLang's PD router and Dynamo all stream from the decode side) and that instance's loop
takes it up at its next step boundary, so TTFT = queue + prefill + wait for decode KV + transfer (+ the
framework's pd_handoff_s) + the rest of the decode step in flight; a request of one output token ends at its
prefill.

Backpressure: from its prefill's end until its transfer ends, a request's prompt KV stays in its
prefill instance (the engine freed the blocks; the Coordinator takes as many out of the engine's
KVBlocks with `resize`, at most the free ones, and gives them back after the transfer). When what is
left cannot hold one of the instance's requests whole, the instance is held (Engine.hold: parked after
its step in progress) until transfers give blocks back: a full decode pool stalls prefill, as in
DistServe/Dynamo. Nothing is dropped: a request no instance can ever hold is rejected with a reason at
dispatch; every other one ends completed.
"""
from __future__ import annotations

import heapq
from collections import deque

import simpy

from perfmodel import disagg

ROUTING = ("least_loaded", "round_robin")


class Coordinator:
    """Routes requests over the prefill pool, hands them to the decode pool (mutable, one per run)."""

    def __init__(self, spec, hw, prefill_layout, decode_layout, prefill_gpus: list, decode_gpus: list,
                 routing: str = "least_loaded", handoff_s: float = 0.0):
        self.spec, self.hw, self.p_lay, self.d_lay = spec, hw, prefill_layout, decode_layout
        self.handoff_s = handoff_s  # transfer end -> first token at the client (Framework.pd_handoff_s)
        self.p_gpus, self.d_gpus = prefill_gpus, decode_gpus
        self.prefill: list = [None] * len(prefill_gpus)
        self.decode: list = [None] * len(decode_gpus)
        if routing not in ROUTING:
            raise ValueError(f"decode_routing={routing!r}: one of {', '.join(ROUTING)}")
        per = max(decode_layout.dp, 1)  # engines per decode worker (its DP ranks)
        n_workers = len(decode_gpus) // per if routing == "round_robin" else 1
        self.group_of = [j * n_workers // len(decode_gpus) for j in range(len(decode_gpus))]  # decode j -> its FIFO
        self.queues: list = [deque() for _ in range(n_workers)]  # (pos, prefill instance) waiting for decode KV
        self.turn = 0  # round_robin: the worker the next request is bound to
        self.parked: dict = {}  # pos -> blocks taken out of its prefill instance until its transfer ends
        self.need: list = [[] for _ in prefill_gpus]  # per prefill instance: max-heap of (-tokens, pos)
        self.done_prefill: set = set()
        self.longest: list = [0] * len(prefill_gpus)  # per prefill instance: longest request it can hold
        self.kv0: list = [0] * len(prefill_gpus)  # per prefill instance: its KV tokens before any parking
        self.finished = None  # the cluster's completion callback
        self.links = None

    # ---- set-up ----------------------------------------------------------------------------------
    def attach_prefill(self, i: int, e, finished) -> None:
        """Prefill instance i (an Engine with prefill_only); `finished(pos)`: the cluster's, for the requests
        that end at their prefill (at most one output token)."""
        self.prefill[i], self.finished, self.env, self.recs = e, finished, e.env, e.recs
        e.recs.disaggregated = True
        self.longest[i] = e.max_request_tokens  # before any KV is parked: what it can ever hold
        self.kv0[i] = e.kv.capacity_tokens
        if self.links is None:  # each prefill instance's outgoing ports: one transfer at a time
            self.links = [simpy.Resource(e.env, capacity=1) for _ in self.p_gpus]
        e.add_finish_hook(lambda pos: self._prefilled(i, pos))

    def attach_decode(self, j: int, e) -> None:
        self.decode[j] = e
        per = max(self.d_lay.dp, 1)  # a decode worker's attention-DP ranks: one EP group
        group = [d for d in self.decode[j - j % per:j - j % per + per] if d is not None]
        for d in group:
            d.siblings = group
        e.report_queue(lambda: sum(len(q) for q in self.queues) + len(e.waiting))  # step rows: both queues
        e.add_finish_hook(self._decoded)

    # ---- front door ------------------------------------------------------------------------------
    def fits(self, pos: int) -> bool:
        return True  # dispatch refuses, with the reason, what no instance can hold

    def dispatch(self, pos: int, at_boundary: bool = True) -> str | None:
        """Route the request to a prefill instance; None, or why no instance can ever hold it (the
        cluster rejects it with that reason)."""
        r, total = self.recs, self.prefill[0].total_tokens  # (prompt + first token: every prefill instance's)
        fit = [e for e in self.prefill if e.holds(r.input_tokens[pos], total[pos], self.kv0[e.index])]
        if not fit or (r.output_tokens[pos] > 1 and not any(d.fits(pos) for d in self.decode)):
            where = ("a prefill instance's KV" if not fit else "a decode instance's KV")
            cap = max(self.longest) if not fit else max(d.capacity_tokens for d in self.decode)
            return f"disagg: longer than {where} ({cap} tokens)"
        i = min(fit, key=lambda e: (e.outstanding_tokens, e.index)).index
        heapq.heappush(self.need[i], (-total[pos], pos))
        self.prefill[i].submit(pos, at_boundary)
        self._check_hold(i)
        return None

    # ---- prefill -> decode -----------------------------------------------------------------------
    def _prefilled(self, i: int, pos: int) -> None:
        """The prompt ran and (output > 0) its first token was sampled on prefill instance i."""
        r, e = self.recs, self.prefill[i]
        self.done_prefill.add(pos)
        if r.output_tokens[pos] <= 1:  # nothing left to decode: it ended at its prefill (Engine, prefill_only)
            self._check_hold(i)
            self.finished(pos)
            return
        b = min(-(-int(r.input_tokens[pos]) // e.kv.block_size), e.kv.free)
        e.kv.resize(e.kv.num_blocks - b)  # its KV stays until the transfer ends
        self.parked[pos] = b
        self.queues[self.turn % len(self.queues)].append((pos, i))
        self.turn += 1
        self._check_hold(i)
        self._admit()

    def _admit(self) -> None:
        """Admit waiting requests, FIFO per queue, each to the decode instance of its queue with room and the
        least outstanding tokens."""
        for g, queue in enumerate(self.queues):
            self._admit_from(g, queue)

    def _admit_from(self, g: int, queue: deque) -> None:
        while queue:
            pos, i = queue[0]
            room = [d for j, d in enumerate(self.decode) if self.group_of[j] == g and d.can_reserve(pos)]
            if not room:
                return
            d = min(room, key=lambda d: (d.outstanding_tokens, d.index))
            queue.popleft()
            d.reserve(pos)
            self.env.process(self._transfer(pos, i, d))

    def _transfer(self, pos: int, i: int, d):
        with self.links[i].request() as link:  # one transfer at a time per prefill instance
            yield link
            j = d.index - len(self.prefill)  # (decode engines follow the prefill ones)
            t = disagg.kv_transfer_time_s(self.spec, int(self.recs.input_tokens[pos]), self.p_lay, self.d_lay,
                                          self.hw, disagg.cross_node(self.p_gpus[i], self.d_gpus[j], self.hw))
            start = self.env.now
            yield self.env.timeout(t)
            d.transferred(pos, self.env.now - start)
        e = self.prefill[i]
        e.kv.resize(e.kv.num_blocks + self.parked.pop(pos))
        self._check_hold(i)
        if self.handoff_s > 0:  # (the prefill's link and blocks are free already)
            yield self.env.timeout(self.handoff_s)
        d.deliver(pos)  # the client's stream comes from the decode side: first token at its next step boundary

    def _decoded(self, pos: int) -> None:
        self._admit()  # its blocks are free: the next in line may fit
        self.finished(pos)

    # ---- backpressure ----------------------------------------------------------------------------
    def _check_hold(self, i: int) -> None:
        """Hold prefill instance i while its KV, less what waits for transfer, cannot hold its largest
        request whole; release it once it can."""
        e, heap = self.prefill[i], self.need[i]
        while heap and heap[0][1] in self.done_prefill:
            heapq.heappop(heap)
        top = heap[0][1] if heap else None  # its largest waiting request (KV now: less what is parked)
        short = top is not None and not e.holds(self.recs.input_tokens[top], -heap[0][0], e.kv.capacity_tokens)
        if short and not e.is_held:
            e.hold()
        elif not short and e.is_held:
            e.release()
