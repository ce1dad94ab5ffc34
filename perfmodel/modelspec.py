"""ModelSpec: the shapes of a decoder-only LLM, read from a Hugging Face config.json.

Only shapes live here (no weights); reading a config, family by family, is hfconfig.py. Parameter
counts, FLOPs and bytes per token are derived from them, so every number the perf model uses can be
traced to a config file.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .formats import (CHECKPOINT_WEIGHTS, DTYPE_BYTES, EXPERTS_ONLY,  # noqa: F401 (re-export)
                      FP8_SCALES, WEIGHT_CHOICES, config_fp8_scales, config_weights)
from .hfconfig import config_name, derived_max_model_len, spec_fields, text_config  # noqa: F401 (re-export)
from .hfids import HF_IDS  # noqa: F401 (re-export)
from . import layer_shapes

MODELS_DIR = Path(__file__).parent / "models"



@dataclasses.dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of one decoder-only transformer plus its weight and KV storage dtypes."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense FFN width (per expert for MoE layers: moe_intermediate_size)
    vocab_size: int
    max_position_embeddings: int
    max_model_len: int  # longest request (prompt + output) vLLM serves: derived_max_model_len(config)
    num_experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    num_moe_layers: int = 0
    shared_expert_size: int = 0  # FFN width of the always-on shared expert(s) (Llama-4, Qwen2-MoE, DeepSeek)
    dense_intermediate_size: int = 0  # FFN width of the dense (non-MoE) layers of an MoE model
    qkv_bias: bool = False
    tie_embeddings: bool = False
    sliding_window: int = 0  # window of sliding-attention layers (0: none)
    num_sliding_layers: int = 0
    # chunked local attention (Llama-4's attention_chunk_size on 3 of 4 layers): costed as full attention, which it
    # is while a request's context stays in one chunk; longer requests are refused naming the field until modelled
    attention_chunk_tokens: int = 0
    # multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; 0: GQA). The KV cache holds one latent of
    # kv_lora_rank + qk_rope_head_dim elements per token per layer; head_dim = nope + rope (q/k width),
    # num_kv_heads = num_heads (K/V after the up-projection). Costs: perfmodel/mla.py, docs/mla.md
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: q projected straight from the hidden state (no q_a/q_b low rank)
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5; 0: dense): a lightning indexer (indexer_heads x
    # indexer_head_dim, fp8) scores every cached key and each query attends to its top sparse_topk only.
    # Costs: perfmodel/mla.py (indexer_s), docs/mla.md
    sparse_topk: int = 0
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    # hybrid linear attention (Qwen3-Next, Qwen3.5): num_linear_layers Gated DeltaNet layers, no KV cache but a
    # recurrent state per sequence (perfmodel/linear_attn.py), the rest full attention
    num_linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0
    linear_state_bytes: float = 4.0  # mamba_ssm_dtype's bytes
    attn_output_gate: bool = False  # full-attention q_proj also emits a per-head output gate (Qwen3-Next / 3.5)
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    fp8_scales: str = "dynamic"  # fp8 activation scales, formats.FP8_SCALES (static: calibrated in the checkpoint)
    model_type: str = ""  # the config's model_type (its text config's): which decoder-layer class a framework runs

    def __post_init__(self):
        for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
                  "max_model_len"):
            if getattr(self, f) <= 0:
                raise ValueError(f"model {self.name}: {f}={getattr(self, f)} must be > 0")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name}: num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        for f, ok in (("weight_dtype", DTYPE_BYTES), ("kv_dtype", DTYPE_BYTES), ("fp8_scales", FP8_SCALES)):
            if getattr(self, f) not in ok:
                raise ValueError(f"model {self.name}: {f}={getattr(self, f)!r} not one of {sorted(ok)}")
        if self.kv_lora_rank and min(self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) <= 0:
            raise ValueError(f"model {self.name}: MLA (kv_lora_rank={self.kv_lora_rank}) needs qk_nope_head_dim="
                             f"{self.qk_nope_head_dim}, qk_rope_head_dim={self.qk_rope_head_dim}, "
                             f"v_head_dim={self.v_head_dim} all > 0")
        if self.num_experts and not (0 < self.experts_per_token <= self.num_experts):
            raise ValueError(f"model {self.name}: experts_per_token={self.experts_per_token} "
                             f"must be in 1..num_experts={self.num_experts}")

    # ---- storage --------------------------------------------------------------------
    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes of a routed-expert parameter (and of every linear layer's, except under mxfp4)."""
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def dense_weight_dtype(self) -> str:
        """Weight format of attention projections, dense FFNs and shared experts. mxfp4 (gpt-oss's scheme)
        quantises the routed experts only: vLLM's Mxfp4Config gives FusedMoE layers its MoE method and
        every other linear layer the unquantised one, and gpt-oss's quantization_config keeps self_attn,
        the router, the embedding and the LM head out (`modules_to_not_convert`). So does int4 as
        Kimi-K2.5 ships it (compressed-tensors `ignore`: self_attn, shared_experts, the dense MLPs,
        lm_head). fp8 checkpoints quantise every linear layer."""
        return "bf16" if self.weight_dtype in EXPERTS_ONLY else self.weight_dtype

    @property
    def attn_weight_dtype(self) -> str:
        """Weight format of the attention projections but the output one (q/k/v; MLA's q_a/q_b/kv_a/kv_b):
        bf16 under the experts-only schemes and for MLA under nvfp4 (perfmodel/formats.py)."""
        if self.weight_dtype == "nvfp4":
            return "bf16" if self.is_mla else "nvfp4"
        return self.dense_weight_dtype

    @property
    def o_proj_weight_dtype(self) -> str:
        """Weight format of the attention output projection (quantised in ModelOpt's NVFP4 MLA checkpoints)."""
        return "nvfp4" if self.weight_dtype == "nvfp4" else self.attn_weight_dtype

    @property
    def o_proj_params_per_layer(self) -> float:
        """Attention output projection: (h * v) x d (MLA), q_size x d (GQA); hybrid: the mean with the linear
        layers' out_proj, (value heads x value dim) x d."""
        o = (self.num_heads * self.v_head_dim if self.is_mla else self.q_size) * self.hidden_size
        if self.num_linear_layers:
            return layer_shapes.hybrid_mean(self, o, self.linear_value_heads * self.linear_value_dim * self.hidden_size)
        return o

    @property
    def num_kv_layers(self) -> int:
        """Layers that cache keys and values (all but the linear-attention ones)."""
        return self.num_layers - self.num_linear_layers

    @property
    def attn_bytes_per_layer(self) -> float:
        """Attention weight bytes of one layer (o_proj in its own format)."""
        o = self.o_proj_params_per_layer
        return (self.attn_params_per_layer - o) * DTYPE_BYTES[self.attn_weight_dtype] \
            + o * DTYPE_BYTES[self.o_proj_weight_dtype]

    @property
    def routed_expert_params(self) -> int:
        return self.num_moe_layers * self.num_experts * self.ffn_params(self.intermediate_size)

    @property
    def ffn_bytes_total(self) -> float:
        """FFN weight bytes of the whole model: routed experts in weight_dtype, the rest in dense_weight_dtype."""
        routed = self.routed_expert_params
        return routed * self.weight_bytes_per_param + (self.ffn_params_total - routed) * DTYPE_BYTES[self.dense_weight_dtype]

    @property
    def kv_bytes_per_elem(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    # ---- parameter counts (elements) ---------------------------------------------------
    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attn_params_per_layer(self) -> float:
        """GQA: q, k, v, o projections (+ biases): d*(q + 2kv) + q*d. MLA: replicated + per-head part. Hybrid:
        the mean over the full and the linear layers (num_layers x it is the total, as every count is used)."""
        if self.num_linear_layers:
            return layer_shapes.hybrid_mean(self, self.full_attn_params_per_layer, layer_shapes.linear_params(self))
        return self.full_attn_params_per_layer

    @property
    def full_attn_params_per_layer(self) -> int:
        """attn_params_per_layer of a softmax-attention layer (a q_proj gate adds q_size x d)."""
        d = self.hidden_size
        if self.is_mla:
            h, nope, v = self.num_heads, self.qk_nope_head_dim, self.v_head_dim
            # q_b: q_rank -> h*(nope+rope) (or q_proj d -> h*(nope+rope)); kv_b: kv_rank -> h*(nope+v); o: h*v -> d
            q_b = (self.q_lora_rank or d) * h * self.head_dim
            return self.attn_params_replicated_per_layer + q_b + self.kv_lora_rank * h * (nope + v) + h * v * d
        bias = (self.q_size + 2 * self.kv_size) if self.qkv_bias else 0
        gate = self.q_size * d if self.attn_output_gate else 0
        return d * (self.q_size + 2 * self.kv_size) + self.q_size * d + bias + gate

    @property
    def attn_params_replicated_per_layer(self) -> int:
        """Attention parameters every TP rank holds whole (0 for GQA): MLA's down-projections, which are
        not split over heads: q_a d x q_rank + its RMSNorm, kv_a d x (kv_rank + rope) + its RMSNorm."""
        if not self.is_mla:
            return 0
        d, qr, kvr = self.hidden_size, self.q_lora_rank, self.kv_lora_rank
        return d * qr + qr + d * (kvr + self.qk_rope_head_dim) + kvr + self.indexer_params_per_layer

    @property
    def indexer_params_per_layer(self) -> int:
        return layer_shapes.indexer_params(self)  # (DSA's indexer; 0 without)

    @property
    def indexer_bytes_per_token_per_layer(self) -> float:
        return layer_shapes.indexer_bytes(self)  # (DSA's cached indexer key; 0 without)

    def ffn_params(self, width: int) -> int:
        """SwiGLU FFN: gate + up (d x f each) and down (f x d)."""
        return 3 * self.hidden_size * width

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def dense_ffn_width(self) -> int:
        return self.dense_intermediate_size or self.intermediate_size

    @property
    def ffn_params_total(self) -> int:
        """All FFN parameters (every expert, shared experts, routers, dense layers)."""
        moe = self.num_moe_layers * (self.num_experts * self.ffn_params(self.intermediate_size)
                                     + self.ffn_params(self.shared_expert_size)
                                     + self.hidden_size * self.num_experts)
        return moe + self.num_dense_layers * self.ffn_params(self.dense_ffn_width)

    @property
    def ffn_params_active(self) -> int:
        """FFN parameters one token touches (top-k experts + shared + router + dense layers)."""
        moe = self.num_moe_layers * (self.experts_per_token * self.ffn_params(self.intermediate_size)
                                     + self.ffn_params(self.shared_expert_size)
                                     + self.hidden_size * self.num_experts)
        return moe + self.num_dense_layers * self.ffn_params(self.dense_ffn_width)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def num_params(self) -> int:
        return (self.num_layers * self.attn_params_per_layer + self.ffn_params_total
                + self.embedding_params + self.norm_params)

    @property
    def num_active_params(self) -> int:
        return (self.num_layers * self.attn_params_per_layer + self.ffn_params_active
                + self.embedding_params + self.norm_params)

    @property
    def weight_bytes(self) -> float:
        """All weights in bytes; embeddings and norms stay bf16 when weights are fp8 (vLLM); attention in
        attn_weight_dtype / o_proj_weight_dtype (bf16 under the experts-only schemes)."""
        hi = self.embedding_params + self.norm_params
        return self.num_layers * self.attn_bytes_per_layer + self.ffn_bytes_total + hi * DTYPE_BYTES["bf16"]

    # ---- per-token costs ----------------------------------------------------------------
    @property
    def matmul_params_per_token(self) -> int:
        """Parameters multiplied per token: active params minus the input embedding lookup."""
        return self.num_active_params - self.vocab_size * self.hidden_size - self.norm_params \
            + (self.vocab_size * self.hidden_size if self.tie_embeddings else 0)

    def flops_per_token(self, context_len: float = 0.0) -> float:
        """Forward FLOPs for one token at position `context_len`: 2 x matmul params
        plus attention attn_flops_per_pair * context per layer (QK^T and PV)."""
        return 2.0 * self.matmul_params_per_token + self.attn_flops_per_pair * self.attended_tokens(context_len)

    @property
    def attn_flops_per_pair(self) -> float:
        """FLOPs of one query-key pair over all heads: GQA 2*h*d_h (QK^T) + 2*h*d_h (PV); MLA in its
        non-absorbed (prefill) form 2*h*(nope+rope) + 2*h*v (the absorbed decode form: perfmodel/mla.py)."""
        if self.is_mla:
            return 2.0 * self.num_heads * (self.head_dim + self.v_head_dim)
        return 4.0 * self.q_size

    def attended_tokens(self, context_len: float) -> float:
        """Sum over layers of the keys one query attends to, divided by layers (window-aware; linear layers none)."""
        full = self.num_kv_layers - self.num_sliding_layers
        win = min(context_len, self.sliding_window) if self.sliding_window else context_len
        return (full * context_len + self.num_sliding_layers * win) / self.num_layers

    @property
    def kv_elems_per_token_per_layer(self) -> int:
        """Cached elements of one token in one layer: GQA K and V, 2 * h_kv * d_h; MLA one latent,
        kv_lora_rank + qk_rope_head_dim (no K/V factor 2, no heads: 512 + 64 = 576 for DeepSeek-V3)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_size

    @property
    def kv_bytes_per_token(self) -> float:
        """KV of one token over all layers: L * (kv_elems_per_token_per_layer * b_kv + DSA's indexer key)
        (full-attention layers; sliding layers hold at most `sliding_window` tokens, see kv_bytes_for_context)."""
        return float(self.num_kv_layers * (self.kv_elems_per_token_per_layer * self.kv_bytes_per_elem
                                           + self.indexer_bytes_per_token_per_layer))

    def kv_bytes_for_context(self, context_len: float) -> float:
        """KV bytes of one sequence of `context_len` tokens (sliding layers capped at the window)."""
        per_layer_tok = self.kv_elems_per_token_per_layer * self.kv_bytes_per_elem + self.indexer_bytes_per_token_per_layer
        full = self.num_kv_layers - self.num_sliding_layers
        win = min(context_len, self.sliding_window) if self.sliding_window else context_len
        return per_layer_tok * (full * context_len + self.num_sliding_layers * win)


def resolve_max_model_len(spec: ModelSpec, requested: int | None) -> int:
    """The max_model_len a run uses: the model's, or `requested` (--max-model-len) as vLLM takes it:
    at most the derived length (vLLM refuses more unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, which
    its docs warn gives NaNs past the RoPE range; we keep vLLM's default, the refusal)."""
    if requested is None:
        return spec.max_model_len
    if requested < 1:
        raise ValueError(f"--max-model-len {requested} must be >= 1")
    if requested > spec.max_model_len:
        raise ValueError(f"--max-model-len {requested} is greater than the derived max_model_len "
                         f"({spec.max_model_len}) of {spec.name} (vLLM refuses it unless "
                         f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    return requested


def from_config(cfg: dict, name: str = "", weights: str = "bf16", kv: str = "bf16",
                fp8_scales: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json (families: see hfconfig); ValueError
    naming the field when the config has structure the cost model does not cover. fp8_scales None: the config's."""
    name = config_name(text_config(cfg), name)
    return ModelSpec(**spec_fields(cfg, name), weight_dtype=weights, kv_dtype=kv,
                     fp8_scales=fp8_scales or config_fp8_scales(cfg))


def param_count(cfg: dict) -> tuple[int, int]:
    """(total, active) parameters of a config.json, as ModelSpec.num_params / num_active_params count them."""
    spec = ModelSpec(**spec_fields(cfg))
    return spec.num_params, spec.num_active_params


def preset_names() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def resolve_model_path(name_or_path: str) -> Path:
    """A preset name, a Hugging Face id of a preset (case-insensitive), or a config.json path."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p / "config.json"
    key = name_or_path.lower().strip()
    key = HF_IDS.get(key, HF_IDS.get(key.removesuffix("-instruct"), key))
    cand = MODELS_DIR / f"{key}.json"
    if cand.is_file():
        return cand
    raise ValueError(f"unknown model {name_or_path!r}: not a file, not a preset "
                     f"({', '.join(preset_names())}) nor a Hugging Face id of one")


def load_model(name_or_path: str, weights: str = "bf16", kv: str = "bf16", fp8_scales: str | None = None) -> ModelSpec:
    """ModelSpec for a preset name, Hugging Face id or config.json path."""
    path = resolve_model_path(name_or_path)
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(cfg, dict):  # a JSON array or number: one line, not an AttributeError in from_config
        raise ValueError(f"{path}: expected a model's config.json (a JSON object), got {json.dumps(cfg)[:40]}")
    name = path.stem if path.parent == MODELS_DIR else str(path)
    return from_config(cfg, name=name, weights=weights, kv=kv, fp8_scales=fp8_scales)


def checkpoint_weights(name_or_path: str) -> str | None:
    """The weight format the checkpoint itself is stored in, where its config's quantization_config says
    one the model knows (CHECKPOINT_WEIGHTS, or compressed-tensors int4 in groups of 32 with attention
    left out: `int4`); None for an unquantised config or another method."""
    try:
        cfg = json.loads(resolve_model_path(name_or_path).read_text())
    except (ValueError, OSError):
        return None  # load_model reports what is wrong with it, in one line
    if not isinstance(cfg, dict):
        return None
    return config_weights(cfg)


def default_weights(name_or_path: str, has_fp8: bool) -> str:
    """--weights when none is given: the checkpoint's own format where its config declares one (serving
    engines load a quantised checkpoint as stored: an mxfp4 model is never run as fp8, and an fp8 one runs
    weight-only W8A16 on GPUs without fp8 tensor cores); else fp8 where the GPU has fp8, else bf16."""
    return checkpoint_weights(name_or_path) or ("fp8" if has_fp8 else "bf16")

