"""An engine's scheduler limits from the run's engine settings: one rule for the aggregated engines
(cluster/simulate.py), the disaggregated pools' engines (policies/disagg/policy.py, which the cluster
imports) and the real-kernel server (kernels/serve), so it sits below all of them."""
from __future__ import annotations

from .config import EngineConfig
from .scheduler import Limits


def engine_limits(cfg: EngineConfig, budget: int, max_seqs: int, pp: int) -> Limits:
    """Limits of an engine of pipeline depth pp (one request is in one batch: chunk_cap = budget)."""
    reserve = {"vllm": "prompt" if cfg.reserve_full_prompt else "chunk", "trtllm": "request",
               "sglang": "sglang"}[cfg.scheduler]
    return Limits(budget=budget * pp, chunk_cap=budget, max_seqs=max_seqs, block_size=cfg.block_size,
                  chunked_prefill=cfg.enable_chunked_prefill, reserve_full_prompt=cfg.reserve_full_prompt,
                  prefill_first=cfg.schedule_order == "prefill-first", priority=cfg.priority_scheduling,
                  reserve=reserve, clip_output_tokens=cfg.sglang_clip_max_new_tokens,
                  batch_wait_iters=cfg.batch_wait_timeout_iters,
                  batch_wait_tokens=cfg.batch_wait_max_tokens_ratio * budget)  # (TRT-LLM: ratio x max_num_tokens)
