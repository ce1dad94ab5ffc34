"""Kernels a decoder layer launches besides its GEMMs, attention core, collectives and fused-MoE op: the
`misc` launches that Framework.misc_kernel_floor_s charges each (norms, RoPE / KV append, activation, routing).

The generic count (Framework.misc_kernels_per_layer, 6: two norms, rotary, activation, two residual adds)
is an assumption. TensorRT-LLM's PyTorch backend fuses most of them, and how depends on the model class,
the attention TP and the KV dtype; `trtllm_per_layer` counts them from its source (Hopper, decode under
CUDA graphs, AllReduceStrategy AUTO; read 2026-12-03 in the public NVIDIA/TensorRT-LLM history, files
dated by content to the 1.0-1.1 releases of mid / late 2025 that the measured rows ran; character
offsets, as the stored copies carry no line numbers):

* NORM: RMSNorm with its residual add is one flashinfer `fused_add_rmsnorm` (modules/rms_norm.py @0419019a
  ~0.9k); a layer's input norm runs at the end of the previous layer (`next_layer_layernorm`). Where the
  decoder layer fuses them into its all-reduces (AllReduceFusionOp.RESIDUAL_RMS_NORM[_QUANT_FP8], one
  `allreduce_fusion_op` kernel under AUTO: thop/allreduceOp.cpp @4bb1ef88 ~22.1k, ~43k), both norms cost
  as the collective: Llama only when hidden_size > 4096 (modeling_llama.py @3a5901cd ~28.6k
  `enable_fusion &= config.hidden_size > 4096`, "accuracy issues"), Qwen3-MoE (modeling_qwen3_moe.py
  @a678b91a ~7-12k), gpt-oss (modeling_gpt_oss.py @7924c7f1 ~15.9-18.3k) and DeepSeek-V3
  (modeling_deepseekv3.py @000561df ~24.9-33.8k), each at attention TP > 1 only (not attention DP);
  Qwen3 dense never (modeling_qwen3.py @010bb95f, @5dedf53b: no fusion params).
* ROPE/KV: one `invokeQKVPreprocessing` kernel (RoPE + KV append) before the XQA decode kernel, except
  where the Hopper QGMMA XQA kernel applies RoPE itself: FP8 KV cache and GPT-NeoX-style RoPE
  (decoderXQAImplJIT.cpp @89fd9b74 ~8.9-9.5k, ~16.8k; kernelUtils.cpp @602593ac ~2.6k). gpt-oss's YaRN
  RoPE is not among those: always 1. Qwen3 runs q_norm + k_norm + RoPE as one `fused_qk_norm_rope` kernel
  (qk_norm_attention.py @034c3f0a ~7-9k) and the KV append apart: 2.
* ACT: SiLU x mul is one Triton kernel (swiglu.py @539961b5 ~1.4-2.2k), the fp8 quantisation of down_proj's
  input fused into it (gated_mlp.py @90f3bec1 ~5.1k).
* Activation quantisation before other fp8 linears (static_quantize_e4m3_per_tensor, fp8_quantize_1x128:
  linear.py @ed53795b ~14.9k, ~25.5k) is NOT counted: the profile's fp8 GEMM rows time TRT-LLM's whole FP8
  linear op, quantisation included (calibration/fp8_scale.py).
* MoE routing: one kernel (`renorm_moe_routing_op`, Qwen3-MoE and gpt-oss's Renormalize), two for DeepSeek
  (sigmoid + bias under torch.compile, `noaux_tc_op`: modeling_deepseekv3.py ~9-20k), plus its shared
  expert's SiLU x mul and the shared + routed add (~24.0k). The fused-MoE op's own launches are in its
  measured table (the profile's `moe` section floor).
* MLA (attention.py @c6d3bb2a ~31.9k, ~48.9k, ~15.2k): q_a and kv_a layernorms (2), the latent concat (1),
  RoPE + latent-KV append (1), and with fp8 weights the batched quantisation before the k_b and v_b BMMs (2).

Other model classes on TRT-LLM, and vLLM and SGLang, keep the generic count (not derived). The count was read for
Hopper (the QGMMA XQA condition is SM90's) and is used as is on other GPUs (not read for them).
"""
from __future__ import annotations

TRTLLM = "trtllm-pytorch"  # Framework.misc_rule of TensorRT-LLM's PyTorch backend

# HF model_type -> the TRT-LLM decoder layer class whose fusions apply
_FAMILY = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "gpt_oss": "gpt_oss",
           "deepseek_v3": "deepseek_v3", "kimi_k2": "deepseek_v3"}
_AR_FUSION = {"qwen3_moe", "gpt_oss", "deepseek_v3"}  # norms fused into the all-reduces at attention TP > 1
_LLAMA_FUSION_ABOVE_HIDDEN = 4096  # Llama fuses only when hidden_size > 4096


def trtllm_per_layer(spec, attn_tp: int, moe: bool) -> int | None:
    """Misc kernels of one decode layer of `spec` on TRT-LLM's PyTorch backend at attention TP `attn_tp`
    (`moe`: an MoE layer, else a dense one); None for a model class not read (the generic count applies)."""
    fam = _FAMILY.get(spec.model_type)
    if fam is None:
        return None
    fused = attn_tp > 1 and (fam in _AR_FUSION or (fam == "llama" and spec.hidden_size > _LLAMA_FUSION_ABOVE_HIDDEN))
    n = 0 if fused else 2  # NORM x 2
    if fam == "deepseek_v3":
        n += 4 + (2 if spec.weight_dtype == "fp8" else 0)  # MLA: 2 norms, concat, RoPE + latent append, BMM quants
        return n + (2 + 2 if moe else 1)  # routing x 2, shared-expert ACT + add; a dense layer's ACT
    if fam in ("qwen3", "qwen3_moe"):
        n += 2  # fused_qk_norm_rope + KV append
    elif fam == "gpt_oss":
        n += 1  # YaRN: ROPE/KV apart
    else:  # llama: ROPE/KV in the QGMMA XQA kernel with an fp8 KV cache
        n += 0 if spec.kv_dtype == "fp8" else 1
    return n + 1  # an MoE layer's routing (its experts' activation is inside the fused-MoE op), a dense one's ACT


def per_layer(fw, spec, attn_tp: int, moe: bool) -> int:
    """Misc kernels per layer under `fw`: its rule where it has one for this model, else its generic count."""
    if fw.misc_rule == TRTLLM:
        n = trtllm_per_layer(spec, attn_tp, moe)
        if n is not None:
            return n
    return fw.misc_kernels_per_layer
