"""TRT-LLM's attention-DP balance as a pure rule (tensorrt_llm/_torch/pyexecutor/py_executor.py,
PyExecutor._schedule and _balance_adp_requests, stored snapshot 9521caf4; llm_args.py AttentionDpConfig @ fcd3f316:
enable_balance off, timeout_iters 50, batching_wait_iters 10 by default; docs/frameworks.md).

With attention DP and `attention_dp_config.enable_balance`, every rank all-gathers how many context and generation
requests its scheduler picked for the step; a rank with no request at all counts the dummy generation request
TRT-LLM pads it with before scheduling (_pad_attention_dp_dummy_request). Then, identically on every rank:
- every rank has a context request and a free slot (generation requests < max_batch_size): the waiting count
  restarts; if every rank also has a generation request, the context requests are held while the batching count
  is below batching_wait_iters (it grows by one), else they run and the batching count restarts;
- otherwise they are held and the waiting count grows by one, unless it reaches timeout_iters or some rank has
  no generation request: then they run and the waiting count restarts.
The count runs at every iteration some rank lacks a prompt, those where none has one too, and restarts when it
reaches the timeout: a prompt that finds the other ranks without one runs at the next such restart, 0 to
timeout_iters - 1 iterations later. Held, every rank's step runs its generation requests alone, so the ranks'
prefills start together instead of one rank's prompt stretching every rank's decode step (a lock-step tick lasts
as long as the slowest rank's step).
TRT-LLM holds a continuing prefill chunk too; the engines here keep such a chunk running (TRT-LLM's chunked
context is off by default, so the scripts this models have none).
"""
from __future__ import annotations

from typing import NamedTuple

from .batchwait import generation_requests


class Counts(NamedTuple):
    """What the balance's all-gather carries from one rank."""

    context: int  # context requests scheduled (admitted prompts, running prompts still prefilling)
    generation: int  # generation requests scheduled (batchwait.generation_requests)


def rank_counts(s, batch) -> Counts:
    """The counts of a rank whose scheduler picked `s` for its running `batch`."""
    gen = generation_requests(s, batch)
    kept = len(s.granted) - len(s.admitted)
    running = s.decoders + sum(1 for g in s.granted[s.decoders:kept] if g > 0)  # running requests granted tokens
    return Counts(len(s.admitted) + running - gen, gen)


IDLE = Counts(0, 1)  # a rank without requests while another has some: the dummy generation request


class Decision(NamedTuple):
    """One step's balance: whether it holds every rank's context requests, and the two counts after it."""

    held: bool
    waiting: int  # iterations some rank lacked a context request or a free slot (adp_ctx_waiting_iters_count)
    batching: int  # iterations every rank's were held for batching (adp_ctx_batching_wait_iters_count)


def hold(ranks: list, max_batch: int, timeout_iters: int, batching_wait_iters: int, waiting: int,
         batching: int) -> Decision:
    """The Decision for the ranks' Counts, their max_batch_size, and the two counts so far."""
    if all(r.context > 0 and r.generation < max_batch for r in ranks):
        if all(r.generation > 0 for r in ranks):
            if batching < batching_wait_iters:
                return Decision(True, 0, batching + 1)
            return Decision(False, 0, 0)
        return Decision(False, 0, batching)
    waiting += 1
    if waiting >= timeout_iters or not all(r.generation > 0 for r in ranks):
        return Decision(False, 0, batching)
    return Decision(True, waiting, batching)
