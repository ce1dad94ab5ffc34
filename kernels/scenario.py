"""Deterministic request scripts: the steps (batches) every strategy and the reference replay.

Token ids come from a generator seeded per request, never from sampled logits, so every rank
and the single-device model see the same inputs whatever the numerics (no argmax ties).
"""
from __future__ import annotations

import dataclasses

import torch

from .kvcache import TokenBatch


@dataclasses.dataclass(frozen=True)
class Request:
    """`prompt` tokens prefilled at step `arrive`, then `decode` single-token steps; it sits
    out the steps in `paused` (a scheduler's phase separation or preemption)."""

    sid: int
    prompt: int
    decode: int
    arrive: int = 0
    paused: tuple = ()


def token_ids(req: Request, vocab: int, seed: int) -> torch.Tensor:
    """The prompt followed by the decode-step inputs of one request."""
    gen = torch.Generator().manual_seed(seed * 100003 + req.sid)
    return torch.randint(0, vocab, (req.prompt + req.decode,), generator=gen)


def script(requests, vocab: int, seed: int = 0) -> list[TokenBatch]:
    """Continuous batching: each step holds the arrived, unpaused, unfinished requests; a
    request's first step is its whole prompt, later steps one token each."""
    toks = {r.sid: token_ids(r, vocab, seed) for r in requests}
    done = {r.sid: 0 for r in requests}  # tokens consumed
    steps, t = [], 0
    while any(done[r.sid] < r.prompt + r.decode for r in requests):
        ids, lens, parts = [], [], []
        for r in requests:
            if t < r.arrive or t in r.paused or done[r.sid] >= r.prompt + r.decode:
                continue
            n = r.prompt if done[r.sid] == 0 else 1
            ids.append(r.sid), lens.append(n), parts.append(toks[r.sid][done[r.sid]:done[r.sid] + n])
            done[r.sid] += n
        if ids:
            steps.append(TokenBatch(tuple(ids), tuple(lens), torch.cat(parts)))
        t += 1
        if t > 10_000:
            raise ValueError("request script does not terminate")
    return steps


# Prefill of 3 variable-length prompts (22 tokens), decodes of 3, 2 and 1 sequences (steps
# smaller than SP), a 10-token prompt joining mid-generation (step 4: 12 tokens), 10 decode steps
# for request 0. With a threshold of 8 tokens Shift runs SP, TP x3, SP, TP x6.
MIXED = (Request(0, 7, 10), Request(1, 12, 6), Request(2, 3, 3), Request(3, 10, 4, arrive=4))

# Even token counts in every step (EP with TP splits the MoE tokens evenly over TP ranks).
EVEN = (Request(0, 8, 9), Request(1, 12, 9), Request(2, 6, 3, arrive=3), Request(3, 4, 3, arrive=3))


def seesaw(prompt_step: int = 5) -> tuple:
    """Seesaw's phases: a prefill-only step, decodes, and a prefill-only step of a joining request
    (the running ones sit it out) followed by more decodes."""
    return (Request(0, 9, 10, paused=(prompt_step,)), Request(1, 12, 8, paused=(prompt_step,)),
            Request(2, 5, 3), Request(3, 11, 4, arrive=prompt_step))


def dp_requests(engines: int) -> tuple:
    """Two requests per DP engine of different lengths."""
    return tuple(Request(i, 4 + 3 * i, 9 - (i % 3), arrive=i // engines) for i in range(2 * engines))
