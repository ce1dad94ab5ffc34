"""The serving front end's tokenizer: the time between a client sending a request and an engine seeing it.

vLLM, SGLang and TRT-LLM turn a request's prompt text into token ids in their API-server process, in one
thread, so requests are tokenized in the order they arrive (docs/frameworks.md, "Front end"):
  one at a time (SGLang's TokenizerManager, TRT-LLM's generate_async): a FIFO server whose service time is
      `s_per_token` x the prompt's tokens (Framework.tokenize_s_per_token, benchmarks/measure_tokenizer.py);
  in micro-batches (vLLM's AsyncMicrobatchTokenizer, `batch_wait_s` > 0): the thread takes the first queued
      prompt, waits up to `batch_wait_s` for more (closing at once when `max_batch` are in), tokenizes the
      batch in one call (costed as its prompts one after another) and hands them all on when the call
      returns; prompts sent meanwhile wait for the next batch, which starts when the thread is free.
The client's clock runs meanwhile: a request's `issued_s` is its send time, so TTFT includes the wait and
the tokenization. One front end serves the whole deployment (one API server, as the three servers start
by default). Cost: one bare timeout (a callback, no process) per request, about one per micro-batch; a
prompt joining an open window moves the batch's return later without a timeout of its own (the pending one
fires early and waits on to the exact instant); never per token (benchmarks/sim_speed.py).

An open loop needs no event per arrival (`feed`, issue 36): the arrival times are known, and what a prompt
does to the tokenizer depends on its send time alone. One at a time, each delivery's timeout is set where
`send` would set it, once the previous one is delivered. In micro-batches (open a window, join it, queue), the
tokenizer takes in every prompt sent up to now whenever one of its own timeouts fires, with the arithmetic
`send` does at the prompt's own time; an idle tokenizer waits for the return of the next prompt's window, and
an open window's wait ends early at the send that would fill it. Same returns at the same instants; an arrival
at the very instant of a return is taken in before it (the engines' same-time rule). The engines never wait on
such arrivals: they reach no engine before they are tokenized.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from simulator.engine.stretch import delay_toward


class Tokenizer:
    """Tokenization ahead of the router: `send(pos, tokens)` hands pos to `deliver(pos)` once tokenized."""

    def __init__(self, env, s_per_token: float, deliver, batch_wait_s: float = 0.0, max_batch: int = 1):
        for name, v in (("tokenize_s_per_token", s_per_token), ("tokenize_batch_wait_s", batch_wait_s)):
            if not 0 <= v < float("inf"):
                raise ValueError(f"{name}={v} must be >= 0 and finite")
        if max_batch < 1:
            raise ValueError(f"tokenize_max_batch={max_batch} must be >= 1")
        self.env, self.deliver = env, deliver
        self.s_per_token, self.batch_wait_s, self.max_batch = float(s_per_token), float(batch_wait_s), int(max_batch)
        self.free_s = 0.0  # one at a time: when the thread finishes the prompts already sent
        self.queue: deque = deque()  # micro-batches: (pos, tokens) sent while the thread tokenizes a batch
        self.batch: list = []  # the batch being collected or tokenized (positions)
        self.deadline_s = -1.0  # when the open window closes (prompts sent before it join the batch)
        self.end_s = 0.0  # when the batch's tokenizer call returns
        self._end: Any = None  # the pending timeout towards that return (a superseded one is ignored)
        self._end_at = self._return_s = 0.0  # when that timeout fires; when the call returns (>= it)
        self._sends: Any = None  # `feed`: [send times by position, tokens_of, next position, its cost once asked]

    @property
    def active(self) -> bool:
        """Whether requests pass through it (a tokenization cost of 0 turns the whole front end off)."""
        return self.s_per_token > 0

    def send(self, pos: int, prompt_tokens: int) -> None:
        env, cost = self.env, self._cost(prompt_tokens)
        if self.batch_wait_s <= 0:  # one at a time (Lindley's recursion gives the delivery time now)
            self.free_s = max(env.now, self.free_s) + cost
            env.timeout(self.free_s - env.now).callbacks.append(lambda _ev, pos=pos: self.deliver(pos))
            return
        now = env.now
        if self._take(pos, cost, now):
            self._schedule(self.end_s, now)

    def _cost(self, prompt_tokens: int) -> float:
        """Seconds the thread takes over a prompt of `prompt_tokens` (a micro-batch: its prompts' sum)."""
        return self.s_per_token * float(prompt_tokens)

    def feed(self, arrival_s: list, tokens_of) -> None:
        """Open loop (module docstring): prompts sent at `arrival_s` (sorted seconds, position order), each taken
        in by `tokens_of(pos)`: its prompt tokens, or None for a request refused before the front end."""
        self._sends = [arrival_s, tokens_of, 0, None]  # (+ the next position's cost, once _wait_for_next asked)
        if self.batch_wait_s <= 0:
            self._serve_next()
        else:
            self._wait_for_next()

    def _ask(self, pos: int) -> float | None:
        """`feed`: the tokenization seconds of the prompt at `pos`, or None (refused before the front end)."""
        tokens = self._sends[1](pos)
        return None if tokens is None else self._cost(tokens)

    def _serve_next(self) -> None:
        """`feed`, one at a time: the next prompt's delivery, where `send` at its time would set it (Lindley)."""
        sends = self._sends
        times, i = sends[0], sends[2]
        while i < len(times):
            cost = self._ask(i)
            i += 1
            if cost is not None:
                t = times[i - 1]
                self.free_s = max(t, self.free_s) + cost
                at = t + (self.free_s - t)  # (where send's timeout, set at t, fires)
                sends[2] = i
                self.env.timeout(delay_toward(self.env.now, at)).callbacks.append(
                    lambda _ev, pos=i - 1, at=at: self._served(pos, at))
                return
        sends[2] = i

    def _served(self, pos: int, at: float) -> None:
        if self.env.now < at:  # the wait stopped short of it (delay_toward): once more
            self.env.timeout(delay_toward(self.env.now, at)).callbacks.append(lambda _ev: self._served(pos, at))
            return
        self.deliver(pos)
        self._serve_next()

    def _take(self, pos: int, cost: float, now: float) -> bool:
        """A prompt sent at `now` (micro-batches): whether it opened or joined the batch (its return moved)."""
        if not self.batch:  # the thread is free: this prompt opens a window
            self.batch, self.deadline_s = [pos], now + self.batch_wait_s
            self._return_at(self.deadline_s + cost, now)
        elif now < self.deadline_s:  # the window is open: it joins, and the call grows by its tokens
            self.batch.append(pos)
            end = self.end_s + cost
            if len(self.batch) >= self.max_batch:  # full: the window closes now
                end -= self.deadline_s - now
                self.deadline_s = now
            self._return_at(end, now)
        else:  # the batch is being tokenized: wait for the next one
            self.queue.append((pos, cost))
            return False
        return True

    def _return_at(self, end_s: float, now: float) -> None:
        """The batch's call, as of `now`, returns at end_s: at now + max(0, end_s - now), exactly."""
        self.end_s, self._return_s = end_s, now + max(0.0, end_s - now)

    def _schedule(self, end_s: float, now: float) -> None:
        """Towards the return set at `now` (the current instant): a pending timeout that fires no later is kept
        (it waits on from there: `_returned`); else a new one supersedes it."""
        if self._end is None or self._end_at > self._return_s:
            self._timeout(max(0.0, end_s - now), self._return_s)

    def _take_sent(self, now: float) -> None:
        """`feed`: take in every prompt sent up to now (at now too), in order, each at its own time."""
        sends = self._sends
        times, _, i, peeked = sends
        n = len(times)
        while i < n and times[i] <= now:
            cost = peeked if peeked is not None else self._ask(i)
            peeked = None
            if cost is not None:
                self._take(i, cost, times[i])
            i += 1
        sends[2], sends[3] = i, peeked  # (still the next one's cost when none was due)

    def _fed_wake(self, held: int, deadline_s: float, nxt: int | None = None) -> float:
        """`feed`: when to act next with `held` prompts in a window closing at `deadline_s`: the batch's return
        (`_return_s`), or sooner the send that would fill the window (a full window closes at once, so its
        return moves earlier). `nxt`: the first prompt not taken in (default: the feed's next)."""
        times, at = self._sends[0], self._return_s
        j = (self._sends[2] if nxt is None else nxt) + max(1, self.max_batch - held) - 1  # (refused ones count too:
        if j < len(times) and times[j] < deadline_s:  # a wake that may come early, then waits on)
            at = min(at, times[j])
        return at

    def _wait_for_next(self) -> None:
        """`feed`, nothing in the tokenizer: refused requests are taken as they come; the next prompt opens a
        window at its send time, whose return (with no other prompt joining) the tokenizer waits for."""
        sends = self._sends
        times, _, i, peeked = sends
        while i < len(times):
            cost = peeked if peeked is not None else self._ask(i)  # (asked once: a second wait asks no more)
            peeked = None
            if cost is not None:
                t = times[i]
                self._return_at(t + self.batch_wait_s + cost, t)  # (where this prompt alone opening a window returns)
                sends[2], sends[3] = i, cost
                at = self._fed_wake(1, t + self.batch_wait_s, i + 1)
                self._timeout(delay_toward(self.env.now, at), at)
                return
            i += 1
        sends[2] = i

    def _timeout(self, delay_s: float, at: float) -> None:
        self._end, self._end_at = self.env.timeout(delay_s), at
        self._end.callbacks.append(self._returned)

    def _returned(self, ev) -> None:
        if ev is not self._end:
            return  # superseded: the batch's return moved earlier after this timeout was set
        now = self.env.now
        if self._sends is not None:  # `feed`: the prompts sent meanwhile, first
            self._take_sent(now)
            if not self.batch:  # woken for a send this wait stopped short of (delay_toward): once more
                self._wait_for_next()
                return
        if now < self._return_s:  # the batch grew since: on to its return, exactly then
            at = self._return_s if self._sends is None else self._fed_wake(len(self.batch), self.deadline_s)
            self._timeout(delay_toward(now, at), at)
            return
        done, self.batch, self._end = self.batch, [], None
        for pos in done:
            self.deliver(pos)
        if self.queue:  # the next batch: what queued meanwhile, at once up to max_batch, then a window
            n = min(self.max_batch, len(self.queue))  # (`now` still: delivering advances no clock)
            items = [self.queue.popleft() for _ in range(n)]
            self.batch = [pos for pos, _ in items]
            self.deadline_s = now if n >= self.max_batch else now + self.batch_wait_s
            end = self.deadline_s + sum(c for _, c in items)
            self._return_at(end, now)
            if self._sends is None:
                self._schedule(end, now)
            else:
                at = self._fed_wake(n, self.deadline_s)
                self._timeout(delay_toward(now, at), at)
        elif self._sends is not None:
            self._wait_for_next()
