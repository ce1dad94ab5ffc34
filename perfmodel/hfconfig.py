"""Reading a Hugging Face config.json into ModelSpec fields, family by family.

Each family spells the same structure with different keys (experts: `num_local_experts`,
`num_experts`, `n_routed_experts`; sliding layers: `layer_types`, `sliding_window_pattern`,
or none at all). What a ModelSpec cannot cost correctly is refused with the field's name,
never read as something else (issue 15: DeepSeek-V3 was read as a 38.6B dense model).
"""
from __future__ import annotations

# Config keys vLLM reads a model's length from; the smallest one present wins (vllm/config.py,
# _get_and_verify_max_len, vLLM 0.9: "OPT, GPT-2, MPT, ChatGLM2, Command-R, Whisper, others").
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
DEFAULT_MAX_MODEL_LEN = 2048  # vLLM's assumption (with a warning) when a config has none of the keys

# Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2/K2.5): K/V are one low-rank latent per token
# (kv_lora_rank + qk_rope_head_dim elements a layer), read into the ModelSpec MLA fields (issue 18; costs:
# perfmodel/mla.py, docs/mla.md). q_lora_rank may be null (DeepSeek-V2-Lite: q projected directly).
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MLA_NEEDED = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
# Hybrid linear attention (Qwen3-Next, Qwen3.5: Gated DeltaNet layers between gated full-attention ones): the
# families whose `linear_*` fields are read (linear_fields); `mamba_ssm_dtype` -> bytes of the recurrent state
LINEAR_FAMILIES = ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_text")
SSM_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
# MoE families whose every decoder layer is MoE with no shared expert (HF modeling_*.py). MiniMax-M2
# (M2, M2.1, M2.5): Mixtral's layout with sigmoid routing; its per-expert width is `intermediate_size`,
# its expert count `num_local_experts`; the e_score_correction_bias (one float per expert), the per-layer
# q/k RMSNorms (use_qk_norm: 7,168 weights a layer) and the MTP modules (use_mtp, num_mtp_modules: not
# decoder layers, run only for speculative decoding) are not counted or costed.
ALL_MOE_FAMILIES = ("mixtral", "gpt_oss", "phimoe", "olmoe", "minimax_m2")
# MiniMax's attn_type_list: 1 is softmax (full) attention; 0 is the lightning (linear) attention of
# MiniMax-Text-01 / M1, whose state is not a KV cache, so it is refused.
MINIMAX_FULL_ATTENTION = 1


def text_config(cfg: dict) -> dict:
    """The language model's config: `text_config` of multimodal wrappers (Llama-4, Gemma-3)."""
    if "text_config" not in cfg:
        return cfg
    text = {**cfg["text_config"]}
    if cfg.get("tie_word_embeddings") is not None:
        text.setdefault("tie_word_embeddings", cfg["tie_word_embeddings"])
    text.setdefault("model_type", cfg.get("model_type", ""))
    return text


def config_name(text: dict, name: str = "") -> str:
    """The name errors and specs use: the caller's, else the config's own."""
    return name or text.get("_name_or_path") or text.get("model_type") or "model"


def derived_max_model_len(cfg: dict) -> int:
    """The max_model_len vLLM derives from a (text) config, as in vllm/config.py
    _get_and_verify_max_len (vLLM 0.9): the smallest of MAX_LEN_KEYS (`model_max_length` wins when
    present), else 2048; then RoPE scaling: types "llama3", "longrope" and "su" keep it (the config's
    max_position_embeddings is already the extended length: Llama-3.1's 131072 with factor 8 over
    8192), "yarn" gives original_max_position_embeddings x factor, any other type (linear, dynamic)
    gives the length x factor ("default" has no factor: x 1); Gemma-3 configs are already scaled."""
    lens = [int(cfg[k]) for k in MAX_LEN_KEYS if cfg.get(k) is not None]
    n = int(cfg["model_max_length"]) if cfg.get("model_max_length") else min(lens, default=DEFAULT_MAX_MODEL_LEN)
    rope = cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"  # "type": the key before transformers 4.45
    if rope and kind not in ("su", "longrope", "llama3") and "gemma3" not in cfg.get("model_type", ""):
        if kind == "yarn":
            n = int(rope["original_max_position_embeddings"])
        n = int(n * float(rope.get("factor", 1.0)))
    return n


def check_modelled(cfg: dict, name: str) -> None:
    """Raise ValueError naming the first field whose structure the cost model does not cover: an MLA
    config missing one of the shapes the latent needs (MLA_NEEDED) is not read as GQA."""
    if any(cfg.get(k) for k in MLA_KEYS):
        for k in MLA_NEEDED:
            if not cfg.get(k):
                raise ValueError(f"{name}: MLA config (it has {', '.join(x for x in MLA_KEYS if cfg.get(x))}) "
                                 f"lacks {k}={cfg.get(k)!r}, which the latent KV and its costs need")


def mla_fields(cfg: dict) -> dict:
    """ModelSpec MLA fields of a (text) config; {} for a GQA one. The MTP modules of DeepSeek-V3/R1
    (num_nextn_predict_layers: 1, 14B with its own embedding) are not decoder layers, run only for
    speculative decoding, and are neither counted nor costed (the model card's 671B leaves them out too)."""
    if not cfg.get("kv_lora_rank"):
        return {}
    nope, rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
    # num_kv_heads = num_heads (HF DeepSeek configs say num_key_value_heads = 128): after the K/V
    # up-projection every head has its own K (nope+rope = 192 dims, head_dim) and V (v_head_dim)
    return dict(kv_lora_rank=int(cfg["kv_lora_rank"]), q_lora_rank=int(cfg.get("q_lora_rank") or 0),
                qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=int(cfg["v_head_dim"]),
                head_dim=nope + rope, num_kv_heads=int(cfg["num_attention_heads"]))


def linear_fields(cfg: dict, mt: str, layers: int, name: str) -> dict:
    """ModelSpec hybrid-linear-attention fields: which layers are Gated DeltaNet (`layer_types` "linear_attention",
    else every layer but each full_attention_interval-th, HF Qwen3NextConfig) and their head shapes; {} for a
    config without linear layers. Linear layers of another family are refused with the field named."""
    types = cfg.get("layer_types")
    if types is not None:
        n_lin = types.count("linear_attention")
    elif cfg.get("full_attention_interval") and mt in LINEAR_FAMILIES:
        k = int(cfg["full_attention_interval"])
        n_lin = sum(1 for i in range(layers) if (i + 1) % k)
    else:
        n_lin = 0
    if not n_lin:
        return {}
    if mt not in LINEAR_FAMILIES:
        raise ValueError(f"{name}: layer_types ['linear_attention'] of model_type {mt!r} not modelled (only the "
                         f"Gated DeltaNet of {', '.join(LINEAR_FAMILIES)})")
    try:
        f = dict(num_linear_layers=n_lin, linear_key_heads=int(cfg["linear_num_key_heads"]),
                 linear_value_heads=int(cfg["linear_num_value_heads"]), linear_key_dim=int(cfg["linear_key_head_dim"]),
                 linear_value_dim=int(cfg["linear_value_head_dim"]), linear_conv_kernel=int(cfg["linear_conv_kernel_dim"]))
    except KeyError as e:
        raise ValueError(f"{name}: linear-attention config lacks {e.args[0]!r}") from None
    dtype = str(cfg.get("mamba_ssm_dtype") or "float32")
    if dtype not in SSM_DTYPE_BYTES:
        raise ValueError(f"{name}: mamba_ssm_dtype={dtype!r} not one of {sorted(SSM_DTYPE_BYTES)}")
    return {**f, "linear_state_bytes": SSM_DTYPE_BYTES[dtype]}


def dsa_fields(cfg: dict, name: str) -> dict:
    """ModelSpec DeepSeek-sparse-attention fields (DeepSeek-V3.2, GLM-5: `index_topk` keys per query picked by
    a lightning indexer of `index_n_heads` x `index_head_dim`); {} without it. DSA is read on MLA only (the
    indexer scores MLA latents); elsewhere it is refused with the field named."""
    if not cfg.get("index_topk"):
        return {}
    if not cfg.get("kv_lora_rank"):
        raise ValueError(f"{name}: index_topk={cfg['index_topk']} (sparse attention) without MLA (kv_lora_rank) "
                         f"is not modelled")
    for k in ("index_n_heads", "index_head_dim"):
        if not cfg.get(k):
            raise ValueError(f"{name}: sparse attention (index_topk={cfg['index_topk']}) lacks {k}={cfg.get(k)!r}")
    return dict(sparse_topk=int(cfg["index_topk"]), indexer_heads=int(cfg["index_n_heads"]),
                indexer_head_dim=int(cfg["index_head_dim"]))


def moe_fields(cfg: dict, mt: str, layers: int, name: str) -> dict:
    """Expert count, top-k, MoE layer count and FFN widths (routed, shared, dense) of an MoE config;
    {} for a dense one. Layer rules as in each family's HF modeling file."""
    n_exp = int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    if not n_exp:
        return {}
    topk = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0)
    ffn = int(cfg.get("intermediate_size") or 0)
    if cfg.get("n_routed_experts"):
        # DeepSeek-MoE/V2/V3/R1, Kimi-K2/K2.5 (deepseek_v3, kimi_k2): layer i is MoE when i >=
        # first_k_dense_replace and i % moe_layer_freq == 0 (the first ones are dense, intermediate_size wide);
        # HF runs the n_shared_experts as one MLP of width n_shared x moe_intermediate_size; the router's
        # e_score_correction_bias (one float per expert) is not counted
        first = int(cfg.get("first_k_dense_replace") or 0)
        freq = int(cfg.get("moe_layer_freq") or 1)
        moe_ffn = int(cfg["moe_intermediate_size"])
        n_moe = sum(1 for i in range(layers) if i >= first and i % freq == 0)
        shared, dense = int(cfg.get("n_shared_experts") or 0) * moe_ffn, ffn
    elif mt in ("qwen2_moe", "qwen3_moe") or mt in LINEAR_FAMILIES:
        # MoE where (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers; Qwen2-MoE's shared expert
        # has its own width (its 1-wide sigmoid gate is not counted)
        step = int(cfg.get("decoder_sparse_step") or 1)
        skip = set(cfg.get("mlp_only_layers") or [])
        n_moe = sum(1 for i in range(layers) if i not in skip and (i + 1) % step == 0)
        moe_ffn = int(cfg.get("moe_intermediate_size") or ffn)
        shared, dense = int(cfg.get("shared_expert_intermediate_size") or 0), ffn
    elif mt.startswith("llama4"):
        # MoE layers: `moe_layers`, else every interleave_moe_layer_step-th (Scout 1, Maverick 2); routed and
        # shared experts are intermediate_size wide, dense layers intermediate_size_mlp. The chunked
        # attention (attention_chunk_size, 3 of 4 layers) is costed as full attention: exact within one
        # chunk; ModelSpec.attention_chunk_tokens makes runs refuse longer requests
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        n_moe = len(cfg["moe_layers"]) if cfg.get("moe_layers") is not None else len(range(step - 1, layers, step))
        moe_ffn, shared, dense = ffn, ffn, int(cfg.get("intermediate_size_mlp") or ffn)
    elif mt in ALL_MOE_FAMILIES:
        if cfg.get("shared_intermediate_size"):  # MiniMax-Text-01/M1's shared expert; HF MiniMax-M2 has none
            raise ValueError(f"{name}: shared_intermediate_size={cfg['shared_intermediate_size']} (a shared "
                             f"expert) is not part of the {mt!r} layout we read (HF modeling_{mt}.py has none)")
        n_moe, moe_ffn, shared, dense = layers, ffn, 0, 0
    else:
        raise ValueError(f"{name}: MoE config of model_type {mt!r} (num_experts={n_exp}) is not a family whose "
                         f"MoE layers we know how to read ({', '.join(ALL_MOE_FAMILIES)}, qwen2_moe, qwen3_moe, "
                         f"deepseek, llama4)")
    if not topk:
        raise ValueError(f"{name}: MoE config with {n_exp} experts has no num_experts_per_tok")
    return dict(num_experts=n_exp, experts_per_token=topk, num_moe_layers=n_moe, intermediate_size=moe_ffn,
                shared_expert_size=shared, dense_intermediate_size=dense)


def sliding_fields(cfg: dict, mt: str, layers: int, name: str) -> tuple[int, int]:
    """(sliding_window, num_sliding_layers). Which layers slide, as in transformers' configs:
    `layer_types` when given (gpt-oss, newer saves); else `sliding_window_pattern` p (Gemma-3, Cohere2:
    layer i slides unless (i+1) % p == 0); else Gemma-2 alternates (even layers slide); else Qwen2's
    `use_sliding_window` (layers from max_window_layers on); else every layer (Mistral, Mixtral, Phi-3).
    MiniMax-M2 has none (any `sliding_window` is unused by HF), MiniMax's `attn_type_list` must be all full."""
    types = cfg.get("layer_types")
    if types is not None:
        if len(types) != layers or set(types) - set(LAYER_TYPES):
            bad = sorted(set(types) - set(LAYER_TYPES)) or [f"{len(types)} entries for {layers} layers"]
            raise ValueError(f"{name}: layer_types {bad} not modelled (only {', '.join(LAYER_TYPES)})")
    minimax_types = cfg.get("attn_type_list")
    if minimax_types is not None and (len(minimax_types) != layers
                                      or set(minimax_types) != {MINIMAX_FULL_ATTENTION}):
        bad = (sorted(set(minimax_types) - {MINIMAX_FULL_ATTENTION})
               or [f"{len(minimax_types)} entries for {layers} layers"])
        raise ValueError(f"{name}: attn_type_list {bad} not modelled (only {MINIMAX_FULL_ATTENTION}, full softmax "
                         f"attention; 0 is MiniMax's lightning/linear attention, which keeps no KV cache)")
    window = int(cfg.get("sliding_window") or 0)
    if mt == "minimax_m2":  # HF MiniMaxM2Model: "No sliding window opposed to mixtral" (plain causal mask)
        window = 0
    if not window or cfg.get("use_sliding_window") is False:  # Qwen2/3 carry a window that is off
        return 0, 0
    if types is not None:
        n = types.count("sliding_attention")
    elif cfg.get("sliding_window_pattern"):
        p = int(cfg["sliding_window_pattern"])
        n = sum(1 for i in range(layers) if (i + 1) % p)
    elif mt == "gemma2":
        n = (layers + 1) // 2
    elif cfg.get("use_sliding_window"):
        n = max(layers - int(cfg.get("max_window_layers") or 0), 0)
    else:
        n = layers
    return (window, n) if n else (0, 0)


def spec_fields(cfg: dict, name: str = "") -> dict:
    """ModelSpec keyword arguments (all but the dtypes) of a parsed config.json (MLA fields included)."""
    cfg = text_config(cfg)
    mt = cfg.get("model_type", "")
    name = config_name(cfg, name)
    try:
        d = int(cfg["hidden_size"])
        layers = int(cfg["num_hidden_layers"])
        nh = int(cfg["num_attention_heads"])
        vocab = int(cfg["vocab_size"])
    except KeyError as e:
        raise ValueError(f"config {name}: missing field {e.args[0]!r}") from None
    window, n_sliding = sliding_fields(cfg, mt, layers, name)
    fields = dict(
        name=name, model_type=mt, num_layers=layers, hidden_size=d, num_heads=nh,
        num_kv_heads=int(cfg.get("num_key_value_heads") or nh), head_dim=int(cfg.get("head_dim") or d // nh),
        intermediate_size=int(cfg.get("intermediate_size") or 0), vocab_size=vocab,
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
        max_model_len=derived_max_model_len(cfg),
        qkv_bias=bool(cfg.get("attention_bias", mt == "qwen2")),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", mt.startswith("gemma"))),  # Gemma configs omit it:
        # transformers' Gemma*Config defaults it to True, every other family here to False
        sliding_window=window, num_sliding_layers=n_sliding,
        attention_chunk_tokens=int(cfg.get("attention_chunk_size") or 0) if mt.startswith("llama4") else 0)
    check_modelled(cfg, name)
    fields["attn_output_gate"] = bool(cfg.get("attn_output_gate"))  # Qwen3-Next / 3.5: q_proj also emits a gate
    return {**fields, **moe_fields(cfg, mt, layers, name), **mla_fields(cfg), **dsa_fields(cfg, name),
            **linear_fields(cfg, mt, layers, name)}

