"""The HTTP side of `kernels.serve --http` (kernels/serve/http.py): an aiohttp app in its own process,
started by rank 0. POST /v1/completions parses the body into (prompt tokens, output tokens) and sends
(ticket id, prompt tokens, output tokens, arrival time) to rank 0 on a pipe; rank 0 sends back, once
per tick, a list of (ticket id, event, value) - "accepted" or "error", then "tokens" k per step, then
"done" - which the app turns into OpenAI-style SSE chunks; GET /v1/models, GET /health.

Why a process and not a thread of rank 0: a thread shares rank 0's GIL with the loop, and its SSE work
(one chunk per token) preempted the Python half of every step: the served run's steps were ~10%
slower than the same trace's in-process run (tests/test_kernels_serve_http.py). In its own process the
app competes only for a core. Times: arrival is `time.perf_counter() - t0` with rank 0's t0
(perf_counter is CLOCK_MONOTONIC on Linux: one clock for every process of the machine).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing as mp
import time
import uuid

TOKEN_TEXT = " x"  # every streamed token's text (no sampling: the ids are seeded, the text says nothing)
START_TIMEOUT_S = 60.0  # the app process: imports (spawn) and binding the port


def request_lengths(body: dict, model: str, vocab_size: int | None = None) -> tuple[int, int]:
    """(prompt tokens, output tokens) of a /v1/completions body; ValueError (HTTP 400) when unusable,
    with a message naming the field (as vLLM's 400s do). Token ids must lie in [0, vocab_size) where
    the vocabulary is known; temperature >= 0 and top_p in (0, 1] (vLLM's SamplingParams rules), though
    this server samples nothing (token ids are seeded per request)."""
    if not isinstance(body, dict):
        raise ValueError(f"request body: a JSON object, got a JSON {_json_kind(body)}")
    if body.get("model") not in (None, model):
        raise LookupError(f"The model `{body.get('model')}` does not exist (this server serves `{model}`).")
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # one prompt in a batch of one
    if isinstance(p, str):
        n_in = len(p.split())  # simulate replay's prompt: a word per token
    elif isinstance(p, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        n_in = len(p)
        bad = [x for x in p if x < 0 or (vocab_size is not None and x >= vocab_size)]
        if bad:
            raise ValueError(f"prompt: token id {bad[0]} out of vocabulary [0, {vocab_size or 'vocab_size'})")
    else:
        raise ValueError("prompt: one text or one list of token ids (several prompts per request: not supported)")
    n_out = body.get("max_tokens", 16)
    if not isinstance(n_out, int) or isinstance(n_out, bool) or n_out < 1:
        raise ValueError(f"max_tokens: a positive integer, got {n_out!r}")
    if n_in < 1:
        raise ValueError("prompt: empty")
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise ValueError("n / best_of > 1: not supported")
    if not isinstance(body.get("stream_options") or {}, dict) or not isinstance(body.get("stream", False), bool):
        raise ValueError("stream: true or false; stream_options: an object")
    for key, ok, rule in (("temperature", lambda v: v >= 0, ">= 0"), ("top_p", lambda v: 0 < v <= 1, "in (0, 1]")):
        v = body.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not ok(v)):
            raise ValueError(f"{key}: a number {rule}, got {v!r}")
    return n_in, n_out


def _json_kind(v) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(v), "null")


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def _error(status: int, msg: str):
    from aiohttp import web

    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return web.json_response({"error": {"message": msg, "type": kind, "code": status}}, status=status)


class Server:
    """Rank 0's handle on the app process: `requests` (its end of the request pipe: poll/recv) and
    `send(events)` (one list of (ticket id, event, value) per tick; ticket None: "stopping")."""

    def __init__(self, opts, max_model_len: int, t0: float, vocab_size: int | None = None):
        ctx = mp.get_context("spawn")  # (fork would copy rank 0's gloo threads' state)
        self.requests, req_send = ctx.Pipe(duplex=False)
        ev_recv, self.events = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=run_app, args=(opts, max_model_len, t0, req_send, ev_recv, vocab_size),
                                name="kernels.serve.http", daemon=True)

    def start(self) -> None:
        self.proc.start()
        if not self.requests.poll(START_TIMEOUT_S):
            self.proc.kill()
            raise RuntimeError(f"http server: not ready after {START_TIMEOUT_S:.0f} s")
        kind, msg = self.requests.recv()
        if kind != "ready":
            self.proc.join(5)
            raise RuntimeError(f"http server: {msg}")

    def send(self, events: list) -> None:
        self.events.send(events)

    def stop(self) -> None:
        self.events.send("shutdown")
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


def run_app(opts, max_model_len: int, t0: float, req_send, ev_recv, vocab_size: int | None = None) -> None:
    """The app process: serve until rank 0 sends "shutdown"."""
    App(opts, max_model_len, t0, req_send, ev_recv, vocab_size).run()


class App:
    def __init__(self, opts, max_model_len: int, t0: float, req_send, ev_recv, vocab_size: int | None = None):
        self.opts, self.max_model_len, self.t0, self.vocab_size = opts, max_model_len, t0, vocab_size
        self.req_send, self.ev_recv = req_send, ev_recv
        self.queues: dict = {}  # ticket id -> asyncio.Queue of (event, value), until "done" or "error"
        self.ids, self.stopping = itertools.count(), False

    def run(self) -> None:
        from aiohttp import web

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_get("/health", lambda _r: web.json_response({"status": "ok"}))
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        runner = web.AppRunner(app, access_log=None)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, self.opts.host, self.opts.port).start())
        except OSError as e:
            self.req_send.send(("failed", f"{self.opts.host}:{self.opts.port}: {type(e).__name__}: {e}"))
            return
        self.done = loop.create_future()
        loop.add_reader(self.ev_recv.fileno(), self._on_events)
        self.req_send.send(("ready", None))
        loop.run_until_complete(self.done)
        loop.remove_reader(self.ev_recv.fileno())
        loop.run_until_complete(runner.cleanup())
        loop.close()

    def _on_events(self) -> None:
        """rank 0's events, read as they come (the pipe's fd is in the event loop's selector)."""
        try:
            while self.ev_recv.poll():
                msg = self.ev_recv.recv()
                if msg == "shutdown":
                    self.done.done() or self.done.set_result(None)
                    return
                for tid, kind, value in msg:
                    if tid is None:
                        self.stopping = True
                    elif tid in self.queues:
                        self.queues[tid].put_nowait((kind, value))
        except (EOFError, OSError):  # rank 0 is gone: nothing more will come
            self.done.done() or self.done.set_result(None)

    async def models(self, _request):
        from aiohttp import web

        m = {"id": self.opts.model_name, "object": "model", "created": int(time.time()), "owned_by": "kernels.serve",
             "max_model_len": int(self.max_model_len)}
        return web.json_response({"object": "list", "data": [m]})

    async def completions(self, request):
        try:
            body = await request.json()
        except ValueError as e:  # JSONDecodeError (or a body that is not UTF-8)
            return _error(400, f"request body: not JSON ({e})")
        try:
            n_in, n_out = request_lengths(body, self.opts.model_name, self.vocab_size)
        except LookupError as e:
            return _error(404, str(e))
        except ValueError as e:
            return _error(400, str(e))
        except (TypeError, AttributeError):  # a field of a type no check above foresaw: no Python text to the client
            return _error(400, "request body: a field has the wrong type (see the OpenAI /v1/completions schema)")
        if self.stopping:
            return _error(503, "the server is shutting down")
        tid, events = next(self.ids), asyncio.Queue()
        self.queues[tid] = events
        self.req_send.send((tid, n_in, n_out, time.perf_counter() - self.t0))
        try:
            return await self._respond(request, body, events, n_in, n_out)
        finally:
            self.queues.pop(tid, None)

    async def _respond(self, request, body: dict, events: asyncio.Queue, n_in: int, n_out: int):
        from aiohttp import web

        kind, value = await events.get()
        if kind == "error":
            return _error(400, value)
        rid, created, name = f"cmpl-{uuid.uuid4().hex}", int(time.time()), self.opts.model_name
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        head = {"id": rid, "object": "text_completion", "created": created, "model": name}
        if not body.get("stream"):
            while (await events.get())[0] != "done":
                pass
            choice = {"index": 0, "text": TOKEN_TEXT * n_out, "logprobs": None, "finish_reason": "length"}
            return web.json_response({**head, "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        # one SSE event per token (a client counts token arrivals by chunk), built once: the last one
        # says finish_reason "length"
        chunk, last = (_sse({**head, "choices": [{"index": 0, "text": TOKEN_TEXT, "logprobs": None,
                                                  "finish_reason": f}]}) for f in (None, "length"))
        sent = 0
        while True:
            kind, k = await events.get()
            if kind == "done":
                break
            sent += k
            await resp.write(chunk * (k - 1) + (last if sent == n_out else chunk))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_sse({**head, "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
