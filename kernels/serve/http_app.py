"""The HTTP side of `kernels.serve --http` (kernels/serve/http.py): an aiohttp app on its own event
loop in a thread of rank 0. POST /v1/completions parses the body into (prompt tokens, output tokens),
puts a Ticket on the lead's inbox, and turns the events the loop sends back ("accepted" or "error",
then "tokens" k per step, then "done") into OpenAI-style SSE chunks; GET /v1/models, GET /health.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid

TOKEN_TEXT = " x"  # every streamed token's text (no sampling: the ids are seeded, the text says nothing)


@dataclasses.dataclass
class Ticket:
    """One HTTP request on its way to the loop; events come back on `events` (the handler's loop)."""

    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    input_tokens: int
    output_tokens: int
    arrival_s: float  # rank 0's clock (the lead's now()) when the handler got it

    def push(self, *event) -> None:  # from the loop's thread
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)


def request_lengths(body: dict, model: str) -> tuple[int, int]:
    """(prompt tokens, output tokens) of a /v1/completions body; ValueError (HTTP 400) when unusable."""
    if body.get("model") not in (None, model):
        raise LookupError(f"The model `{body.get('model')}` does not exist (this server serves `{model}`).")
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # one prompt in a batch of one
    if isinstance(p, str):
        n_in = len(p.split())  # simulate replay's prompt: a word per token
    elif isinstance(p, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        n_in = len(p)
    else:
        raise ValueError("prompt: one text or one list of token ids (several prompts per request: not supported)")
    n_out = body.get("max_tokens", 16)
    if not isinstance(n_out, int) or isinstance(n_out, bool) or n_out < 1:
        raise ValueError(f"max_tokens: a positive integer, got {n_out!r}")
    if n_in < 1:
        raise ValueError("prompt: empty")
    if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise ValueError("n / best_of > 1: not supported")
    return n_in, n_out


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def _error(status: int, msg: str):
    from aiohttp import web

    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return web.json_response({"error": {"message": msg, "type": kind, "code": status}}, status=status)


class Server:
    """The aiohttp app on its own event loop in a thread of rank 0."""

    def __init__(self, opts: HttpOptions, lead):
        self.opts, self.lead = opts, lead
        self.ready, self.failed, self.stop_fut = threading.Event(), None, None
        self.thread = threading.Thread(target=self._run, name="kernels.serve.http", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(30)
        if self.failed or not self.ready.is_set():
            raise RuntimeError(f"http server on {self.opts.host}:{self.opts.port}: {self.failed or 'no start'}")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_fut.set_result, None)
        self.thread.join(10)

    def _run(self) -> None:
        from aiohttp import web

        self.loop = loop = asyncio.new_event_loop()
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
            self.failed = f"{type(e).__name__}: {e}"
            self.ready.set()
            return
        self.stop_fut = loop.create_future()
        self.ready.set()
        loop.run_until_complete(self.stop_fut)
        loop.run_until_complete(runner.cleanup())
        loop.close()

    async def models(self, _request):
        from aiohttp import web

        m = {"id": self.opts.model_name, "object": "model", "created": int(time.time()), "owned_by": "kernels.serve",
             "max_model_len": int(self.lead.cfg.spec.max_model_len)}
        return web.json_response({"object": "list", "data": [m]})

    async def completions(self, request):
        from aiohttp import web

        try:
            body = await request.json()
            n_in, n_out = request_lengths(body, self.opts.model_name)
        except LookupError as e:
            return _error(404, str(e))
        except (ValueError, TypeError, AttributeError) as e:  # (JSONDecodeError is a ValueError)
            return _error(400, str(e))
        if self.lead.stopping:
            return _error(503, "the server is shutting down")
        tk = Ticket(asyncio.get_running_loop(), asyncio.Queue(), n_in, n_out, self.lead.now())
        self.lead.inbox.put(tk)
        kind, *rest = await tk.events.get()
        if kind == "error":
            return _error(400, rest[0])
        rid, created, name = f"cmpl-{uuid.uuid4().hex}", int(time.time()), self.opts.model_name
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        head = {"id": rid, "object": "text_completion", "created": created, "model": name}
        if not body.get("stream"):
            while (await tk.events.get())[0] != "done":
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
            kind, *rest = await tk.events.get()
            if kind == "done":
                break
            k = rest[0]
            sent += k
            await resp.write(chunk * (k - 1) + (last if sent == n_out else chunk))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_sse({**head, "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
