"""TRT-LLM's batch waiting as a pure rule (tensorrt_llm/_torch/pyexecutor/py_executor.py, PyExecutor._schedule and
_waiting_requests; llm_args batch_wait_timeout_iters, batch_wait_max_tokens_ratio; docs/frameworks.md).

Without attention DP, when the context requests a step's scheduler picked meet running generation requests, TRT-LLM
evaluates: stop waiting if the iterations held so far reach the timeout, or if the context tokens (each request's
full prompt) plus one per generation request reach ratio x max_num_tokens. Stop: the prompts run and the count
restarts at 0. Else the step runs the generation requests alone and the count grows by one. A step with no
generation request runs its prompts and leaves the count as it is ("no need to wait, to avoid dead waiting").
(TRT-LLM adds each generation request's draft tokens; the engine loop does not see speculative drafts, so a run
combining --mtp with batch waiting counts one token per generation request.)
"""
from __future__ import annotations


def generation_requests(s, batch) -> int:
    """Running requests that schedule `s` keeps as generation requests: past their first token, one token each (a
    prompt chunk still prefilling is a context request in TRT-LLM)."""
    kept = len(s.granted) - len(s.admitted)
    if s.decode_running or kept == s.decoders:  # (every running request a decoder, or none running)
        return kept
    d, gbase, granted = batch.clock, batch.gbase, s.granted
    return s.decoders + sum(1 for i in range(s.decoders, kept) if granted[i] == 1 and gbase[i] + d > 0)


def hold(s, batch, lim, held_iters: int) -> tuple[bool, int]:
    """(whether the step holds the prompts `s` admits, the count of iterations held after this step) for an engine
    whose prompts were held `held_iters` iterations so far (Limits.batch_wait_iters / batch_wait_tokens)."""
    gen = generation_requests(s, batch)
    if not s.admitted or not gen:
        return False, held_iters
    tokens = sum(a.prompt + a.generated for a in s.admitted) + gen
    if held_iters >= lim.batch_wait_iters or tokens >= lim.batch_wait_tokens:
        return False, 0
    return True, held_iters + 1
