"""The engine core: what every kind of engine does the same way, written once.

    idle      Wakeup: an engine (or a lock-step group) with nothing to do waits on one event; a request
              routed to it (or a policy's hold) wakes it
    accept    a request routed here counts towards the engine's outstanding tokens/requests (the routers'
              load figures) and names this engine in the request's records
    sleep     a k-step decode stretch in closed form (simulator.engine.stretch), cut short after the step
              in progress when a request arrives (`cut`); one step is one simpy timeout
    record    one step row per step or stretch (StepRecords.add: StepRow's fields by name), the `waiting`
              column being the queue where the engine's policy queues requests (`report_queue`), KV per GPU
    complete  a request's last token: finish time and tokens in its records, out of the engine's counts,
              then the finish hooks (the cluster's, a policy's), in completion order

The engine kinds are thin variants over it: Engine (loop.py: vLLM v1 continuous batching on paged KV,
also a disaggregated prefill instance), DecodeEngine (policies/disagg/decode.py: decode of requests whose
KV arrived) and SeesawEngine (policies/seesaw/engine.py: prefill and decode phases). The request records'
columns each engine writes go through here or through engine/step.py (tests/test_request_state_owner.py).
"""
from __future__ import annotations

from collections import deque
from typing import Any

from mypy_extensions import mypyc_attr

from simulator.results.records import StepRecords

from .stretch import Stretch, cut_stretch, sleep_stretch


class Wakeup:
    """The event an idle engine (or lock-step group) waits on."""

    __slots__ = ("env", "_event")

    def __init__(self, env):
        self.env = env
        self._event: Any = None

    def wait(self):
        """Sleep until `wake` (a simpy generator: `yield from wakeup.wait()`)."""
        self._event = self.env.event()
        yield self._event
        self._event = None

    def wake(self) -> bool:
        """Wake the sleeper, if one sleeps; whether one did."""
        ev = self._event
        if ev is not None and not ev.triggered:
            ev.succeed()
            return True
        return False


@mypyc_attr(allow_interpreted_subclasses=True)  # (compiled: policies' engine kinds subclass it: setup.py)
class EngineCore:
    """State and steps every engine kind shares (module docstring). `total_tokens[pos]`: the tokens a
    request holds here at most (prompt + output; a prefill instance's output is its first token only),
    `finish_s` / `engine_of`: the records' columns this engine's completions and routing write."""

    def __init__(self, *, env, index: int, recs, steps, fast_forward: bool = True, total_tokens=None,
                 finish_s=None, engine_of=None, kv_per_gpu_divisor: int = 1):
        self.env, self.index, self.recs, self.fast_forward = env, index, recs, fast_forward
        self.steps: StepRecords = steps  # (typed: compiled, each step's row is a native call)
        self.total_tokens = recs.total_tokens if total_tokens is None else total_tokens
        self.finish_s = recs.finish_s if finish_s is None else finish_s
        self.engine_of = recs.engine if engine_of is None else engine_of
        self.waiting: deque = deque()
        self.outstanding_tokens = 0  # prompt + output of unfinished requests routed here
        self.outstanding_requests = 0
        self.finish_hooks: list = []  # f(pos) after each completion (the cluster's, a policy's)
        self.idle = Wakeup(env)
        self.proc: Any = None  # the engine's simpy process (set by the engine kind)
        self._stretch: Stretch | None = None  # the decode stretch in progress, while it may be cut short
        self._codes: dict = {}  # mode name -> its code in the step records
        self._queued: Any = None  # () -> requests queued where the policy queues them (rows' `waiting`)
        # rows' KV in one GPU's DP-token equivalents: a Flying TP group of k units reports its TP tokens / k
        self.kv_per_gpu_divisor = kv_per_gpu_divisor

    # ---- accept / complete ------------------------------------------------------------------
    def add_finish_hook(self, fn) -> None:
        self.finish_hooks.append(fn)

    def report_queue(self, queued) -> None:
        """Step rows' `waiting` is `queued()` (a policy's pool queue), not this engine's own queue."""
        self._queued = queued

    def accept(self, pos: int) -> None:
        """Request `pos` is routed here (queued, or its decode KV reserved)."""
        self.outstanding_tokens += self.total_tokens[pos]
        self.outstanding_requests += 1
        self.engine_of[pos] = self.index

    def leave(self, pos: int) -> None:
        """Request `pos` is no longer this engine's (finished, or withdrawn by its policy)."""
        self.outstanding_tokens -= self.total_tokens[pos]
        self.outstanding_requests -= 1

    def complete(self, pos: int, generated, now: float = -1.0) -> None:  # (untyped: numpy ints from records)
        """Request `pos` ends here now (`now`: the caller's clock, else simpy's) with `generated` tokens (finish
        hooks: `report`)."""
        recs = self.recs
        if now < 0.0:
            now = self.env.now
        self.finish_s[pos] = now
        if self.finish_s is not recs.finish_s and generated >= recs.output_tokens[pos]:
            recs.finish_s[pos] = now  # (a prefill instance's request with nothing left to decode ends here)
        recs.generated[pos] = generated
        self.leave(pos)

    def report(self, finished) -> None:
        """Tell the finish hooks of the requests that completed, in order."""
        for pos in finished:
            for hook in self.finish_hooks:
                hook(pos)

    # ---- sleep ------------------------------------------------------------------------------
    @property
    def in_stretch(self) -> bool:
        """A closed-form decode stretch is in progress and may still be cut short."""
        return self._stretch is not None and self._stretch.live

    def cut(self, at_boundary: bool = True) -> None:
        """End the decode stretch in progress after its current step (a request arrived, a policy re-plans)."""
        if self._stretch is not None:
            cut_stretch(self.env, self.proc, self._stretch, at_boundary)

    def sleep_stretch(self, st: Stretch):
        """The decode stretch `st` (steps of n sequences, each c0 + c1 x keys seconds) in one timeout, cut
        short by `cut`: a simpy generator (`ended = yield from engine.sleep_stretch(st)`) returning how it
        ended (a StretchEnd). (No generator of its own: one level less per resume; a stretch that ended is
        no longer `live`, so `in_stretch` needs no reset.)"""
        self._stretch = st
        return sleep_stretch(self.env, st, st.duration_s())

    # ---- record -----------------------------------------------------------------------------
    def mode_code(self, mode: str) -> float:
        """The step records' code of mode `mode` (registered on first use)."""
        code = self._codes.get(mode)
        if code is None:
            code = self._codes[mode] = self.steps.mode_code(mode)
        return code

    def record(self, *, start_s: float, duration_s: float, mode: str, steps: int, agg, kv_used_tokens: float,
               switch_s: float = 0.0) -> None:
        """One step row (or a stretch's: `steps` of them, `agg` its first step's aggregates)."""
        self.record_step(start_s, duration_s, mode, steps, agg, kv_used_tokens, switch_s)

    def record_step(self, start_s, duration_s, mode, steps, agg, kv_used_tokens, switch_s=0.0) -> None:
        """`record` with positional arguments (the engine loop's path, once per step)."""
        code = self._codes.get(mode)
        if code is None:
            code = self.mode_code(mode)
        waiting = self._queued() if self._queued is not None else len(self.waiting)
        div = self.kv_per_gpu_divisor
        self.steps.add_row(start_s, duration_s, self.index, code, steps, agg,
                           kv_used_tokens / div if div != 1 else kv_used_tokens, waiting, switch_s)
