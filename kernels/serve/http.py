"""`python -m kernels.serve --http PORT`: an OpenAI-compatible server over the same serving loop.

    python -m kernels.serve --http 8000 --strategy tp --nproc 2 --model tiny [--out DIR]
    simulate replay --url http://127.0.0.1:8000 --trace T --out out/replayed   # then SIGINT the server

Rank 0 runs the loop of kernels/serve/loop.py unchanged (the simulator's scheduler, the step plan
broadcast to every rank, real collectives) with requests taken from HTTP instead of a trace:
an aiohttp app in its own process (kernels/serve/http_app.py, started by rank 0) sends each request
down a pipe; at the start of every tick the loop drains it (an idle loop waits on it, so a request
arriving at an idle server is scheduled at once), routes each request as the trace loop does, and
after each step sends every request's new tokens back in one message per tick; the app streams them
as SSE chunks, one chunk per token.

Endpoints: POST /v1/completions (`prompt`: text, whose token count is its whitespace-split words, as
simulate replay's synthetic prompt "hi hi ..." is built, or a list of token ids; `max_tokens` (16)
is the output length: the model never samples an EOS (token ids are seeded per request, as in the
trace loop; the text of each token is a placeholder), so `ignore_eos` holds either way; `stream`,
`stream_options.include_usage`); GET /v1/models; GET /health (200 once the ranks are warm: the port
is bound after warm-up). Not supported: n > 1, several prompts per request, cancelling a request
whose client went away (it runs to its end).

Stopping: SIGINT or SIGTERM to the launcher creates a stop file; rank 0 sees it (or the launcher gone)
within ~1 s, refuses new requests (503), finishes those in flight, and stops every rank; with --out
the launcher writes the run's files as the trace loop does (request times on rank 0's clock).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import sys
import tempfile
import time
import types
import urllib.request

import numpy as np
import pandas as pd

from simulator.engine.scheduler import Waiting
from simulator.results.records import RequestRecords

from .http_app import Server
from .loop import IDLE_TICK_S, Lead, serve

STOP_CHECK_S = 0.2  # how often rank 0 looks for the stop file / the launcher


@dataclasses.dataclass
class HttpOptions:
    host: str
    port: int
    model_name: str
    stop_file: str  # its existence asks rank 0 to stop (the launcher's signal handler creates it)
    parent_pid: int  # the launcher: gone (killed) -> stop too
    capacity: int = 1024  # request records allocated at first; doubled when full


class HttpWorkload:
    """The requests an HTTP run received, as a workload (.requests frame, .source, len)."""

    def __init__(self, requests: pd.DataFrame, source: str = "http"):
        self.requests, self.source = requests, source

    def __len__(self) -> int:
        return len(self.requests)

    @classmethod
    def served(cls, recs: RequestRecords, source: str = "http") -> HttpWorkload:
        return cls(pd.DataFrame({"request_id": recs.request_id, "arrival_s": recs.arrival_s,
                                 "input_tokens": recs.input_tokens, "output_tokens": recs.output_tokens,
                                 "priority": recs.priority}), source)


def empty_workload(n: int, source: str = "http") -> HttpWorkload:
    """A workload of n zero-length requests: the record arrays the HTTP requests are written into."""
    z = np.zeros(n, dtype=np.int64)
    return HttpWorkload(pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.zeros(n), "input_tokens": z,
                                      "output_tokens": z.copy(), "priority": z.copy()}), source)


def new_records(n: int) -> RequestRecords:
    """n empty request records, every array writable (pandas may hand out read-only views)."""
    r = RequestRecords(empty_workload(n))
    for k, v in vars(r).items():
        if isinstance(v, np.ndarray) and not v.flags.writeable:
            setattr(r, k, v.copy())
    return r


def resized(recs: RequestRecords, n: int) -> RequestRecords:
    """A copy of `recs` with n rows (the first min(n, len) copied; every per-request array alike)."""
    new, m = new_records(n), min(n, len(recs))
    for k, v in vars(recs).items():
        if isinstance(v, np.ndarray) and len(v) == len(recs):
            getattr(new, k)[:m] = v[:m]
        elif k == "total_tokens":
            new.total_tokens[:m] = v[:m]
        elif not isinstance(v, (np.ndarray, list)):
            setattr(new, k, v)
    return new


def serve_http(rank: int, world_size: int, cfg, opts: HttpOptions):
    """kernels.serve.loop.serve with rank 0's lead taking requests from HTTP (runs on every rank)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the launcher decides
    return serve(rank, world_size, cfg, make_lead=lambda c, n: HttpLead(c, n, opts))


class HttpLead(Lead):
    """Rank 0's lead for HTTP requests: records grow as requests come; tokens go back per step."""

    def __init__(self, cfg, n_eng: int, opts: HttpOptions):
        super().__init__(cfg, n_eng)
        self.opts, self.count, self.stopping, self.next_check = opts, 0, False, 0.0
        self.tickets: dict = {}  # request position -> the app's ticket id, until it completes
        self.sent: dict = {}  # request position -> tokens handed back so far
        self.out: list = []  # (ticket id, event, value) for the app, sent once per tick
        self._set_records(resized(self.recs, len(self.recs)))
        self.server = Server(opts, cfg.spec.max_model_len, self.t0, cfg.spec.vocab_size)
        self.server.start()
        print(f"kernels.serve: {cfg.strategy}, {n_eng} engine(s), ready at http://{opts.host}:{opts.port}/v1 "
              f"(model {opts.model_name!r}); SIGINT/SIGTERM stops", file=sys.stderr, flush=True)

    # ---- requests in -------------------------------------------------------------------------
    def _issue_due(self, t: float) -> None:
        if t >= self.next_check:
            self.next_check = t + STOP_CHECK_S
            if not self.stopping and (os.path.exists(self.opts.stop_file) or not _alive(self.opts.parent_pid)):
                self.stopping = True
                self.out.append((None, "stopping", None))  # the app answers new requests 503
        self._drain(0.0)

    def _drain(self, timeout_s: float) -> None:
        """Take every request the app has sent (waiting up to timeout_s for the first), answer them."""
        inbox = self.server.requests
        if inbox.poll(timeout_s):
            while inbox.poll():
                self._take(*inbox.recv())
        self._flush()

    def _take(self, tid: int, input_tokens: int, output_tokens: int, arrival_s: float) -> None:
        if self.count == len(self.recs):
            self._set_records(resized(self.recs, 2 * len(self.recs)))
        pos, r = self.count, self.recs
        self.count += 1
        r.arrival_s[pos] = r.issued_s[pos] = arrival_s  # open loop: issued when it arrived
        r.input_tokens[pos], r.output_tokens[pos] = input_tokens, output_tokens
        r.total_tokens[pos] = input_tokens + output_tokens
        if self._route(pos):
            self.tickets[pos], self.sent[pos] = tid, 0
            self.out.append((tid, "accepted", None))
        else:
            self.out.append((tid, "error", r.reject_reason[pos]))

    def _flush(self) -> None:
        if self.out:
            self.server.send(self.out)
            self.out = []

    def _set_records(self, r: RequestRecords) -> None:
        """Use records `r` (grown): the scheduler's view and the engines' fit test read them."""
        self.recs = r
        self.req = Waiting(r.input_tokens, r.output_tokens, r.generated, r.priority, r.arrival_s)
        for e in self.engines:
            e.recs = r

    def _finished(self) -> bool:
        return self.stopping and not self.server.requests.poll()

    def _idle(self) -> None:
        self._drain(IDLE_TICK_S)  # wake for a request at once, else after IDLE_TICK_S (the ranks hear a plan)

    # ---- tokens out --------------------------------------------------------------------------
    def apply(self, durations: dict) -> None:
        super().apply(durations)  # completions are handed back in _complete
        for i in durations:
            b = self.engines[i].batch
            for pos, gen in zip(b.idx, b.generated()):
                self._emit(pos, gen)
        self._flush()

    def _complete(self, e, at: list, now: float) -> None:
        done = [e.batch.idx[i] for i in at]
        super()._complete(e, at, now)
        for pos in done:
            self._emit(pos, int(self.recs.generated[pos]))
            self.sent.pop(pos)
            self.out.append((self.tickets.pop(pos), "done", None))

    def _emit(self, pos: int, generated: int) -> None:
        k = generated - self.sent[pos]  # (a preempted request recomputes: it sends nothing twice)
        if k > 0:
            self.sent[pos] = generated
            self.out.append((self.tickets[pos], "tokens", k))

    def result(self):
        self._flush()
        self.server.stop()
        self.recs = resized(self.recs, self.count)
        return super().result()


def wait_healthy(url: str, proc=None, timeout_s: float = 90.0) -> None:
    """Return once `url`/health answers 200 (a `kernels.serve --http` server: bound after warm-up);
    RuntimeError with its stderr tail if `proc` (its subprocess.Popen) exits first, TimeoutError after
    timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise RuntimeError(f"server exited ({proc.returncode}): {err}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url}/health not ready after {timeout_s} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def http_launch(a):
    """What cli.run_serve launches for --http (the world with rank 0 serving until SIGINT/SIGTERM,
    which the launcher turns into the stop file meanwhile); ValueError before any rank starts when
    aiohttp is missing or the port cannot be bound."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise ValueError("--http needs aiohttp: pip install 'parallelism-sim[replay]'") from None
    with socket.socket() as sock:  # a port in use: one error line now, not a rank's traceback after warm-up
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as aiohttp binds)
        try:
            sock.bind((a.host, a.http))
        except OSError as e:
            raise ValueError(f"--http {a.http}: cannot bind {a.host}:{a.http}: {e.strerror}") from None
    with tempfile.TemporaryDirectory(prefix="kernels-serve-") as d:
        opts = HttpOptions(a.host, a.http, a.served_model_name or a.model, os.path.join(d, "stop"), os.getpid())
        touch = lambda *_: open(opts.stop_file, "w").close()  # noqa: E731
        old = {s: signal.signal(s, touch) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            # (spawn's wait: poll() takes ms in an int32, so "never" is 10**6 s)
            yield types.SimpleNamespace(workload=empty_workload(opts.capacity, f"http://{a.host}:{a.http}"),
                                        fn=serve_http, args=(opts,), timeout_s=a.timeout or 10**6)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
