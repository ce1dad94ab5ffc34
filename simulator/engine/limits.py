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
    return Limits(budget * pp, budget, max_seqs, cfg.block_size, cfg.enable_chunked_prefill,
                  cfg.reserve_full_prompt, cfg.schedule_order == "prefill-first", cfg.priority_scheduling, reserve,
                  cfg.sglang_clip_max_new_tokens)
