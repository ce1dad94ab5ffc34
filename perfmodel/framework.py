"""Framework (serving engine) parameters: what vLLM adds around the kernels.

These are the explicit, documented overheads that TARGETS.md says absolute numbers include.
Each default states where it comes from; they are global (never tuned per experiment).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from . import graphs, misc_kernels


@dataclasses.dataclass(frozen=True, slots=True)
class Framework:
    """Per-step and per-op overheads of the serving engine, and its memory settings."""

    # Fixed CPU work per engine step (scheduling, input preparation, sampling, detokenisation)
    # that the GPU waits on: exposed only by a synchronous loop. vLLM's (before 0.14 without
    # --async-scheduling): FITTED, VLLM_SYNC_STEP_OVERHEAD_S below (its preset). A loop that schedules ahead
    # (`schedule_ahead`: vLLM's async scheduling, SGLang's and TRT-LLM's overlap schedulers, their defaults)
    # prepares step n+1 while the GPU runs step n, so none is exposed: 0 in their presets. SGLang and
    # TRT-LLM with overlap off: SYNC_STEP_OVERHEAD_S (assumed, not fitted).
    step_overhead_s: float = 1.0e-3
    # Host cost of an op issued outside CUDA graphs, which the GPU waits on when its own work is
    # short (decode). Used only for Ulysses all-to-alls (ArcticInference runs SP steps eagerly).
    # FITTED ONCE to the one published number that isolates it: Shift paper's SP=8 vs DP=8 TPOT
    # gap (32.5 - 22.5 = 10.0 ms) minus the modelled non-eager gap (1.2 ms) over the 160
    # all-to-alls of a Llama-70B decode step = 55 us. No other constant is fitted to TARGETS.md.
    eager_op_overhead_s: float = 55e-6
    # Kernels outside GEMM/attention/collectives per layer (norms, rotary, activation, residual,
    # quantisation): launch floor each, ~2 us on Hopper under CUDA graphs.
    misc_kernels_per_layer: int = 6
    misc_kernel_floor_s: float = 2e-6
    # the framework's own count by model class, TP and KV dtype where derived from its source
    # (perfmodel/misc_kernels.py: TRT-LLM's PyTorch backend); "": misc_kernels_per_layer for every model
    misc_rule: str = ""
    custom_all_reduce: bool = True  # vLLM's one-/two-shot all-reduce for small TP messages
    # Memory plan: vLLM's gpu_memory_utilization and a per-GPU reserve for activations, CUDA graphs,
    # NCCL buffers and the non-torch CUDA context beyond what utilisation leaves free (~1.5 GB:
    # CUDA context ~0.5 GB + NCCL communicators ~1 GB on an 8-GPU node, nvidia-smi on idle vLLM).
    gpu_memory_utilization: float = 0.9
    reserve_bytes: float = 1.5e9
    reserve_per_tp_bytes: float = 0.0  # more reserve per TP degree (SGLang holds back (9.5 + tp/2) GiB)
    # SGLANG_RESERVE_RULE: SGLang >= 0.5.3 sizes the reserve from its chunk and CUDA-graph sizes (reserve_bytes_of);
    # `chunk_tokens`: its --chunked-prefill-size where the deployment sets one (None: SGLang's default for the GPU)
    reserve_rule: str = ""
    chunk_tokens: int | None = None
    # TRT-LLM's rule: KV gets gpu_memory_utilization (kv_cache_config.free_gpu_memory_fraction) of the
    # memory left free after weights and runtime (reserve_bytes), not a fraction of all of it
    # (AIC base_backend.py:842-849 memory_fraction_of_free; docs/frameworks.md)
    kv_fraction_of_free: bool = False
    # CUDA-graph capture sizes: a step of T tokens runs the graph of the smallest captured size >= T,
    # costed as that many tokens for everything but attention; above the largest it runs eagerly at T.
    # `cuda_graph_decode_only`: graphs only for decode-only steps (SGLang, TRT-LLM); else every step (vLLM V1's
    # piecewise graphs pad any step). `graph_rule` (perfmodel.graphs): the framework's own rule for the sizes
    # by version, GPU memory and TP ("": cuda_graph_sizes as they are); `cuda_graph_max_bs` the deployment's
    # largest size (SGLang --cuda-graph-max-bs, TRT-LLM cuda_graph_config max_batch_size, vLLM
    # max_cudagraph_capture_size; None: the framework's), `cuda_graph_padding` whether steps are padded at all
    # (off: SGLang --disable-cuda-graph-padding, TRT-LLM's default enable_padding false)
    cuda_graph_sizes: tuple = ()
    cuda_graph_decode_only: bool = False
    graph_rule: str = ""
    cuda_graph_max_bs: int | None = None
    cuda_graph_padding: bool = True
    # which engine's kernels these are: picks the engine's fused-MoE table in a calibrated profile
    # (profile `moe` section, keyed by framework; unknown names use its fallback)
    name: str = "vllm"
    # a non-default fused-MoE kernel family where the engine has several for a weight format: "" the
    # default, "marlin" what vLLM's VLLM_MXFP4_USE_MARLIN=1 selects for mxfp4 on Hopper (default there:
    # the triton OAI kernel). Picks the profile's "<format>_<kernel>" table; the format's own without one
    moe_kernel: str = ""
    # The host schedules step n+1 while the GPU runs step n (vLLM --async-scheduling: a batch queue of
    # two, `EngineCore.step_with_batch_queue` in vllm/v1/engine/core.py; TRT-LLM's overlap scheduler,
    # `PyExecutor._executor_loop_overlap`; SGLang's overlap schedule, `Scheduler.event_loop_overlap` in
    # srt/managers/scheduler.py @ 0.5.1.post1: recv -> schedule -> launch -> process the previous batch):
    # a request that reaches the engine while step n runs is first scheduled into step n+2
    # (simulator.engine.loop.Engine). Default on in SGLang (server_args.py:250
    # `disable_overlap_schedule: bool = False` @ 0.5.1.post1) and TRT-LLM (TorchLlmArgs
    # `disable_overlap_scheduler=False`; aiconfigurator's agg rule keeps it: `agg
    # disable_overlap_scheduler = false`), in vLLM from 0.14 (VLLM_ASYNC_DEFAULT_FROM) or with the flag.
    schedule_ahead: bool = False
    # busiest EP rank's routed rows / the mean (expert-load imbalance, perfmodel/knobs.py); None: the
    # default per EP degree, knobs.moe_ep_imbalance (aiconfigurator's power_law_1.01); 1.0: uniform routing
    moe_imbalance: float | None = None
    # Seconds added to each MoE dispatch / combine all_to_all whose EP group spans nodes, for engines that
    # run DeepEP's normal-mode kernels there (TRT-LLM's WIDEEP backend under TRTLLM_FORCE_ALLTOALL_METHOD=
    # DeepEP, as the srt-slurm DeepSeek recipes set it): in normal mode "the CPU will wait for GPU's signal
    # to arrive, so this is not compatible with CUDA graph" (deepseek-ai/DeepEP README, the dispatch
    # example), so each call pays a host round trip and its layer's launches are exposed. 0: the datasheet
    # hierarchical all_to_all alone (perfmodel.network; DeepEP's low-latency kernels are within it, see
    # tests/test_multinode_published.py). Fitted value: DEEPEP_NORMAL_CALL_S (simulator/apps/validate/harness.py).
    moe_a2a_call_s: float = 0.0
    # Seconds from a disaggregated request's KV transfer end to its first token leaving the decode worker, on
    # top of the modelled transfer (handshake, transfer polling, the decode side's first turn): 0 unless a
    # deployment's measurements fix it. Fitted value for SGLang 0.5.8 PD under Dynamo: SGLANG_PD_HANDOFF_S
    # (simulator/apps/validate/harness.py; fitted, mechanism not identified: docs/fidelity.md).
    pd_handoff_s: float = 0.0
    # Seconds per sequence in a step (prompt chunks and decodes alike) on top of the step's kernels and step_overhead_s,
    # in every loop: 0 unless a deployment sets it (--seq-overhead-us). A lead, not a default: the aiperf rows'
    # measured - replayed TPOT grows with the running sequences, ~6-47 us a sequence by framework (docs/fidelity.md,
    # open residuals; benchmarks/fit_seq_overhead.py sweeps it); its mechanism (host work past what an overlap loop
    # hides, or per-sequence GPU work such as sampling) is not identified. Constant within a decode stretch (its
    # sequences are fixed), so the closed form stays affine in keys. (SiDP's per-layer split, perfmodel/sidp.py,
    # takes only step_overhead_s off a step: a set value counts there as layer compute.)
    seq_overhead_s: float = 0.0
    # The host's time per step in a loop that overlaps it with the GPU (TRT-LLM's and SGLang's overlap schedulers,
    # vLLM's async scheduling): host_floor_s + host_floor_seq_s x the step's sequences. Preparing step n + 1 (Python:
    # scheduling, inputs, sampling bookkeeping, responses, per request) runs while the GPU runs step n, so it is hidden
    # until it takes longer than the kernels; then the GPU waits and the step takes the host's time: a step takes
    # max(its time, this floor) (simulator.engine.runner). 0: the host keeps up (every preset but TRT-LLM 1.0's,
    # TRTLLM_HOST_FLOOR_S below). Where the floor lies above a decode stretch's first steps, the stretch runs at the
    # floor until its kernels' line crosses it (runner.floored_line): the closed form equals step by step, to rounding.
    host_floor_s: float = 0.0
    host_floor_seq_s: float = 0.0
    # The profile's fp8 GEMM rows and compute-scale table are this framework's own kernels (TRT-LLM 1.3.0rc20's
    # collection), so a checkpoint with static activation scales (ModelSpec.fp8_scales) saves the compute-scale
    # pass on each fp8 GEMM (perfmodel/calibration/fp8_scale.py). Off elsewhere: vLLM's and SGLang's own
    # dynamic quantization is a ~6x cheaper kernel the stand-in table does not isolate (docs/fidelity.md).
    own_fp8_gemm_table: bool = False
    # Seconds per prompt token of the serving front end's tokenizer, before the engine sees a request (and
    # after the client's TTFT clock started). vLLM, SGLang and TRT-LLM tokenize in one thread of their API
    # server with Hugging Face `tokenizers` (docs/frameworks.md, "Front end"); requests queue for it in
    # arrival order (simulator.cluster.frontend). MEASURED, not fitted: TOKENIZE_S_PER_TOKEN below.
    tokenize_s_per_token: float = 0.0
    # vLLM tokenizes in micro-batches: its AsyncMicrobatchTokenizer takes the first queued prompt, waits up
    # to 2 ms for more, up to 32 (`batch_wait_timeout_s=0.002`, `max_batch_size=32`; vllm/utils/async_utils.py
    # :24-50 and the loop at :85-105, identical @ 0.11.2, 0.12.0, 0.18.0), so a lone request waits the whole
    # window. 0: one request at a time (SGLang 0.5.1's TokenizerManager, TRT-LLM's generate_async).
    tokenize_batch_wait_s: float = 0.0
    tokenize_max_batch: int = 1

    def __post_init__(self):
        if self.moe_imbalance is not None and self.moe_imbalance < 1:
            raise ValueError(f"moe_imbalance={self.moe_imbalance} must be >= 1 (busiest rank / mean)")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        for f in ("step_overhead_s", "eager_op_overhead_s", "misc_kernel_floor_s", "reserve_bytes",
                  "reserve_per_tp_bytes", "moe_a2a_call_s", "pd_handoff_s", "tokenize_s_per_token",
                  "tokenize_batch_wait_s", "seq_overhead_s", "host_floor_s", "host_floor_seq_s"):
            if getattr(self, f) < 0:
                raise ValueError(f"{f}={getattr(self, f)} must be >= 0")
        if self.graph_rule not in graphs.GRAPH_RULES:
            raise ValueError(f"graph_rule={self.graph_rule!r}: one of {', '.join(map(repr, graphs.GRAPH_RULES))}")
        if self.tokenize_max_batch < 1:
            raise ValueError(f"tokenize_max_batch={self.tokenize_max_batch} must be >= 1")


# Front-end tokenization, seconds per prompt token, by the kind of prompt text: `python benchmarks/
# measure_tokenizer.py` (2026-11-26, this project's 2-core CI machine, Python 3.11, tokenizers 0.23.3 through
# transformers 5.24, DeepSeek-V3's 129,280-token byte-level BPE; medians over 1k/4k/8k-token prompts, two
# seeds): natural text ("text": aiperf's corpus prompts, and real traffic) 1.3-1.7 us/token, random token ids
# decoded to text ("random": benchmark_serving's random dataset) 2.8-3.5 us/token. The same library and call
# in all three servers; a faster host CPU would take less (docs/fidelity.md).
TOKENIZE_S_PER_TOKEN = {"text": 1.5e-6, "random": 3.0e-6}

# Host time per step of vLLM's synchronous loop (Framework.step_overhead_s), FITTED by `python benchmarks/
# fit_step_overhead.py` on the TPOT of the 93 H100 vLLM 0.12.0 Qwen3-32B aiperf rows (the only synchronous vLLM
# rows; docs/fidelity.md gives the sweep and the held-out check). `simulate` and `simulate validate` both read it.
VLLM_SYNC_STEP_OVERHEAD_S = 2.0e-3
# Host time per step of SGLang's and TRT-LLM's loops with their overlap schedulers off (--disable-overlap-schedule,
# disable_overlap_scheduler): assumed ~1 ms, the gap between forward passes seen in V1 decode traces of 70B models;
# not fitted. With overlap on (their default) the host's step work runs while the GPU runs the previous step and
# none is exposed, as with vLLM's async scheduling (VLLM_ASYNC_DEFAULT_FROM): 0 in their presets. (Until issue 37's
# fidelity pass the presets charged this 1 ms under overlap too: every TRT-LLM and SGLang decode step 1 ms slow,
# e.g. TRT-LLM gpt-oss-120b H200 TPOT bias +18.7%; docs/fidelity.md.)
SYNC_STEP_OVERHEAD_S = 1.0e-3

# Host floor of TRT-LLM 1.0's PyExecutor under its overlap scheduler (Framework.host_floor_s, host_floor_seq_s),
# FITTED by `python benchmarks/fit_host_floor.py` on the TPOT of the 479 H100 TRT-LLM 1.0.0rc3 aiperf rows (the only
# TRT-LLM 1.0 rows; 2026-12-03, after perfmodel/misc_kernels.py: 0 / 0 us 10.1%, 2000 / 80 us 8.9%, **3000 / 40 us
# 8.5%** (level with 3000 / 60), 4000 / 40 us 8.7%; 2026-12-02: 9.5 / 8.8 / 8.6 / 8.8%;
# docs/fidelity.md has the held-out check). Their small-model rows show it: the replayed Llama-3.1-8B TPOT fell
# 10-60% short of the measured at TP4 / TP8 (kernels of 2-5 ms a step), 5-10% at TP1 (10.3% -> 8.3% with the floor),
# while Qwen3-32B and Qwen3-235B, whose kernels outlast it, are unmoved. Other TRT-LLM versions: not fitted (0; the
# H200 1.1.0rc2 rows, larger models, are unmoved by it either way).
TRTLLM_HOST_FLOOR_S = 3.0e-3
TRTLLM_HOST_FLOOR_SEQ_S = 40e-6
TRTLLM_HOST_FLOOR_VERSIONS = ((1, 0),)  # major.minor the fit rows ran

# vLLM's default capture sizes: [1, 2, 4] + every 8 to 248 + every 16 from 256 to 512 (vllm/config/vllm.py
# _set_cudagraph_sizes, 0.11.2 lines 847-875; 512 = min(2 x max_num_seqs, 512) with 1024 seqs on H100)
VLLM_CUDA_GRAPH_SIZES = graphs.vllm_sizes(graphs.VLLM_DEFAULT_M)
DEFAULT_FRAMEWORK = Framework(cuda_graph_sizes=VLLM_CUDA_GRAPH_SIZES, graph_rule=graphs.VLLM,
                              step_overhead_s=VLLM_SYNC_STEP_OVERHEAD_S,
                              tokenize_s_per_token=TOKENIZE_S_PER_TOKEN["text"], tokenize_batch_wait_s=0.002,
                              tokenize_max_batch=32)

GiB = 2**30
# The serving frameworks' memory rules and loops (docs/frameworks.md cites each value):
#  vllm    gpu_memory_utilization 0.9 of the GPU's memory for weights + activations + KV (config/cache.py)
#  sglang  mem_fraction_static = (total - (9.5 + tp/2) GiB) / total for weights + KV, activations
#          outside it (server_args.py:374-393, 0.5.1.post1 on GPUs with > 60 GB)
#  trtllm  KV = free_gpu_memory_fraction 0.9 of what weights and runtime leave free (LLM API KvCacheConfig)
FRAMEWORKS = {
    "vllm": DEFAULT_FRAMEWORK,
    "sglang": Framework(name="sglang", gpu_memory_utilization=1.0, reserve_bytes=9.5 * GiB, reserve_per_tp_bytes=0.5 * GiB,
                        graph_rule=graphs.SGLANG_OLD, cuda_graph_decode_only=True, schedule_ahead=True,
                        step_overhead_s=0.0, tokenize_s_per_token=TOKENIZE_S_PER_TOKEN["text"]),
    "trtllm": Framework(name="trtllm", gpu_memory_utilization=0.9, kv_fraction_of_free=True, schedule_ahead=True,
                        step_overhead_s=0.0, tokenize_s_per_token=TOKENIZE_S_PER_TOKEN["text"],
                        own_fp8_gemm_table=True, graph_rule=graphs.TRTLLM, cuda_graph_decode_only=True,
                        cuda_graph_padding=False, misc_rule=misc_kernels.TRTLLM),
}


# vLLM's async scheduling (host work of step n+1 overlapped with the GPU's step n) is on by default
# from 0.14.0 (vllm/config/scheduler.py:133 `async_scheduling: bool = Field(default=None)`, resolved to True
# unless spec decoding, executor or Mamba prefix caching forbid it in config/vllm.py:588-628 @ 0.14.0; the same at
# 0.16.0, scheduler.py:131 and vllm.py:647-687, and 0.18.0, :138 and :720-752; 0.13.0: `= False`, :133; vLLM
# PR #27614 "Enable async scheduling by default"; wheels from PyPI; docs/frameworks.md): no host time per step
# is exposed (0 ms, the value the async H100 rows fit: docs/fidelity.md). Until 2026-12-02 this said 0.18.
VLLM_ASYNC_DEFAULT_FROM = (0, 14)


def version_tuple(text: str) -> tuple:
    """'0.18.0' -> (0, 18, 0); the leading dotted numbers only ('1.0.0rc3' -> (1, 0, 0))."""
    m = re.match(r"\d+(\.\d+)*", str(text).strip())
    if m is None:
        raise ValueError(f"framework version {text!r}: expected numbers like 0.18.0")
    return tuple(int(x) for x in m.group(0).split("."))


def for_hardware(fw: Framework, hw) -> Framework:
    """`fw` as it runs on `hw`: no CUDA-graph padding where the device has no CUDA graphs (a CPU)."""
    if fw.cuda_graph_padding and not getattr(hw, "cuda_graphs", True):
        return dataclasses.replace(fw, cuda_graph_sizes=(), cuda_graph_padding=False)
    return fw


def graph_tokens(tokens, decode_only, fw: Framework, sizes: tuple | None = None):
    """Tokens a step is costed at (all terms but attention): padded up to the next CUDA-graph capture
    size (`sizes`, an instance's perfmodel.graphs.capture_sizes; None: fw.cuda_graph_sizes) when it is
    captured (<= the largest size; decode-only steps only if the framework graphs only those), else as is.
    Arrays or ints; `decode_only` a bool or bool array."""
    sizes = fw.cuda_graph_sizes if sizes is None else sizes
    if not sizes:
        return tokens
    arr = np.asarray(tokens)
    idx = np.searchsorted(np.asarray(sizes), arr)
    padded = np.asarray(sizes + (0,))[np.minimum(idx, len(sizes))]
    use = (arr > 0) & (arr <= sizes[-1])
    if fw.cuda_graph_decode_only:
        use = use & np.asarray(decode_only)
    out = np.where(use, padded, arr)
    return int(out) if np.ndim(out) == 0 and isinstance(tokens, (int, np.integer)) else out


# SGLang from 0.5.3 computes mem_fraction_static from what it reserves for activations and CUDA graphs, in MB of
# the driver's total (ServerArgs._handle_gpu_memory_settings: server_args.py:639-670 @0.5.3, :823-857 @0.5.6,
# :1020-1062 @0.5.9; PyPI wheels): 512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs
# + tp x pp / 8 x 1024, at least 10 GiB on GPUs over 60 GB; chunk and graph sizes by the GPU's memory (the same
# files: < 35 GiB 2048 / 24 at tp < 4 else 80, < 60 GiB 4096 / 32 or 160, < 160 GiB 8192 / 256 or 512, else
# 16384 / 512; under 20 GiB 2048 / 8). DP-attention, piecewise-graph and speculative terms, and the rounding of the
# fraction to 3 decimals (+-70 MB on an H200), are not modelled. 0.5.1 and
# 0.5.2 reserve (9.5 + tp x pp / 2) GiB under 90 GiB, the preset's rule (12 + tp x pp / 2 up to 160 GiB: not modelled).
SGLANG_RESERVE_RULE_FROM = (0, 5, 3)
SGLANG_RESERVE_RULE = "sglang-0.5.3"  # Framework.reserve_rule of those versions


def reserve_bytes_of(fw: Framework, tp: int, pp: int, hbm_bytes: float) -> float:
    """Bytes per GPU the framework holds back from weights + KV (memory.plan)."""
    if fw.reserve_rule != SGLANG_RESERVE_RULE:
        return fw.reserve_bytes + fw.reserve_per_tp_bytes * tp
    chunk, graph_bs = graphs.sglang_defaults(hbm_bytes, tp)
    mib = 512 + 1.5 * max(fw.chunk_tokens or chunk, 2048) + 2 * (fw.cuda_graph_max_bs or graph_bs) + tp * pp / 8 * 1024
    if hbm_bytes / GiB > 60:
        mib = max(mib, 10 * 1024)
    return mib * 2**20


def framework_preset(name: str, version: str | None = None) -> Framework:
    """The Framework of a serving framework by name (and version, where a default changed between
    versions: vLLM >= 0.14 schedules asynchronously); ValueError naming the known ones."""
    try:
        fw = FRAMEWORKS[name]
    except KeyError:
        raise ValueError(f"framework {name!r}: one of {', '.join(FRAMEWORKS)}") from None
    if version and name == "vllm" and version_tuple(version)[:2] >= VLLM_ASYNC_DEFAULT_FROM:
        fw = dataclasses.replace(fw, step_overhead_s=0.0, schedule_ahead=True)
    elif version and name == "sglang" and version_tuple(version)[:3] >= SGLANG_RESERVE_RULE_FROM:
        fw = dataclasses.replace(fw, reserve_rule=SGLANG_RESERVE_RULE, graph_rule=graphs.SGLANG)  # (both from 0.5.3)
    elif version and name == "trtllm" and version_tuple(version)[:2] in TRTLLM_HOST_FLOOR_VERSIONS:
        fw = dataclasses.replace(fw, host_floor_s=TRTLLM_HOST_FLOOR_S, host_floor_seq_s=TRTLLM_HOST_FLOOR_SEQ_S)
    elif version:
        version_tuple(version)  # checked: a version says which defaults apply
    return fw


def with_knobs(fw: Framework = DEFAULT_FRAMEWORK, gpu_memory_utilization: float | None = None,
               step_overhead_ms: float | None = None, tokenize_us_per_token: float | None = None) -> Framework:
    """`fw` with the knobs users set (--gpu-memory-utilization, --step-overhead-ms, --tokenize-us-per-token);
    None keeps fw's. The memory knob in each framework's meaning: vLLM's --gpu-memory-utilization and SGLang's
    --mem-fraction-static of the GPU's memory, TRT-LLM's free_gpu_memory_fraction of what weights leave free."""
    check_knobs(gpu_memory_utilization, step_overhead_ms, tokenize_us_per_token)
    changes = {}
    if gpu_memory_utilization is not None:
        changes["gpu_memory_utilization"] = float(gpu_memory_utilization)
        if fw.name == "sglang":  # --mem-fraction-static: weights + KV, replacing SGLang's reserve rule
            # (server_args.py computes mem_fraction_static from the reserve only when none is given)
            changes.update(reserve_bytes=0.0, reserve_per_tp_bytes=0.0, reserve_rule="")
    if step_overhead_ms is not None:
        changes["step_overhead_s"] = float(step_overhead_ms) / 1e3
    if tokenize_us_per_token is not None:
        changes["tokenize_s_per_token"] = float(tokenize_us_per_token) / 1e6
    return dataclasses.replace(fw, **changes) if changes else fw


MOE_KERNELS = ("", "marlin")  # Framework.moe_kernel: the default family, or vLLM's VLLM_MXFP4_USE_MARLIN=1


def with_deployment(fw: Framework, moe_kernel: str | None = None, moe_a2a_call_us: float | None = None,
                    pd_handoff_ms: float | None = None, seq_overhead_us: float | None = None,
                    cuda_graph_max_bs: int | None = None, cuda_graph_padding: bool | None = None,
                    host_floor_us: float | None = None, host_floor_seq_us: float | None = None) -> Framework:
    """`fw` with a deployment's settings that are not the framework's defaults (--moe-kernel,
    --moe-a2a-call-us, --pd-handoff-ms, --seq-overhead-us, --cuda-graph-max-bs, --cuda-graph-padding,
    --host-floor-us, --host-floor-seq-us; None keeps fw's): one line naming a bad value."""
    changes = {}
    if cuda_graph_max_bs is not None:
        if isinstance(cuda_graph_max_bs, bool) or not isinstance(cuda_graph_max_bs, int) or cuda_graph_max_bs < 1:
            raise ValueError(f"cuda_graph_max_bs={cuda_graph_max_bs!r} must be an integer >= 1")
        changes["cuda_graph_max_bs"] = cuda_graph_max_bs
    if cuda_graph_padding is not None:
        changes["cuda_graph_padding"] = bool(cuda_graph_padding)
    if moe_kernel is not None:
        if moe_kernel not in MOE_KERNELS:
            raise ValueError(f"moe_kernel={moe_kernel!r}: one of {', '.join(repr(k) for k in MOE_KERNELS)}")
        changes["moe_kernel"] = moe_kernel
    for name, v, field, scale in (("moe_a2a_call_us", moe_a2a_call_us, "moe_a2a_call_s", 1e6),
                                  ("pd_handoff_ms", pd_handoff_ms, "pd_handoff_s", 1e3),
                                  ("seq_overhead_us", seq_overhead_us, "seq_overhead_s", 1e6),
                                  ("host_floor_us", host_floor_us, "host_floor_s", 1e6),
                                  ("host_floor_seq_us", host_floor_seq_us, "host_floor_seq_s", 1e6)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise ValueError(f"{name}={v!r} must be a finite number >= 0")
        changes[field] = float(v) / scale
    return dataclasses.replace(fw, **changes) if changes else fw


def with_async(fw: Framework, on: bool | None, step_overhead_ms: float | None = None) -> Framework:
    """`fw` with its loop scheduling ahead or not (`--async-scheduling on|off`; None keeps fw's): when a request
    can join, and the step overhead with it, as between vLLM's versions (framework_preset): scheduling ahead
    hides the host time of a step (0 ms), a synchronous loop exposes it (vLLM: VLLM_SYNC_STEP_OVERHEAD_S,
    fitted; SGLang and TRT-LLM with overlap off: SYNC_STEP_OVERHEAD_S, assumed); an explicit
    --step-overhead-ms wins."""
    if on is None:
        return fw
    changes = {"schedule_ahead": bool(on)}
    if step_overhead_ms is None:
        sync_s = VLLM_SYNC_STEP_OVERHEAD_S if fw.name == "vllm" else SYNC_STEP_OVERHEAD_S
        changes["step_overhead_s"] = 0.0 if on else sync_s
    return dataclasses.replace(fw, **changes)


def check_knobs(gpu_memory_utilization: float | None = None, step_overhead_ms: float | None = None,
                tokenize_us_per_token: float | None = None) -> None:
    """One line naming the knob and its bound: 0 < gpu_memory_utilization <= 1, 0 <= step_overhead_ms < inf,
    0 <= tokenize_us_per_token < inf."""
    for name, v in (("gpu_memory_utilization", gpu_memory_utilization), ("step_overhead_ms", step_overhead_ms),
                    ("tokenize_us_per_token", tokenize_us_per_token)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"{name}={v!r} must be a number")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:  # NaN fails too
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1] "
                         f"(the fraction of each GPU's memory vLLM may use; default "
                         f"{DEFAULT_FRAMEWORK.gpu_memory_utilization})")
    if step_overhead_ms is not None and not 0 <= step_overhead_ms < float("inf"):
        raise ValueError(f"step_overhead_ms={step_overhead_ms} must be a finite number >= 0 "
                         f"(default {1e3 * DEFAULT_FRAMEWORK.step_overhead_s:g} ms)")
    if tokenize_us_per_token is not None and not 0 <= tokenize_us_per_token < float("inf"):
        raise ValueError(f"tokenize_us_per_token={tokenize_us_per_token} must be a finite number >= 0 "
                         f"(default {1e6 * DEFAULT_FRAMEWORK.tokenize_s_per_token:g} us)")


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """vLLM v1 continuous-batching limits: token budget per step and running sequences."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024

    def __post_init__(self):
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError(f"max_num_batched_tokens={self.max_num_batched_tokens} and "
                             f"max_num_seqs={self.max_num_seqs} must be >= 1")


def vllm_default_limits(hw) -> SchedulerLimits:
    """vLLM v1's defaults for its OpenAI server (EngineArgs._set_default_args_v1, vLLM 0.9):
    8192 tokens / 1024 seqs on GPUs with >= 70 GiB other than A100 (H100, H200, B200),
    2048 / 256 otherwise."""
    if hw.hbm_bytes >= 70 * 2**30 and "a100" not in hw.name:
        return SchedulerLimits(8192, 1024)
    return SchedulerLimits(2048, 256)
