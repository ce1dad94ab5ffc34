"""When a waiting request gets in during a decode stretch: SGLang's reservation shrinks as the batch decodes.

A decode stretch (engine/stretch.py) stands for steps that change nothing but the running requests' tokens. Under
vLLM's and TRT-LLM's admission rules the room a waiting request needs never grows while the batch decodes
(Engine._blocks_tail), so a queue refused at a stretch's first step stays refused to its end. SGLang's grows: it
reserves each running request's remaining output (clipped) x new_token_ratio (scheduler.reserved_blocks), and both
shrink with every decode step (the ratio decays: engine/ratio.py) while the blocks in use grow only by those the steps
open. Step by step, the first step whose room holds the queue's head admits it, so the stretch must end before that
step. Until 2026-12-03 it did not: a 13,500-token prompt queued behind one 4,000-token decode on 16,642 KV tokens
(SGLang, Llama-3.1-8B, one H100 at 22 GB) was admitted at 2.96 s step by step and at 22.1 s in closed form, when the
decode ended; under Flying Serving the fast path chose other engines (benchmarks/differential_fuzz.py --hbm-gb 22).

`first_admission` asks the scheduler's own check (scheduler.admit_waiting) at the state m steps on, computed without
changing anything: the free blocks less those m steps open, the remaining outputs at clock + m and the ratio decayed
m steps. Free blocks and the reservation both only fall with m, so a run of steps whose best case (its first step's
free blocks less its last step's reservation) cannot hold the head is skipped whole: a few dozen checks for a
stretch of thousands of steps, not one a step.
"""
from __future__ import annotations

from .batch import RunningBatch
from .ratio import NewTokenRatio
from .scheduler import Limits, Waiting, admission_order, admit_waiting, sglang_reserved_blocks

SCAN = 8  # steps checked one by one once a run of steps is this short


def _reserved(batch: RunningBatch, lim: Limits, ratio: NewTokenRatio, m: int) -> int:
    """scheduler.reserved_blocks under "sglang", m decode steps on."""
    return sglang_reserved_blocks(batch.output_left_after(lim.clip_output_tokens, m), ratio.value_after(m),
                                  lim.block_size)


def _admits_with(batch: RunningBatch, waiting, req: Waiting, lim: Limits, free: int, entering: int,
                 reserved: int) -> bool:
    """Whether a decoding batch's schedule admits a waiting request with `free` blocks free, `entering` of them taken
    by its decode step and `reserved` claimed: scheduler.schedule's paths for a decoding batch, prompts first
    (SGLang's: every running request waits) and then decodes first (the general path's, with every request a
    leading decoder, admits the same)."""
    n = len(batch.idx)
    if lim.prefill_first and admit_waiting([], n, waiting, req, lim, lim.budget, free, reserved=reserved) is not None:
        return True
    if n > lim.budget:  # (the general path grants the budget to the decoders in order: nothing is left)
        return False
    return admit_waiting([], n, waiting, req, lim, lim.budget - n, free - entering, True, None, reserved, n) is not None


def admits(batch: RunningBatch, waiting, req: Waiting, lim: Limits, free: int, ratio: NewTokenRatio, m: int) -> bool:
    """Whether the schedule after m >= 1 more decode steps of `batch` (every request decoding, none finishing,
    `free` blocks free now) admits a waiting request."""
    entering = batch.phase[(-(batch.clock + m)) % lim.block_size]  # blocks the step after them opens
    return _admits_with(batch, waiting, req, lim, free - batch.opened_blocks(m), entering,
                        _reserved(batch, lim, ratio, m))


def _head_blocks(waiting, req: Waiting, lim: Limits) -> int:
    """Blocks the queue's head claims under "sglang": prompt and recompute, plus its clipped output."""
    pos = admission_order(waiting, req, lim)[0]
    gen = int(req.generated[pos])
    out = int(req.output_tokens[pos]) - gen
    return -(-(int(req.input_tokens[pos]) + gen + min(out, lim.clip_output_tokens)) // lim.block_size)


def first_admission(batch: RunningBatch, waiting, req: Waiting, lim: Limits, free: int, ratio: NewTokenRatio,
                    k: int) -> int:
    """The steps a k-step decode stretch may run before a waiting request is admitted: the least m in [1, k) whose
    schedule after m steps admits one, else k. `waiting` is not empty; no prefix cache."""
    if not _admits_with(batch, waiting, req, lim, 1 << 62, 0, 0):  # not for want of KV (no seat, no budget, an
        return k  # unchunked prompt past it): no step of the stretch admits
    need = _head_blocks(waiting, req, lim)
    lo, hi = 1, k - 1
    stack = [(lo, hi)]  # runs of steps still to check, the earliest on top
    while stack:
        lo, hi = stack.pop()
        if lo > hi or need > free - batch.opened_blocks(lo) - _reserved(batch, lim, ratio, hi):
            continue  # (no step of the run can hold the head)
        if hi - lo < SCAN:
            for m in range(lo, hi + 1):
                if admits(batch, waiting, req, lim, free, ratio, m):
                    return m
            continue
        mid = (lo + hi) // 2
        stack.append((mid + 1, hi))
        stack.append((lo, mid))
    return k
