"""Hugging Face ids of the bundled model presets (perfmodel/models/*.json), each with its source."""

# Hugging Face ids of the bundled presets (matched case-insensitively, with or without -Instruct).
HF_IDS = {
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    # NVIDIA's ModelOpt FP8 quantisation of Llama-3.1-8B-Instruct (huggingface.co/nvidia/Llama-3.1-8B-Instruct-FP8):
    # the same architecture, weights and activations in fp8; pass weights="fp8" (its rows' gemm_quant_mode says so)
    "nvidia/llama-3.1-8b-instruct-fp8": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/llama-3.3-70b": "llama-3.3-70b",
    "meta-llama/llama-3-70b": "llama-3.1-70b",  # same shapes as 3.1-70B (Flying Serving's model)
    "meta-llama/llama-3.1-405b": "llama-3.1-405b",
    "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "meta-llama/llama-2-13b": "llama-2-13b",
    "meta-llama/llama-2-70b-hf": "llama-2-70b",
    "meta-llama/llama-2-70b": "llama-2-70b",
    "codellama/codellama-34b-hf": "codellama-34b",
    "codellama/codellama-34b": "codellama-34b",
    "qwen/qwen2.5-32b": "qwen2.5-32b",
    "qwen/qwen2.5-72b": "qwen2.5-72b",
    "qwen/qwen3-32b": "qwen3-32b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b",
    "meta-llama/llama-4-scout-17b-16e": "llama-4-scout-17b-16e",
    "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x7b": "mixtral-8x7b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    # qwen3-235b-a22b.json, minimax-m2.5.json: byte-identical copies of aiconfigurator's bundled
    # Qwen--Qwen3-235B-A22B_config.json and MiniMaxAI--MiniMax-M2.5_config.json (ai-dynamo/aiconfigurator
    # @095f58a5, aic-core/src/aiconfigurator_core/model_configs/). The -FP8 checkpoint has the same shapes
    # (its config adds only quantization_config); pass weights="fp8" for its weight bytes.
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen/qwen3-235b-a22b-fp8": "qwen3-235b-a22b",
    "minimaxai/minimax-m2.5": "minimax-m2.5",
    # deepseek-v3.json, deepseek-r1.json, kimi-k2.5.json: byte-identical copies of aiconfigurator's
    # deepseek-ai--DeepSeek-V3_config.json, deepseek-ai--DeepSeek-R1_config.json and
    # moonshotai--Kimi-K2.5_config.json (same commit and folder). DeepSeek's checkpoint is block-scaled fp8
    # (one fp32 scale per 128x128 block: +0.02%, not counted): weights="fp8" gives its bytes. Kimi-K2.5's
    # text_config (kimi_k2) is read, its vision tower not counted; its int4 routed experts are not modelled.
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-r1",
    "moonshotai/kimi-k2.5": "kimi-k2.5",
    # glm-5.json: a byte-identical copy of aiconfigurator's zai-org--GLM-5_config.json (same commit and folder;
    # aiconfigurator-core 0.12.0 model_configs/): MLA + DeepSeek sparse attention (index_topk 2048), 744B
    # parameters as its model card says. GLM-5-FP8 has the same shapes: pass weights="fp8" for its bytes.
    "zai-org/glm-5": "glm-5",
    "zai-org/glm-5-fp8": "glm-5",
    "zhipuai/glm-5": "glm-5",
    # qwen3.5-397b-a17b.json: a byte-identical copy of aiconfigurator's Qwen--Qwen3.5-397B-A17B_config.json (same
    # folder): 45 Gated DeltaNet + 15 gated full-attention layers, 512 experts top-10 + a shared one; 396.3B / 17.3B
    # active as the model reads it (the name's 397B-A17B). The -FP8 checkpoint has the same shapes.
    "qwen/qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
    "qwen/qwen3.5-397b-a17b-fp8": "qwen3.5-397b-a17b",
}
