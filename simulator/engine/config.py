"""EngineConfig: the scheduler knobs of one simulated engine, vLLM v1's defaults documented."""
from __future__ import annotations

import dataclasses

from perfmodel.knobs import KV_BLOCK_TOKENS

SCHEDULE_ORDERS = ("decode-first", "prefill-first")
# vLLM's CacheConfig.block_size choices, as of the vLLM 0.9 the framework constants describe
# (vllm/config.py: BlockSize = Literal[1, 8, 16, 32, 64, 128]; later releases, vllm/config/cache.py, add 256).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)


@dataclasses.dataclass(frozen=True, slots=True)
class EngineConfig:
    """Continuous-batching settings (vLLM v1 names). None = the hardware's vLLM default
    (perfmodel.framework.vllm_default_limits: 8192 tokens / 1024 seqs on >= 70 GiB GPUs)."""

    max_num_batched_tokens: int | None = None  # token budget of one step
    max_num_seqs: int | None = None  # running sequences at most
    enable_chunked_prefill: bool = True  # vLLM v1: on; off = a prompt must fit the budget whole
    block_size: int = KV_BLOCK_TOKENS  # KV block in tokens (vLLM's default on CUDA)
    schedule_order: str = "decode-first"  # v1: running requests (decodes) first, then waiting
    max_waiting: int = 0  # admission cap: reject arrivals when this many wait (0 = unlimited)
    priority_scheduling: bool = False  # serve waiting requests by (priority, arrival) not FCFS
    # admit a waiting request only if its whole prompt (+ tokens to recompute) fits the free blocks,
    # not just its first chunk: later vLLM's --scheduler-reserve-full-isl (default on there), which
    # stops chunked prefill over-admitting and then preempting under KV pressure. Off = vLLM 0.9,
    # the version the framework constants describe.
    reserve_full_prompt: bool = False
    fast_forward: bool = True  # advance decode-only stretches in closed form
    # longest request (prompt + output) served; longer ones are rejected with reason context_length.
    # None: the model's (ModelSpec.max_model_len); a value above it is refused, as vLLM does
    max_model_len: int | None = None
    # vLLM v1's automatic prefix caching (on by default): acts on requests carrying trace block
    # hashes (Workload.requests' prefix_blocks, e.g. Mooncake's hash_ids); others never hit
    enable_prefix_caching: bool = True

    def __post_init__(self):
        if self.schedule_order not in SCHEDULE_ORDERS:
            raise ValueError(f"schedule_order={self.schedule_order!r}: one of {', '.join(SCHEDULE_ORDERS)}")
        for f in ("max_num_batched_tokens", "max_num_seqs"):
            v = getattr(self, f)
            if v is not None and v < 1:
                raise ValueError(f"{f}={v} must be >= 1")
        if self.block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size={self.block_size}: vLLM allows {', '.join(map(str, BLOCK_SIZES))}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len={self.max_model_len} must be >= 1")
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting={self.max_waiting} must be >= 0")
