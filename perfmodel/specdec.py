"""Speculative decoding with MTP / EAGLE-style draft heads, as the DeepSeek deployments run it.

DeepSeek-V3's MTP module (arXiv 2412.19437 section 2.2) is one transformer block plus the shared embedding
and output head; TRT-LLM runs it `num_nextn_predict_layers` times per step (d draft tokens), SGLang as EAGLE
with `speculative-num-steps` drafts (topk 1: a chain). One decode step of n requests then:
  drafts: d passes of the draft block over n rows, each ~ (1 block + the head) of the target's c0
      (c0 / num_layers per block; the head costs about one more block at decode), its attention reading
      one layer's keys,
  verify: the target over n x (1 + d) rows (every weight read once, (1 + d) x the GEMM rows); attention
      reads each request's keys once (decode attention is bound by reading the KV, not by its queries),
  emits on average T(d, p) = 1 + p + ... + p^d tokens per request (a draft counts if it and every draft
      before it is accepted; the verify step always yields one token of its own), p = the acceptance
      probability of a draft whose predecessors were accepted.
The simulator advances a speculative decode pool one token at a time at the per-token cost
(step / T): means (TTFT, TPOT, throughput) are those of whole steps; step counts are T x too many.

`MTP_ACCEPTANCE` is fitted (docs/fidelity.md, fitted constants): sa-bench's random-token prompts, DeepSeek-R1
fp8 on H100, TRT-LLM (simulator/apps/validate/recipes.py says which rows ran which recipe).
"""
from __future__ import annotations

import dataclasses

from .batch import DecodeAffine

# acceptance of a draft token given its predecessors were accepted: fitted on the TRT-LLM DeepSeek-R1 TEP16
# rows (H100) where a plain and an MTP-3 recipe of the same shape ran at one concurrency: their TPOT ratio,
# in which the base step cost cancels (benchmarks/fit_mtp_acceptance.py prints the fit: 0.50 ... 0.80 tried,
# 0.65 best, median ratio error 3.7%; 4.7% before the routing-skew MoE tables); the MTP-only rows and the SGLang EAGLE rows are held out
# It is a property of the workload as much as of the model: sa-bench's prompts are random tokens. On real text
# DeepSeek-V3's MTP accepts its second token 85-90% of the time (arXiv 2412.19437, section 5.4.3): pass
# mtp_acceptance for a workload of real text.
MTP_ACCEPTANCE = 0.65


@dataclasses.dataclass(frozen=True)
class SpecDecode:
    """d draft tokens per step, each accepted with probability p once its predecessors were."""

    draft_tokens: int
    acceptance: float = MTP_ACCEPTANCE

    def __post_init__(self):
        if self.draft_tokens < 1:
            raise ValueError(f"speculative decoding needs >= 1 draft token, got {self.draft_tokens}")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ValueError(f"draft acceptance must be in [0, 1], got {self.acceptance}")

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a request emits per verify step: 1 + p + ... + p^d."""
        return sum(self.acceptance ** i for i in range(self.draft_tokens + 1))


def per_token_affine(table, n: int, sd: SpecDecode, num_layers: int, rank_tokens=None) -> DecodeAffine:
    """DecodeAffine(c0, c1) of one emitted token of n decoding requests reading K keys: (step) / T, step = drafts +
    verify (module docstring). `table` is the pool's StepTable (decode_affine); `rank_tokens`: None (equal
    load) or f(rows per request) -> the EP group's mean padded tokens per rank (StepTable.time_s's)."""
    load = rank_tokens or (lambda rows: None)
    c0_n, c1 = table.decode_affine(n, load(1))
    c0_verify, _ = table.decode_affine(n * (1 + sd.draft_tokens), load(1 + sd.draft_tokens))
    layers = max(num_layers, 1)
    draft = sd.draft_tokens * 2.0 * c0_n / layers  # d passes of (one block + the head) over n rows
    c1_step = c1 * (1.0 + sd.draft_tokens / layers)  # verify reads every layer's keys, each draft one layer's
    t = sd.tokens_per_step
    return DecodeAffine((c0_verify + draft) / t, c1_step / t)
