"""The server's door: a request from its client's send to an engine's queue, or to its rejection with a reason.

    sent        the client sends it (TTFT's start); refused at once if it can never be served (too_long), before
                any tokenizer time, so a bogus 1e11-token row cannot delay the requests behind it (issue 33, item 6)
    issue       Arrivals' callback: sent, then to the tokenizer (simulator.cluster.frontend) or straight on
    tokens_of   the open loop fed to the tokenizer (Tokenizer.feed): sent at its arrival, its prompt tokens
    tokenized   out of the tokenizer (FIFO, at no step boundary of its own): delivered, else its slot is free
    deliver     the router's engine (or the policy's front door) queues it, or it is rejected: longer than every
                engine's KV or step budget, or past the admission cap
    finished    a request that ended (the engines' finish hook): the progress bar, the closed loop's next send

One Gate per run (cluster.simulate wires it to the arrivals, tokenizer, router and engines). Compiled
(perfmodel/native.py NATIVE): these run once or twice per request, and as interpreted closures they cost ~10k
instructions a request of the ~130k an overloaded run spends (issue 36).
"""
from __future__ import annotations

from typing import Any


class Gate:
    """Request `pos`'s way in: records in `recs` (RequestRecords), model limits, the engines' step budget and
    admission cap (EngineConfig.max_waiting, 0: none), the policy's front door (or None) and progress(n)."""

    def __init__(self, env: Any, recs: Any, max_model_len: int, attention_chunk_tokens: int, budget: int,
                 max_waiting: int, front: Any, progress: Any) -> None:
        self.env, self.recs = env, recs
        self.total_tokens: list[int] = recs.total_tokens  # (Python ints: RequestRecords)
        # the records' columns read or written once a request (held here: an attribute of `recs` is a lookup more)
        self.issued_s, self.arrival_s, self.input_tokens = recs.issued_s, recs.arrival_s, recs.input_tokens
        self.max_model_len, self.chunk_tokens = max_model_len, attention_chunk_tokens
        self.budget, self.max_waiting = budget, max_waiting
        self.front, self.progress = front, progress
        # wired once built (cluster.simulate): they take the gate's methods as their callbacks
        self.router: Any = None
        self.engines: list = []
        self.arrivals: Any = None
        self.tokenizer: Any = None
        self.tokenizing = False

    def finished(self, pos: int) -> None:
        if self.progress is not None:
            self.progress(1)
        self.arrivals.finished(pos)

    def reject(self, pos: int, reason: str) -> bool:
        self.recs.reject_reason[pos] = reason  # one reason per cause (summary.json counts them)
        if self.progress is not None:
            self.progress(1)
        return False

    def too_long(self, pos: int) -> str | None:
        """Why the request can never be served whatever the engines' state, else None."""
        total = self.total_tokens[pos]
        if total > self.max_model_len:  # vLLM's API server: prompt + max_tokens > max_model_len
            return f"context_length: prompt + output > max_model_len ({self.max_model_len})"
        if self.chunk_tokens and total > self.chunk_tokens:
            return (f"attention_chunk_size: chunked local attention past one chunk "
                    f"({self.chunk_tokens} tokens) is not modelled yet")
        return None

    def sent(self, pos: int, now: float) -> bool:
        """The client sends request `pos` at `now`: TTFT's start, whatever waits come after (every policy); whether
        it passes the server's first check."""
        self.issued_s[pos] = now
        reason = self.too_long(pos)
        return True if reason is None else self.reject(pos, reason)

    def issue(self, pos: int, at_boundary: bool = True) -> bool:
        if not self.sent(pos, self.env.now):
            return False
        if self.tokenizing:  # the server checks the rest once tokenized
            self.tokenizer.send(pos, self.input_tokens.item(pos))  # (.item: a Python int in one call)
            return True
        return self.deliver(pos, at_boundary)

    def deliver(self, pos: int, at_boundary: bool = True) -> bool:
        e = self.router.pick(pos)
        if e is None:
            cap = max(x.capacity_tokens for x in self.engines)
            if self.total_tokens[pos] <= cap:  # fits the KV but not the step budget: chunked prefill is off
                return self.reject(pos, f"longer than max_num_batched_tokens ({self.budget}) with chunked prefill off")
            return self.reject(pos, f"longer than every engine's KV capacity ({cap} tokens)")
        if self.max_waiting and len(e.waiting) >= self.max_waiting:
            return self.reject(pos, f"admission cap: {self.max_waiting} requests already waiting")
        if self.front is not None:
            why = self.front.dispatch(pos, at_boundary)
            if why is not None:  # no instance of the policy's can ever hold it
                return self.reject(pos, why)
        else:
            e.submit(pos, at_boundary)
        return True

    def tokenized(self, pos: int) -> None:
        if not self.deliver(pos, False):
            self.arrivals.finished(pos)  # rejected there: its client's slot is free

    def tokens_of(self, pos: int) -> int | None:
        return self.input_tokens.item(pos) if self.sent(pos, self.arrival_s.item(pos)) else None
