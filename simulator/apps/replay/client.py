"""Asynchronous trace replay against an OpenAI-compatible server (`POST /v1/completions`, stream=true).

Each trace request becomes one streamed completion: a synthetic prompt of the trace's input length
(`prompt_word` repeated; how many tokens that is depends on the server's tokenizer, so the server's
`usage.prompt_tokens` is kept beside the trace's count), `max_tokens` = the trace's output length with
`ignore_eos: true` (vLLM's and SGLang's sampling extension) so the output length is forced. As in
vLLM's benchmark client (vllm/benchmarks/lib/endpoint_request_func.py), every streamed chunk carrying
`choices` is one token arrival: the first one gives TTFT, the later ones the inter-token gaps; the
usage chunk (`stream_options.include_usage`) gives the token counts.

Sending: open loop at the trace's timestamps times `time_scale` (or all at t=0 with
`ignore_timestamps`), and with `max_concurrency` at most that many requests in flight: a request
that arrives while all slots are busy is sent when one frees (its `issued_s` is then later than its
`arrival_s`, as the simulator's closed loop records it).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import aiohttp


@dataclasses.dataclass
class Outcome:
    """One request as the client saw it; times are time.perf_counter() seconds."""

    index: int
    issued: float = float("nan")
    first_token: float = float("nan")
    finish: float = float("nan")
    token_times: list = dataclasses.field(default_factory=list)  # every chunk with choices
    prompt_tokens: int | None = None  # usage.prompt_tokens (None: the server did not say)
    completion_tokens: int | None = None  # usage.completion_tokens
    error: str = ""

    @property
    def generated(self) -> int:
        """Output tokens: the server's count, else the token arrivals seen."""
        return self.completion_tokens if self.completion_tokens is not None else len(self.token_times)

    @property
    def ok(self) -> bool:
        return not self.error and self.generated > 0 and bool(self.token_times)


def synthetic_prompt(tokens: int, word: str = "hi") -> str:
    """`word` repeated `tokens` times, space separated (one token a word for common BPE tokenizers,
    plus whatever the server's chat-free template adds, e.g. a BOS token)."""
    return " ".join([word] * max(int(tokens), 1))


def payload(model: str, input_tokens: int, output_tokens: int, word: str = "hi") -> dict:
    """The completion request of one trace row. A prefill-only row (0 output tokens) asks for 1 token: an
    OpenAI server refuses max_tokens 0 (vLLM's SamplingParams: "max_tokens must be at least 1"), and
    the one token comes out of the prefill step itself (records.replay_frame records it as 0 tokens)."""
    return {"model": model, "prompt": synthetic_prompt(input_tokens, word), "max_tokens": max(1, int(output_tokens)),
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}


async def stream_one(session: aiohttp.ClientSession, url: str, body: dict, out: Outcome) -> Outcome:
    """POST one streamed completion and fill `out` (errors are recorded, never raised)."""
    out.issued = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200].replace("\n", " ")
                out.error = f"HTTP {resp.status}: {text}"
                return out
            async for raw in resp.content:
                line = raw.strip()
                if not line or not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    out.error = f"bad stream chunk: {data[:80]!r}"
                    return out
                if chunk.get("error"):
                    out.error = f"server error: {str(chunk['error'])[:200]}"
                    return out
                if chunk.get("choices"):
                    if not out.token_times:
                        out.first_token = now
                    out.token_times.append(now)
                usage = chunk.get("usage")
                if usage:
                    out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
                    out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)
            out.finish = out.token_times[-1] if out.token_times else time.perf_counter()
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        out.error = f"{type(e).__name__}: {e}"[:300]
    if not out.error and not out.token_times:
        out.error = "no tokens streamed"
    return out


async def fetch_model(base_url: str, timeout_s: float = 10.0) -> str:
    """The first model id the server lists at /v1/models."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.get(base_url.rstrip("/") + "/v1/models") as resp:
                if resp.status != 200:
                    raise ValueError(f"{base_url}/v1/models answered HTTP {resp.status}; give --model")
                data = await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{base_url}/v1/models: {type(e).__name__}: {e} (is the server up? or give --model)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{base_url}/v1/models: not a model list; give --model")
    models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    if not models:
        raise ValueError(f"{base_url}/v1/models lists no model; give --model")
    return str(models[0])


async def replay(base_url: str, model: str, arrivals, inputs, outputs, *, max_concurrency: int = 0,
                 time_scale: float = 1.0, ignore_timestamps: bool = False, word: str = "hi",
                 timeout_s: float = 6 * 3600, progress=None) -> tuple[float, list[Outcome]]:
    """(t0, outcomes in trace order): request i is sent at t0 + arrivals[i] * time_scale (t0 with
    ignore_timestamps), once a slot is free when max_concurrency > 0. `progress()` hears each end."""
    url = base_url.rstrip("/") + "/v1/completions"
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency > 0 else None
    connector = aiohttp.TCPConnector(limit=max_concurrency if max_concurrency > 0 else 0)
    outcomes = [Outcome(i) for i in range(len(arrivals))]
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            delay = 0.0 if ignore_timestamps else float(arrivals[i]) * time_scale
            wait = t0 + delay - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            body = payload(model, inputs[i], outputs[i], word)
            if sem is None:
                await stream_one(session, url, body, outcomes[i])
            else:
                async with sem:
                    await stream_one(session, url, body, outcomes[i])
            if progress is not None:
                progress()

        await asyncio.gather(*(one(i) for i in range(len(arrivals))))
    return t0, outcomes
