"""Hugging Face configs of every MoE / sliding-window / MLA family read right, or refused (issue 15, item 1).

The fixtures in tests/fixtures/configs/ are hand-written copies of each model's published config.json
on the Hugging Face hub (deepseek-ai/DeepSeek-V3, mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x22B-v0.1,
Qwen/Qwen3-30B-A3B, openai/gpt-oss-120b, meta-llama/Llama-4-Scout-17B-16E, google/gemma-2-9b,
google/gemma-3-1b-it; long lists such as gpt-oss's layer_types and Llama-4's no_rope_layers written out
from their pattern). Parameter counts use ModelSpec's definition, as tests/test_perfmodel_specs.py does.
"""
import json
from pathlib import Path

import pytest

from perfmodel.hfconfig import spec_fields
from perfmodel.modelspec import load_model, param_count

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def cfg(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def llama4_vision_params(c: dict) -> int:
    """Llama-4's vision tower + projector (HF Llama4VisionModel, Llama4MultiModalProjector), which the
    card's 109B total includes and the language-model count leaves out: ~0.87B for Scout."""
    v = c["vision_config"]
    d, f, L = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]
    patches = (v["image_size"] // v["patch_size"]) ** 2 + 1  # + class token
    layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 4 * d  # q,k,v,o (+bias), fc1, fc2, 2 LayerNorms
    stem = v["num_channels"] * v["patch_size"] ** 2 * d + d + patches * d + 4 * d  # patch, class, pos, 2 LNs
    shuffled = int(d / v["pixel_shuffle_ratio"] ** 2)  # pixel shuffle: 4 patches -> one 4d vector
    adapter = shuffled * v["projector_input_dim"] + v["projector_input_dim"] * v["projector_output_dim"]
    return L * layer + stem + adapter + v["vision_output_dim"] * c["text_config"]["hidden_size"]  # projector


# Model-card totals / active counts in billions. Totals are checked to 1%. Active counts are given by the
# cards to two significant digits (37B, 17B, 3.3B, 5.1B), whose rounding alone is up to 1.5%, and the cards
# disagree on counting the input embedding, so active is checked to 2% with one definition
# (ModelSpec.num_active_params) except where the card states its own (gpt-oss: matmul params, no embedding).
CARDS = {
    # DeepSeek-V3 card: "671B total parameters with 37B activated" (the 685B on the hub adds the 14B MTP
    # module, num_nextn_predict_layers, which serving without speculation does not run)
    "deepseek-v3": (671.0, 37.0),
    "mistral-7b-v0.1": (7.24, None),  # hub: 7.24B params (safetensors)
    "mixtral-8x22b-v0.1": (141.0, 39.0),  # Mistral's release: 141B total, 39B active
    "qwen3-30b-a3b": (30.5, 3.3),  # card: "30.5B in total and 3.3B activated"
    "gpt-oss-120b": (116.83, 5.13),  # OpenAI card table: 116.83B total, 5.13B active per token
    "llama-4-scout-17b-16e": (109.0, 17.0),  # card: 17B activated, 109B total (vision tower included)
    "gemma-2-9b": (9.24, None),  # hub: 9.24B params (tied embeddings)
    "gemma-3-1b": (1.0, None),  # card: 1B
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_param_counts_match_model_cards(name):
    total, active = param_count(cfg(name))
    if name.startswith("llama-4"):
        total += llama4_vision_params(cfg(name))
    card_total, card_active = CARDS[name]
    assert total / 1e9 == pytest.approx(card_total, rel=0.01)
    if name == "gpt-oss-120b":
        active = load_model(str(FIXTURES / f"{name}.json")).matmul_params_per_token
    if card_active:
        assert active / 1e9 == pytest.approx(card_active, rel=0.02)


def test_deepseek_v3_moe_structure_read():
    # Before: 38.6B dense, head_dim 56 (7168/128), no experts.
    f = spec_fields(cfg("deepseek-v3"))
    assert (f["num_experts"], f["experts_per_token"]) == (256, 8)
    assert f["num_moe_layers"] == 61 - 3  # first_k_dense_replace=3 dense layers
    assert (f["intermediate_size"], f["shared_expert_size"], f["dense_intermediate_size"]) == (2048, 2048, 18432)


def test_deepseek_v3_mla_read():
    # issue 18: MLA is modelled (tests/test_mla.py has its counts and costs); before, it was refused
    spec = load_model(str(FIXTURES / "deepseek-v3.json"))
    assert spec.is_mla and (spec.kv_lora_rank, spec.q_lora_rank, spec.head_dim) == (512, 1536, 192)


def test_incomplete_mla_config_refused_with_field_named():
    c = {k: v for k, v in cfg("deepseek-v3").items() if k != "v_head_dim"}
    with pytest.raises(ValueError, match=r"MLA config .* lacks v_head_dim=None"):
        spec_fields(c)


def test_deepseek_moe_without_mla_loads(tmp_path):
    # A DeepSeek-MoE layout with GQA attention (DeepSeek-MoE-16B style) is modelled: shared experts and
    # first dense layers enter the counts; top-k over routed experts only.
    c = {k: v for k, v in cfg("deepseek-v3").items() if k not in
         ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(c))
    spec = load_model(str(p))
    one_expert = 3 * 7168 * 2048
    routed = 58 * (256 - 8) * one_expert
    assert spec.num_params - spec.num_active_params == routed


def test_mistral_keeps_sliding_window_on_every_layer():
    spec = load_model(str(FIXTURES / "mistral-7b-v0.1.json"))
    assert (spec.sliding_window, spec.num_sliding_layers) == (4096, 32)  # before: (0, 0)
    assert spec.kv_bytes_for_context(10_000) == spec.kv_bytes_for_context(4096)


def test_gpt_oss_alternation_read():
    spec = load_model(str(FIXTURES / "gpt-oss-120b.json"))
    assert (spec.sliding_window, spec.num_sliding_layers, spec.num_layers) == (128, 18, 36)
    assert (spec.num_experts, spec.experts_per_token, spec.num_moe_layers) == (128, 4, 36)


@pytest.mark.parametrize("name, window, sliding", [
    ("gemma-3-1b", 512, 26 - 4),  # sliding_window_pattern=6: layers 5, 11, 17, 23 are global
    ("gemma-2-9b", 4096, 21),  # Gemma-2 alternates, even layers sliding (no key says so)
])
def test_gemma_sliding_pattern_read(name, window, sliding):
    spec = load_model(str(FIXTURES / f"{name}.json"))
    assert (spec.sliding_window, spec.num_sliding_layers) == (window, sliding)  # before: (0, 0)
    assert spec.tie_embeddings  # absent from Gemma configs; transformers defaults it to True


def test_qwen_window_that_is_off_stays_off():
    spec = load_model(str(FIXTURES / "qwen3-30b-a3b.json"))
    assert (spec.sliding_window, spec.num_moe_layers) == (0, 48)
    c = {**cfg("qwen3-30b-a3b"), "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 40}
    assert spec_fields(c)["num_sliding_layers"] == 48 - 40  # Qwen2/3: layers from max_window_layers on


def test_llama4_layers():
    spec = load_model(str(FIXTURES / "llama-4-scout-17b-16e.json"))
    assert (spec.num_moe_layers, spec.shared_expert_size, spec.dense_intermediate_size) == (48, 8192, 16384)
    c = cfg("llama-4-scout-17b-16e")
    c["text_config"] = {**c["text_config"], "interleave_moe_layer_step": 2}  # Maverick's layout
    assert spec_fields(c)["num_moe_layers"] == 24


@pytest.mark.parametrize("change, field", [
    ({"layer_types": ["linear_attention", "full_attention"] * 24}, "linear_attention"),  # Qwen3-Next
    ({"model_type": "jamba"}, "'jamba'"),  # MoE every expert_layer_period-th layer: not read
])
def test_unknown_structure_refused(change, field):
    with pytest.raises(ValueError, match=field):
        spec_fields({**cfg("qwen3-30b-a3b"), **change})


def test_cli_refuses_sp_over_mla_with_one_line(capsys):
    # issue 18: MLA models run; Ulysses SP over one is refused naming the field (layout.validate)
    from perfmodel.cli import main as perfmodel_main
    model = str(FIXTURES / "deepseek-v3.json")
    rc = perfmodel_main(["estimate", "--model", model, "--strategies", "sp=8", "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and cap.err.startswith("error: ") and cap.err.count("\n") == 1
    assert "sp=8 (Ulysses) over MLA attention (kv_lora_rank=512)" in cap.err


def test_llama4_chunked_attention_is_refused_past_one_chunk(capsys, tmp_path):
    """Llama-4's chunked local attention (attention_chunk_size, 3 of 4 layers) is costed as full
    attention, exact only within one chunk: longer requests are refused naming the field (estimate:
    an error; simulate: a reject reason), shorter ones run as before."""
    from perfmodel.cli import main as perfmodel_main
    from simulator.apps.cli import main as simulate_main

    spec = load_model("llama-4-scout-17b-16e")
    assert spec.attention_chunk_tokens == 8192 and load_model("llama-3.3-70b").attention_chunk_tokens == 0
    base = ["estimate", "--model", "llama-4-scout-17b-16e", "--strategies", "tp", "--format", "json"]
    assert perfmodel_main(base + ["--input", "9000", "--output", "100"]) == 2
    assert "attention_chunk_size=8192" in capsys.readouterr().err
    assert perfmodel_main(base + ["--input", "4000", "--output", "100"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["max_context_tokens"] == 8192
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,4000,10\n0.1,9000,10\n")
    assert simulate_main(["--trace", str(trace), "--model", "llama-4-scout-17b-16e", "--policy", "tp",
                          "--format", "json"]) == 0
    summ = json.loads(capsys.readouterr().out)
    assert summ["completed"] == 1 and summ["rejected"] == 1
    assert any(r.startswith("attention_chunk_size") for r in summ["rejected_reasons"])


def test_mistral_window_changes_what_the_cli_reports(capsys, tmp_path):
    """From the command line: Mistral-7B's 4096-token window makes a decode at 8K of context read half
    the keys, so its TPOT is below that of the same config without the window (the old reader dropped
    the window and printed the same number for both)."""
    from perfmodel.cli import main as perfmodel_main

    cfg = json.loads((FIXTURES / "mistral-7b-v0.1.json").read_text())
    no_window = tmp_path / "mistral-no-window.json"
    no_window.write_text(json.dumps({k: v for k, v in cfg.items() if k != "sliding_window"}))
    tpot = {}
    for label, path in (("window", FIXTURES / "mistral-7b-v0.1.json"), ("none", no_window)):
        assert perfmodel_main(["estimate", "--model", str(path), "--hardware", "h100", "--gpus", "1", "--weights",
                               "bf16", "--input", "8000", "--output", "100", "--strategies", "tp", "--format",
                               "json", "--profile", "none"]) == 0
        tpot[label] = json.loads(capsys.readouterr().out)[0]["tpot_ms"]
    assert tpot["window"] < tpot["none"]
