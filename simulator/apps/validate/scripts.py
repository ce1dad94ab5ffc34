"""What SemiAnalysis InferenceX's launch scripts passed to the engine, per hardware, framework, model, version and
date: the single-node rows of the measured files that these scripts produced (docs/frameworks.md).

Each entry cites the script (path:line @ InferenceX commit) in force on the rows' measured_date; a field left at
None was not passed, so the framework's own default holds. Rows match an entry by (hardware, backend, HF id,
backend_version) exactly and by date within [first, last]; a row no entry matches is not attributed to
InferenceX (harness.py). Nothing here was chosen by how well it fits: where a script and a row's columns
disagree, `note` says so and what the replay does.

Common to every entry (the workflow, not the scripts): benchmark_serving.py --dataset-name random
--random-range-ratio 0.8, --num-prompts 10 x CONC, --max-concurrency CONC (benchmark-tmpl.yml:67 @ a36346339;
benchmark_lib.sh:261-275 @ a36346339), max-model-len isl + osl + 200 (generate_sweep_configs.py:347-348).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from perfmodel.layout import ParallelLayout

from .rows import Case


def _conc(case: Case) -> int:
    return max(case.concurrency, 1)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One script's engine flags (None: not passed, the framework's default)."""

    cite: str  # script:lines @ commit
    max_num_tokens: Callable | int | None = None  # the step's token budget (vLLM max-num-batched-tokens, TRT-LLM
    # max_num_tokens, SGLang chunked-prefill-size); a callable of the Case where the script computes it
    max_num_seqs: Callable | int | None = None  # vLLM --max-num-seqs, SGLang --max-running-requests, TRT-LLM
    # --max_batch_size
    kv_dtype: str = "bf16"  # "auto" is the model's bf16 for these checkpoints unless the script asks for fp8
    ssm_dtype: str | None = None  # SGLang --mamba-ssm-dtype (hybrid linear attention); None: the config's
    fp8_scales: str | None = None  # the served checkpoint's fp8 activation scales (RunSpec.fp8_scales); None: config's
    memory_fraction: float | None = None  # --gpu-memory-utilization / --mem-fraction-static /
    # free_gpu_memory_fraction, in each framework's meaning (perfmodel.framework.with_knobs)
    moe_kernel: str = ""  # "marlin": VLLM_MXFP4_USE_MARLIN=1
    async_scheduling: bool | None = None  # vLLM `async-scheduling: true` (None: the version's default)
    layout: Callable | None = None  # the layout the script ran, from the row's columns (None: the columns')
    mtp: Callable | int = 0  # speculative draft tokens a step (TRT-LLM num_nextn_predict_layers; 0: none)
    # TRT-LLM batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio), or None: not passed (off)
    batch_wait: Callable | tuple | None = None
    # TRT-LLM attention_dp_config with enable_balance: (timeout_iters, batching_wait_iters), or None: not passed (off)
    adp_balance: Callable | tuple | None = None
    # CUDA graphs as the script captures them: (max batch or a callable of the Case, padding or None: the
    # framework's) — SGLang --cuda-graph-max-bs, TRT-LLM cuda_graph_config max_batch_size and enable_padding, vLLM
    # max-cudagraph-capture-size — or None: not passed, the framework's defaults (perfmodel/graphs.py)
    cuda_graph: tuple | None = None
    skip: Callable | str = ""  # why the row cannot be replayed as launched ("" or a callable of the Case)
    note: str = ""  # what the script and the row's columns disagree on, and what the replay does


# nvidia/Llama-3.3-70B-Instruct-FP8, which the Llama-3.1-70B rows' workflows served, is a ModelOpt FP8 checkpoint:
# per-tensor fp8 weights and activations with calibrated (static) scales, its hf_quant_config.json `quant_algo: FP8`
# as aiconfigurator bundles for the same producer's nvidia/Llama-3.1-70B-Instruct-FP8 (aic-core model_configs/
# nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json @095f58a5; perfmodel.formats.config_fp8_scales)
MODELOPT_FP8 = "static"


def _ceil64(n: int) -> int:
    return -(-n // 64) * 64


def _lay(case: Case) -> ParallelLayout:
    return ParallelLayout.parse(case.layout)


def _tep(t: int) -> str:
    """TP t with the experts split over the same t GPUs."""
    return f"tp={t},ep={t}" if t > 1 else "tp=1"


def _ep_over_tp(case: Case) -> str:
    """--ep_size=$TP / --enable-expert-parallel: the experts split over the TP group the row's tp_size says."""
    return _tep(_lay(case).tp)


def _tp_equals_ep(case: Case) -> str:
    """A config of tp = ep whose rows' converter wrote tp_size = tp x ep (moe_ep = the script's TP)."""
    return _tep(_lay(case).ep)


def _mtp_dp(case: Case) -> bool:
    """dsr1-fp8-h200-trt-mtp's attention DP (nvidia-master.yaml:264-283 @ bf3456727): from C = 128 at 1k/1k, 256 at
    1k/8k, 64 at 8k/1k."""
    return case.concurrency >= {(1024, 1024): 128, (1024, 8192): 256}.get((case.isl, case.osl), 64)


def _mtp_batch(case: Case) -> int:
    """--max_batch_size: CONC / TP per attention-DP rank, else CONC (dsr1_fp8_h200_trt_mtp_slurm.sh:69-73)."""
    return _conc(case) // 8 if _mtp_dp(case) else _conc(case)


def _llama70b_trt_wait(case: Case) -> tuple | None:
    """70b_fp8_h200_trt_slurm.sh:24-28 @ 9596d23d7: "For 1k/1k, use batch_wait_max_tokens_ratio and
    batch_wait_timeout_iters" at TP < 8: batch_wait_max_tokens_ratio 0.9, batch_wait_timeout_iters 20."""
    return (20, 0.9) if (case.isl, case.osl) == (1024, 1024) and _lay(case).tp < 8 else None


def _dsr1_trt_h200(case: Case) -> str:
    """dsr1_fp8_h200_trt_slurm.sh: TP8 with EP_SIZE=8, attention DP above C=32 at 8k/1k and above 64 otherwise
    (:24-39 @ 9596d23d7; the 12-15 config's one dp-attn entry, 8k/1k C=64, the same)."""
    dp = case.concurrency > (32 if (case.isl, case.osl) == (8192, 1024) else 64)
    return "dp=8,tp=1,ep=8" if dp else "tp=8,ep=8"


def _dsr1_trt_balance(case: Case) -> tuple | None:
    """attention_dp_config {batching_wait_iters: 0, enable_balance: true, timeout_iters: 60} whenever the script runs
    attention DP (dsr1_fp8_h200_trt_slurm.sh:63-70 @ 9596d23d7, :46-53 @ d22bf9ca9)."""
    return (60, 0) if "dp=" in _dsr1_trt_h200(case) else None


V_GPTOSS_MARLIN = Launch("benchmarks/single_node/gptoss_fp4_{hw}.sh @ cec542a9a: config.yaml max-num-batched-tokens "
                         "8192 and max-cudagraph-capture-size 2048 (h100 :20-25, h200 :36-41), "
                         "VLLM_MXFP4_USE_MARLIN=1 (h100 :27-28, h200 :47), --max-num-seqs $CONC, "
                         "--gpu-memory-utilization 0.9", 8192, _conc, memory_fraction=0.9, moe_kernel="marlin",
                         cuda_graph=(2048, None))
V_ASYNC_2025 = dict(max_num_tokens=8192, max_num_seqs=_conc, memory_fraction=0.9, async_scheduling=True)

# (hardware, backend, model, backend_version, first day, last day) -> Launch
SCRIPTS = {
    # ---- H100, vLLM
    ("h100", "vllm", "openai/gpt-oss-120b", "0.18.0", "2026-03-27", "2026-03-27"): V_GPTOSS_MARLIN,
    ("h100", "vllm", "openai/gpt-oss-120b", "0.11.2", "2025-12-05", "2025-12-08"): Launch(
        "benchmarks/gptoss_fp4_h100_docker.sh @ 25506e87c: config.yaml :14-20 (async-scheduling, "
        "max-cudagraph-capture-size 2048, 8192 tokens), :26-31 (--gpu-memory-utilization 0.9, --max-num-seqs $CONC); "
        "no MARLIN", **V_ASYNC_2025, cuda_graph=(2048, None),
        note="the client's --max-concurrency was hard-coded 512 (:51, fixed in 4e135fd3f): the row's concurrency; "
             "the server's $CONC is not recorded, so --max-num-seqs is the row's concurrency"),
    ("h100", "vllm", "openai/gpt-oss-120b", "", "2025-12-05", "2025-12-05"): Launch(
        "benchmarks/gptoss_fp4_h100_docker.sh @ 25506e87c (as the 0.11.2 rows: image v0.11.2 from that commit)",
        **V_ASYNC_2025, cuda_graph=(2048, None),
        note="the client's --max-concurrency was hard-coded 512 (:51): the row's concurrency"),
    ("h100", "vllm", "meta-llama/Llama-3.1-70B", "", "2025-10-29", "2025-10-29"): Launch(
        "benchmarks/70b_fp8_h100_docker.sh @ af4ccd03f: config.yaml :14-20 (kv-cache-dtype fp8, async-scheduling, "
        "8192 tokens), :24-29 (--gpu-memory-utilization 0.9, --max-num-seqs $CONC)", kv_dtype="fp8",
        fp8_scales=MODELOPT_FP8, **V_ASYNC_2025,
        note="the workflow (70b-tmpl.yml:42-57 @ 9596d23d7) served nvidia/Llama-3.3-70B-Instruct-FP8; the row names "
             "meta-llama/Llama-3.1-70B (fp8), the converter's label for it: same shapes and format, replayed as is"),
    ("h100", "vllm", "MiniMaxAI/MiniMax-M2.5", "0.18.0", "2026-03-27", "2026-03-28"): Launch(
        "benchmarks/single_node/minimaxm2.5_fp8_h100.sh @ 0f78cf4eb: --enable-expert-parallel when EP > 1 "
        "(:29-33), --gpu-memory-utilization 0.90 (:42), --max-num-seqs 256 (:44)", max_num_seqs=256,
        memory_fraction=0.9),
    # ---- H200, vLLM
    ("h200", "vllm", "openai/gpt-oss-120b", "0.18.0", "2026-03-27", "2026-03-27"): V_GPTOSS_MARLIN,
    ("h200", "vllm", "openai/gpt-oss-120b", "", "2025-11-02", "2025-11-02"): Launch(
        "benchmarks/gptoss_fp4_h200_slurm.sh @ 9596d23d7: config.yaml :33-39 (async-scheduling, cuda-graph-sizes "
        "2048, 8192 tokens), :46-48 (--gpu-memory-utilization 0.9, --max-num-seqs $CONC); no MARLIN", **V_ASYNC_2025,
        cuda_graph=(2048, None),
        note="cuda-graph-sizes 2048 (before vLLM 0.11.1: [1, 2, 4] + every 8 to 2048): replayed as "
             "max-cudagraph-capture-size 2048 (every 16 above 256; the vLLM version is not recorded)"),
    ("h200", "vllm", "meta-llama/Llama-3.1-70B", "", "2025-10-29", "2025-10-29"): Launch(
        "benchmarks/70b_fp8_h200_slurm.sh @ 9596d23d7: config.yaml :33-39 (kv-cache-dtype fp8, async-scheduling, "
        "8192 tokens), :46-48 (--gpu-memory-utilization 0.9, --max-num-seqs $CONC)", kv_dtype="fp8",
        fp8_scales=MODELOPT_FP8, **V_ASYNC_2025,
        note="the workflow (70b-tmpl.yml:59-74 @ 9596d23d7) served nvidia/Llama-3.3-70B-Instruct-FP8; the row names "
             "meta-llama/Llama-3.1-70B (fp8), the converter's label for it: same shapes and format, replayed as is"),
    ("h200", "vllm", "MiniMaxAI/MiniMax-M2.5", "0.16.0", "2026-03-01", "2026-03-01"): Launch(
        "benchmarks/single_node/minimaxm2.5_fp8_h200.sh @ a36346339: --gpu-memory-utilization 0.95 (:27); no "
        "--max-num-seqs, no expert parallel", memory_fraction=0.95),
    ("h200", "vllm", "MiniMaxAI/MiniMax-M2.5", "0.18.0", "2026-03-27", "2026-03-28"): Launch(
        "benchmarks/single_node/minimaxm2.5_fp8_h200.sh @ 0f78cf4eb: `if [ \"$EP_SIZE\" -ge 1 ]` adds "
        "--enable-expert-parallel (:25-29; EP_SIZE defaults to 1: always on), --gpu-memory-utilization 0.95 (:38)",
        memory_fraction=0.95, layout=_ep_over_tp,
        note="the row says ep 1; the script passes --enable-expert-parallel whenever EP_SIZE >= 1: experts over TP"),
    ("h200", "vllm", "moonshotai/Kimi-K2.5", "0.16.0", "2026-03-02", "2026-03-27"): Launch(
        "benchmarks/single_node/kimik2.5_int4_h200.sh @ 749096c4c: --gpu-memory-utilization 0.95 (:32), "
        "--max-num-seqs $CONC (:35)", max_num_seqs=_conc, memory_fraction=0.95),
    # ---- H200, SGLang 0.5.9 (image lmsysorg/sglang:v0.5.9-cu130 from 12ba0ae07)
    # DeepSeek-V3: aiconfigurator's label for the rows of InferenceX's dsr1 configs (which serve DeepSeek-R1-0528;
    # InferenceX has no H200 DeepSeek-V3 config): the same script
    **{("h200", "sglang", model, "0.5.9", "2026-03-25", "2026-03-25"): Launch(
          "benchmarks/single_node/dsr1_fp8_h200.sh @ 12ba0ae07: --chunked-prefill-size 32768 --max-prefill-tokens "
          "32768 --mem-fraction-static 0.82 (:33-37, :39-48), --max-running-requests 512 at 1k/1k else 256",
          32768, lambda c: 512 if (c.isl, c.osl) == (1024, 1024) else 256, memory_fraction=0.82,
          cuda_graph=(lambda c: 512 if (c.isl, c.osl) == (1024, 1024) else 256, True))  # (--cuda-graph-max-bs :34, :43)
       for model in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")},
    # (the rows' measured_date is the config's merge day; version 0.5.9 = its image; tp 8 / ep 8, C = 4-64 and the
    # 1k1k, 1k8k, 8k1k shapes are its search space; rows named *_gap_analysis_* carry the same numbers)
    ("h200", "sglang", "Qwen/Qwen3.5-397B-A17B", "0.5.9", "2026-03-04", "2026-03-10"): Launch(
        "benchmarks/single_node/qwen3.5_fp8_h200.sh @ f65d6b4b1 (config qwen3.5-fp8-h200-sglang, image "
        "lmsysorg/sglang:v0.5.9-cu129-amd64, Qwen/Qwen3.5-397B-A17B-FP8, tp 8 ep 8; server flags unchanged at "
        "aad53363c): --tp $TP --expert-parallel-size $EP_SIZE --max-running-requests 128 --chunked-prefill-size "
        "16384 --mem-fraction-static 0.8 --kv-cache-dtype fp8_e4m3 --mamba-ssm-dtype bfloat16 --disable-radix-cache "
        "(:30-52)",
        16384, 128, kv_dtype="fp8", memory_fraction=0.8, layout=_tp_equals_ep, ssm_dtype="bfloat16",
        cuda_graph=(_conc, True),  # (--cuda-graph-max-bs "$CONC", :43)
        note="the tp 64 rows' tp_size is their converter's tp x ep: replayed as the script's tp 8, ep 8"),
    ("h200", "sglang", "zhipuai/GLM-5", "glm5-hopper", "2026-03-18", "2026-04-30"): Launch(
        "benchmarks/single_node/glm5_fp8_h200.sh @ ebb48d4bc (config glm5-fp8-h200-sglang, image "
        "lmsysorg/sglang:glm5-hopper, zai-org/GLM-5-FP8; unchanged in its server flags at 7215f1f88): --tp-size $TP "
        "--mem-fraction-static 0.85 (:29-39), nothing else: SGLang's defaults (its DSA models keep a bf16 KV cache "
        "on Hopper: sglang 0.5.8 server_args.py:1160-1166)", memory_fraction=0.85,
        note="the row names zhipuai/GLM-5: the script served zai-org/GLM-5-FP8 (same shapes, fp8 weights)"),
    # ---- H200, TRT-LLM
    ("h200", "trtllm", "meta-llama/Llama-3.1-70B", "", "2025-10-29", "2025-10-29"): Launch(
        "benchmarks/70b_fp8_h200_trt_slurm.sh @ 9596d23d7: trtllm-serve --max_num_tokens 16384 (:49), kv_cache_config "
        "dtype fp8 (:25-46), at 1k/1k below TP 8 batch_wait_max_tokens_ratio 0.9 and batch_wait_timeout_iters 20 "
        "(:24-28); no --max_batch_size, no free_gpu_memory_fraction", 16384, kv_dtype="fp8",
        fp8_scales=MODELOPT_FP8, batch_wait=_llama70b_trt_wait,
        cuda_graph=(1024, True),  # (cuda_graph_config enable_padding true, max_batch_size 1024: :29-31, :39-41)
        note="the workflow (70b-tmpl.yml:76-92 @ 1e97a5e51) served nvidia/Llama-3.3-70B-Instruct-FP8 on TRT-LLM "
             "1.1.0rc2.post2; the row names meta-llama/Llama-3.1-70B (fp8), the converter's label for it: same shapes "
             "and format, replayed as is"),
    **{("h200", "trtllm", model, "", "2025-11-02", "2025-11-02"): Launch(
        "benchmarks/dsr1_fp8_h200_trt_slurm.sh @ 9596d23d7 (DeepSeek-R1-0528, TRT-LLM 1.1.0rc2.post2): EP_SIZE=$TP "
        "(:24), attention DP at 8k/1k above C=32 (:28-39) with attention_dp_config enable_balance, timeout_iters 60, "
        "batching_wait_iters 0 (:63-70), kv_cache_config dtype fp8 free_gpu_memory_fraction 0.75 "
        "(:48-61), MAX_NUM_TOKENS=(CONC+ISL+64+63)/64*64 (:74), no --max_batch_size (:77-85)",
        lambda c: _ceil64(_conc(c) + c.isl + 64), kv_dtype="fp8", memory_fraction=0.75, layout=_dsr1_trt_h200,
        adp_balance=_dsr1_trt_balance, cuda_graph=(128, True),  # (cuda_graph_config, :49-51)
        note="the row's ep 1 and attention DP 1 are the result converter's defaults (process_result.py records tp "
             "only): replayed as the script ran")
       for model in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")},
    ("h200", "trtllm", "deepseek-ai/DeepSeek-V3", "1.1.0rc2.post2", "2025-12-15", "2025-12-15"): Launch(
        "benchmarks/dsr1_fp8_h200_trt_slurm.sh @ d22bf9ca9 (config dsr1-fp8-h200-trt, nvidia-master.yaml:148-173 @ "
        "25506e87c: tp 8, ep 8, dp-attn at 8k/1k C=64; attention_dp_config as at 9596d23d7: :46-53): kv_cache_config "
        "dtype fp8 free_gpu_memory_fraction 0.75 (:31-44), MAX_NUM_TOKENS=(CONC+ISL+64+63)/64*64 (:57), no "
        "--max_batch_size (:60-68)",
        lambda c: _ceil64(_conc(c) + c.isl + 64), kv_dtype="fp8", memory_fraction=0.75, layout=_dsr1_trt_h200,
        adp_balance=_dsr1_trt_balance, cuda_graph=(128, True),  # (cuda_graph_config, :32-34)
        note="the row's tp_size 64 (attention DP 64) is its converter's tp x ep: replayed on the config's 8 GPUs"),
    ("h200", "trtllm", "deepseek-ai/DeepSeek-R1", "1.1.0rc2.post2", "2026-01-14", "2026-01-28"): Launch(
        "benchmarks/dsr1_fp8_h200_trt_mtp_slurm.sh @ bf3456727 (config dsr1-fp8-h200-trt-mtp: the rows' concurrency "
        "and attention-DP pattern exist only in it; the 01-14 runs started 3 s after its merge)",
        lambda c: _ceil64((1 + (1 if _mtp_dp(c) else 3)) * _mtp_batch(c) + c.isl + 64), _mtp_batch, kv_dtype="fp8",
        memory_fraction=0.75, mtp=lambda c: 1 if _mtp_dp(c) else 3,
        layout=lambda c: "dp=8,tp=1,ep=8" if _mtp_dp(c) else "tp=8,ep=8",
        adp_balance=lambda c: (60, 0) if _mtp_dp(c) else None,  # attention_dp_config as the plain script's (:60-67)
        cuda_graph=(128, True),  # (cuda_graph_config enable_padding true, max_batch_size 128: :43-45)
        skip=lambda c: "" if c.date < "2026-01-28" or "dp=" in c.layout else (
            "the MTP config and the plain one (dsr1_fp8_h200_trt{,_mtp}.sh @ b30c3398a) both ran this concurrency; "
            "the row does not say which"),
        note="MTP=3 (MTP=1 with attention DP, balanced as the plain script's), --max_batch_size CONC (CONC / TP per "
             "DP rank), --max_num_tokens ((MTP+1) x batch + ISL + 64) rounded up to 64, kv_cache_config dtype fp8 "
             "free_gpu_memory_fraction 0.75 "
             "(:22-29, :42-75); the row's tp_size 64 is its converter's tp x ep: replayed on the config's 8 GPUs; "
             "the draft acceptance is perfmodel.specdec's fitted one (sa-bench random tokens)"),
    ("h200", "trtllm", "openai/gpt-oss-120b", "", "2025-11-02", "2025-11-02"): Launch(
        "benchmarks/gptoss_fp4_h200_trt_slurm.sh @ 9596d23d7 (image release:gpt-oss-dev): kv_cache_config dtype auto "
        "free_gpu_memory_fraction 0.85 (:29-43), --max_batch_size $CONC --max_num_tokens 20000 --ep_size=$TP (:47)",
        20000, _conc, memory_fraction=0.85, layout=_ep_over_tp,
        cuda_graph=(_conc, True),  # (cuda_graph_config enable_padding true, max_batch_size $CONC: :30-32)
        note="the row's ep 1 is the result converter's default: replayed with EP = TP as the script ran"),
    ("h200", "trtllm", "openai/gpt-oss-120b", "gpt-oss-dev", "2025-12-15", "2026-01-28"): Launch(
        "benchmarks/gptoss_fp4_h200_trt_slurm.sh @ d22bf9ca9 (gptoss_fp4_h200_trt.sh @ e28c038f8 on 01-28, the same "
        "engine flags): kv_cache_config dtype auto free_gpu_memory_fraction 0.85 (:27-41), --max_batch_size $CONC "
        "--max_num_tokens 20000 (:43-56); config gptoss-fp4-h200-trt: tp = ep in 1, 2, 4, 8",
        20000, _conc, memory_fraction=0.85, layout=_tp_equals_ep,
        cuda_graph=(_conc, True),  # (cuda_graph_config enable_padding true, max_batch_size $CONC: :28-30)
        note="the 12-15 rows' tp_size is their converter's tp x ep: replayed at tp = ep"),
}


def launch_of(case: Case) -> Launch | None:
    """The InferenceX script that launched `case`'s engine, or None when no entry matches."""
    for (hw, backend, model, version, first, last), got in SCRIPTS.items():
        if (case.hardware, case.backend, case.model, case.version) == (hw, backend, model, version) \
                and first <= case.date <= last:
            return dataclasses.replace(got, cite=got.cite.replace("{hw}", hw))
    return None


def value(v, case: Case):
    """A Launch field's value for `case` (a callable computes it from the row's setup columns)."""
    return v(case) if callable(v) else v
