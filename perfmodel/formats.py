"""Storage formats of weights and KV caches: bytes per element with their scales, which modules each
quantisation scheme covers, and the format a checkpoint's config declares."""
from __future__ import annotations

# Bytes per element of each supported storage dtype.
# mxfp4: 4 bit (e2m1) + an 8-bit e8m0 scale per 32 (OCP MX); nvfp4: 4 bit (e2m1) + an fp8 e4m3 scale per
# 16, plus one fp32 global scale per tensor (not counted: 4 bytes a matrix) = 9/16 byte (aiconfigurator 0.12.0
# sdk/common.py GEMMQuantMode.nvfp4 QuantMapping(9 / 16, ...)); int4: 4 bit + a 16-bit scale per 32
# (compressed-tensors pack-quantized, group_size 32: Kimi-K2.5's experts)
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "mxfp4": 0.53125, "nvfp4": 0.5625,
               "int4": 0.5625}
EXPERTS_ONLY = ("mxfp4", "int4")  # 4-bit W4A16 schemes that quantise the routed experts only
# Attention projections under nvfp4 follow NVIDIA's ModelOpt NVFP4 checkpoints (aiconfigurator-core 0.12.0
# model_configs/*_hf_quant_config.json): MLA models keep q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj
# in bf16 and quantise o_proj (nvidia/DeepSeek-V3.1-NVFP4's exclude_modules); GQA models quantise q/k/v/o
# (nvidia/Qwen3-235B-A22B-NVFP4 excludes only the routers and lm_head). Checkpoints that exclude more
# (MiniMax-M2.5-NVFP4: self_attn*; GLM-5-NVFP4: o_proj too) are under-counted until per-module formats are
# read from the checkpoint. Dense MLPs, shared and routed experts are nvfp4 in all of them
# (ModelSpec.attn_weight_dtype, o_proj_weight_dtype).

# weight formats a checkpoint's quantization_config declares that the model runs in as is
# (quant_method -> ModelSpec.weight_dtype): gpt-oss's mxfp4 experts, DeepSeek/MiniMax block-scaled fp8
CHECKPOINT_WEIGHTS = {"mxfp4": "mxfp4", "fp8": "fp8"}
WEIGHT_CHOICES = ("bf16", "fp8", "mxfp4", "nvfp4", "int4")  # what --weights accepts


def _compressed_tensors_int4(q: dict) -> bool:
    """A compressed-tensors config of 4-bit integer weights in groups of 32 on Linear layers, attention
    left out (Kimi-K2.5's: the experts-only int4 that `int4` models)."""
    groups = [g.get("weights") or {} for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
    ignore = " ".join(str(x) for x in q.get("ignore") or [])
    return (any(w.get("num_bits") == 4 and w.get("type") == "int" and w.get("group_size") == 32 for w in groups)
            and "self_attn" in ignore)


def config_weights(cfg: dict) -> str | None:
    """The weight format a parsed config.json's quantization_config declares (CHECKPOINT_WEIGHTS; ModelOpt
    NVFP4: `nvfp4`; compressed-tensors int4 in groups of 32 with attention left out: `int4`), else None."""
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config") or {}
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "modelopt" and str(q.get("quant_algo", "")).upper() == "NVFP4":  # nvidia/*-NVFP4, -FP4
        return "nvfp4"
    if method == "compressed-tensors":
        return "int4" if _compressed_tensors_int4(q) else None
    return CHECKPOINT_WEIGHTS.get(method)


# How an fp8 checkpoint scales its activations (--fp8-scales; ModelSpec.fp8_scales): "dynamic", an amax per
# tensor or token at run time (online quantisation, vLLM's Fp8Config default activation_scheme; block-scaled
# checkpoints' per-token-group scales are costed the same), or "static", scales calibrated into the checkpoint
# (ModelOpt FP8, quant_method fp8 with activation_scheme static): aiconfigurator's rule for its fp8_static mode
# (sdk/models/helpers.py _infer_quant_modes_from_raw_config @095f58a5), but only where the config says so.
FP8_SCALES = ("dynamic", "static")


def config_fp8_scales(cfg: dict) -> str:
    """"static" where a parsed config.json's quantization_config declares per-tensor fp8 with calibrated
    activation scales (ModelOpt FP8; fp8 with activation_scheme static and no weight blocks), else "dynamic"."""
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config") or {}
    if not isinstance(q, dict):
        return "dynamic"
    method, algo = str(q.get("quant_method", "")).lower(), str(q.get("quant_algo", "")).upper()
    if method == "modelopt" and algo == "FP8":
        return "static"
    static = method == "fp8" and str(q.get("activation_scheme", "")).lower() == "static"
    return "static" if static and not q.get("weight_block_size") else "dynamic"


# KV-cache formats (--kv-dtype): bf16; fp8 (e4m3, one byte an element); nvfp4 (e2m1 + an fp8 scale per 16:
# 9/16 byte). Framework support of an nvfp4 KV cache: vLLM v0.33.0 CacheDType "nvfp4" (config/cache.py:65;
# sm_100 runs it in trtllm-gen kernels, sm_80/90/120 in FlashAttention-2 with bf16 queries:
# v1/attention/backends/flashinfer.py:114-115, 654-663; v0.12.0 had no 4-bit KV dtype); SGLang v0.5.23
# --kv-cache-dtype nvfp4, Blackwell only (arg_groups/kv_cache_hook.py:125-130); TensorRT-LLM
# kv_cache_config.dtype "nvfp4" (llmapi/llm_args.py KvCacheConfig.validate_dtype; no architecture check found).
KV_CHOICES = ("bf16", "fp8", "nvfp4")


def check_kv_dtype(kv_dtype: str, hw, framework: str) -> None:
    """ValueError (one line) where `framework` cannot keep a `kv_dtype` cache on `hw` (KV_CHOICES' sources)."""
    if kv_dtype == "nvfp4" and framework == "sglang" and not hw.has_fp4:
        raise ValueError(f"--kv-dtype nvfp4: SGLang keeps an nvfp4 KV cache on Blackwell (SM100/SM120) only "
                         f"(sglang v0.5.23 arg_groups/kv_cache_hook.py:125-130), and {hw.name} has no fp4 tensor "
                         f"cores; use --kv-dtype fp8, or --framework vllm (FlashAttention-2 path)")
