"""Router outputs for the fused-MoE microbenchmark: the routing skews aiconfigurator's MoE tables are measured
under, so that the moe suite's rows and the package's fit the same way (calibration/moe.py ROUTINGS).

Ported from aiconfigurator's collector (Apache-2.0; collector/helper.py `balanced_logits`,
`_generate_power_law_distribution`, `power_law_logits_v3`; collector/vllm/collect_moe.py): tokens per expert are
drawn from a power law x^-alpha (alpha 1.2: its generic MoE family, 1.01: DeepSeek / Kimi), rounded to exactly
num_tokens x topk assignments, and the EP rank with the most assignments is swapped to rank 0, the GPU the
suite measures (it holds experts 0 .. E/ep - 1). Pure torch on the CPU, seeded: the same rows every run.
"""
from __future__ import annotations

import math

import torch

from .shapes import routing_alpha


def power_law_counts(num_tokens: int, num_experts: int, topk: int, ep: int, alpha: float,
                     gen: torch.Generator) -> torch.Tensor:
    """(num_experts,) int64 assignments per expert, summing to num_tokens x topk, the busiest EP rank's experts
    first (rank 0 holds experts 0 .. num_experts/ep - 1)."""
    lo, hi = (1.0, num_tokens * 0.8) if num_tokens * topk > num_experts else (0.01, 2.0)
    u = torch.rand(num_experts, generator=gen, dtype=torch.float64)
    a = 1.0 - alpha
    x = ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)  # inverse CDF of x^-alpha on [lo, hi]
    target = num_tokens * topk
    counts = torch.round(x / x.sum() * target).to(torch.int64)
    delta = target - int(counts.sum())
    order = torch.argsort(counts, descending=True)
    for i in range(abs(delta)):  # rounding: add to the largest counts, take from the smallest non-zero ones
        e = order[i % num_experts] if delta > 0 else order[-(i % num_experts) - 1]
        if delta < 0 and counts[e] == 0:
            e = torch.argmax(counts)
        counts[e] += 1 if delta > 0 else -1
    per_rank = counts.view(ep, num_experts // ep)
    busiest = int(torch.argmax(per_rank.sum(1)))
    per_rank[[0, busiest]] = per_rank[[busiest, 0]]  # (view: swaps the experts' counts in `counts`)
    return counts


def _assignments(counts: torch.Tensor, num_tokens: int, topk: int) -> torch.Tensor:
    """(num_tokens, topk) expert ids: experts by count, most first, dealt column-major (token t's j-th choice
    is assignment j * num_tokens + t), as the collector does."""
    order = torch.argsort(counts, descending=True, stable=True)
    flat = torch.repeat_interleave(order, counts[order])
    return flat.view(topk, num_tokens).t()


def _balanced(num_tokens: int, num_experts: int, topk: int) -> torch.Tensor:
    """(num_tokens, topk) expert ids spread evenly: token t's i-th choice (t + i * stride) mod E."""
    stride = math.ceil(num_experts / topk)
    t = torch.arange(num_tokens, dtype=torch.float64)[:, None]
    i = torch.arange(topk, dtype=torch.float64)[None, :]
    first = t if num_tokens >= stride else torch.floor(t * stride / num_tokens)
    return ((first + i * stride) % num_experts).to(torch.int64)


def route(num_tokens: int, num_experts: int, topk: int, ep: int, distribution: str,
          gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights (n, topk) float32, topk_ids (n, topk) int32) of one router call under `distribution`
    ('balanced', 'power_law_<alpha>'), what vLLM's router hands fused_experts. As in the collector the picks
    become router logits (softmax of the per-expert hit counts) and the top-k of those are taken, so a token
    dealt one expert twice picks another."""
    alpha = routing_alpha(distribution)
    picks = (_balanced(num_tokens, num_experts, topk) if alpha is None
             else _assignments(power_law_counts(num_tokens, num_experts, topk, ep, alpha, gen), num_tokens, topk))
    hits = torch.zeros(num_tokens, num_experts).scatter_add_(1, picks, torch.ones(picks.shape))  # (n, E)
    weights, ids = torch.topk(torch.softmax(hits, dim=-1), topk, dim=-1)
    return torch.softmax(weights, dim=-1), ids.to(torch.int32)
