"""EngineConfig: the scheduler knobs of one simulated engine, vLLM v1's defaults documented."""
from __future__ import annotations

import dataclasses

from perfmodel.knobs import KV_BLOCK_TOKENS

SCHEDULE_ORDERS = ("decode-first", "prefill-first")
# which DP engines step together (simulator/engine/lockstep.py): "ep" the attention-DP ranks of one
# expert-parallel MoE (their all_to_all couples every step), "all" every DP engine of a static policy
# (the reference serving loop kernels.serve ticks its replicas together), "off" none
LOCKSTEPS = ("ep", "all", "off")
# admission/eviction rule of each serving framework (engine/scheduler.py's Limits.reserve says what each does)
SCHEDULERS = ("vllm", "sglang", "trtllm")
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
    dp_lockstep: str = "ep"  # LOCKSTEPS: which DP engines step in lock-step ticks
    # longest request (prompt + output) served; longer ones are rejected with reason context_length.
    # None: the model's (ModelSpec.max_model_len); a value above it is refused, as vLLM does
    max_model_len: int | None = None
    # vLLM v1's automatic prefix caching (on by default): acts on requests carrying trace block
    # hashes (Workload.requests' prefix_blocks, e.g. Mooncake's hash_ids); others never hit
    enable_prefix_caching: bool = True
    # whose scheduler: vllm (recompute preemption), trtllm (GUARANTEED_NO_EVICT: a request is admitted
    # only when its whole KV fits beside the running ones' full reservations), sglang (new-token-ratio
    # admission, retraction when the KV runs out). docs/frameworks.md cites each rule
    scheduler: str = "vllm"
    # SGLang's new_token_ratio: starts at init, decays linearly to min over decay_steps decode steps,
    # and after a retraction restarts from the ratio retract_decode computes (scheduler.py, 0.5.1)
    sglang_init_new_token_ratio: float = 0.7
    sglang_min_new_token_ratio: float = 0.098
    sglang_new_token_ratio_decay_steps: int = 600
    sglang_clip_max_new_tokens: int = 4096
    # TRT-LLM's batch waiting (PyTorch backend, llm_args batch_wait_timeout_iters and batch_wait_max_tokens_ratio;
    # _torch/pyexecutor/py_executor.py PyExecutor._schedule, _waiting_requests; PRs #7287, #7416, Aug-Sep 2025): while
    # requests decode, the context requests the scheduler picked are held back iteration after iteration until they
    # and the decoders make ratio x max_num_tokens tokens or the iterations held reach the timeout (docs/frameworks.md).
    # Both 0 (TRT-LLM's defaults): no waiting; as in TRT-LLM a wait needs both > 0 (else one bound holds at once)
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # TRT-LLM's attention-DP balance (llm_args AttentionDpConfig: enable_balance off, timeout_iters 50,
    # batching_wait_iters 10; py_executor.py _balance_adp_requests): a lock-step group of attention-DP ranks holds
    # every rank's prompts until each rank has one (at most timeout_iters iterations), so their prefills run
    # together (simulator/engine/adpbalance.py; docs/frameworks.md)
    adp_balance: bool = False
    adp_timeout_iters: int = 50
    adp_batching_wait_iters: int = 10

    def __post_init__(self):
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler={self.scheduler!r}: one of {', '.join(SCHEDULERS)}")
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
        if self.dp_lockstep not in LOCKSTEPS:
            raise ValueError(f"dp_lockstep={self.dp_lockstep!r}: one of {', '.join(LOCKSTEPS)}")
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting={self.max_waiting} must be >= 0")
        if self.batch_wait_timeout_iters < 0:
            raise ValueError(f"batch_wait_timeout_iters={self.batch_wait_timeout_iters} must be >= 0")
        if not 0.0 <= self.batch_wait_max_tokens_ratio <= 1.0:  # (TRT-LLM's llm_args: "Value range: [0, 1]")
            raise ValueError(f"batch_wait_max_tokens_ratio={self.batch_wait_max_tokens_ratio} must be in [0, 1]")
        if (self.batch_wait_timeout_iters or self.batch_wait_max_tokens_ratio) and self.scheduler != "trtllm":
            raise ValueError(f"batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio) is TRT-LLM's; "
                             f"the {self.scheduler} scheduler has none: use --framework trtllm")
        if self.adp_timeout_iters < 0 or self.adp_batching_wait_iters < 0:  # (TRT-LLM's validator: >= 0)
            raise ValueError(f"adp_timeout_iters={self.adp_timeout_iters} and adp_batching_wait_iters="
                             f"{self.adp_batching_wait_iters} must be >= 0")
        if self.adp_balance and self.scheduler != "trtllm":
            raise ValueError(f"the attention-DP balance (adp_balance) is TRT-LLM's; the {self.scheduler} scheduler "
                             f"has none: use --framework trtllm")


# Each framework's scheduler and the defaults that shape it (docs/frameworks.md cites each value):
# SGLang 0.5.1: page size 1, prefill batches run first (no mixed chunk); TRT-LLM 1.0 PyTorch backend:
# 32-token blocks, chunked context off, block reuse off. vLLM: EngineConfig's own defaults.
FRAMEWORK_ENGINE = {
    "vllm": {},
    "sglang": {"scheduler": "sglang", "block_size": 1, "schedule_order": "prefill-first"},
    "trtllm": {"scheduler": "trtllm", "block_size": 32, "enable_chunked_prefill": False,
               "enable_prefix_caching": False},
}


def framework_engine(framework: str, **given) -> EngineConfig:
    """The EngineConfig of `framework` with its defaults; `given` (fields not None) take precedence."""
    if framework not in FRAMEWORK_ENGINE:
        raise ValueError(f"--framework {framework!r}: one of {', '.join(FRAMEWORK_ENGINE)}")
    fields = {**FRAMEWORK_ENGINE[framework], **{k: v for k, v in given.items() if v is not None}}
    return EngineConfig(**fields)
