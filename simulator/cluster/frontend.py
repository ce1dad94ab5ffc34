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
"""
from __future__ import annotations

from collections import deque

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
        self._end = None  # the pending timeout towards that return (a superseded one is ignored)
        self._end_at = self._return_s = 0.0  # when that timeout fires; when the call returns (>= it)

    @property
    def active(self) -> bool:
        """Whether requests pass through it (a tokenization cost of 0 turns the whole front end off)."""
        return self.s_per_token > 0

    def send(self, pos: int, prompt_tokens: int) -> None:
        env, cost = self.env, self.s_per_token * float(prompt_tokens)
        if self.batch_wait_s <= 0:  # one at a time (Lindley's recursion gives the delivery time now)
            self.free_s = max(env.now, self.free_s) + cost
            env.timeout(self.free_s - env.now).callbacks.append(lambda _ev, pos=pos: self.deliver(pos))
            return
        if not self.batch:  # the thread is free: this prompt opens a window
            self.batch, self.deadline_s = [pos], env.now + self.batch_wait_s
            self._schedule(self.deadline_s + cost)
        elif env.now < self.deadline_s:  # the window is open: it joins, and the call grows by its tokens
            self.batch.append(pos)
            end = self.end_s + cost
            if len(self.batch) >= self.max_batch:  # full: the window closes now
                end -= self.deadline_s - env.now
                self.deadline_s = env.now
            self._schedule(end)
        else:  # the batch is being tokenized: wait for the next one
            self.queue.append((pos, cost))

    def _schedule(self, end_s: float) -> None:
        """The batch's call returns at end_s: at now + max(0, end_s - now), exactly. A pending timeout that
        fires no later is kept (it waits on from there: `_returned`); else a new one supersedes it."""
        now = self.env.now
        self.end_s = end_s
        self._return_s = at = now + max(0.0, end_s - now)
        if self._end is None or self._end_at > at:
            self._timeout(max(0.0, end_s - now), at)

    def _timeout(self, delay_s: float, at: float) -> None:
        self._end, self._end_at = self.env.timeout(delay_s), at
        self._end.callbacks.append(self._returned)

    def _returned(self, ev) -> None:
        if ev is not self._end:
            return  # superseded: the batch's return moved earlier after this timeout was set
        now = self.env.now
        if now < self._return_s:  # the batch grew since: on to its return, exactly then
            self._timeout(delay_toward(now, self._return_s), self._return_s)
            return
        done, self.batch, self._end = self.batch, [], None
        for pos in done:
            self.deliver(pos)
        if self.queue:  # the next batch: what queued meanwhile, at once up to max_batch, then a window
            env, n = self.env, min(self.max_batch, len(self.queue))
            items = [self.queue.popleft() for _ in range(n)]
            self.batch = [pos for pos, _ in items]
            self.deadline_s = env.now if n >= self.max_batch else env.now + self.batch_wait_s
            self._schedule(self.deadline_s + sum(c for _, c in items))
