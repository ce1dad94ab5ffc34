"""Context limits (issue 15, item 3): max_model_len read from the model config as vLLM derives it,
`--max-model-len` as vLLM takes it, longer requests rejected (reason context_length) and never run,
and `perfmodel estimate` separating the longest request (limit and KV) from the KV capacity."""
import json

import pytest

from perfmodel.cli import main as perfmodel_main
from perfmodel.modelspec import load_model
from simulator.apps.cli import main as simulate_main


def _trace(tmp_path, rows) -> str:
    """A canonical CSV trace of (arrival_s, input_tokens, output_tokens) rows."""
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows))
    return str(path)


def _simulate(capsys, *argv) -> dict:
    assert simulate_main([*argv, "--profile", "none", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- the model's limit ----------------------------------------------------------------------
def test_max_model_len_of_bundled_configs():
    """Llama-3.3-70B: max_position_embeddings 131072 with rope_type llama3 (factor 8 over 8192: the
    config's length is already the extended one, vLLM keeps it); Llama-2-70B: 4096, no rope scaling."""
    assert load_model("llama-3.3-70b").max_model_len == 131072
    assert load_model("llama-2-70b").max_model_len == 4096


@pytest.mark.parametrize("cfg, want", [
    ({"max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}, 131072),
    ({"max_position_embeddings": 32768,  # Qwen2.5's documented YaRN setting for 128K
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, 8192),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16384),
    ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096),  # the smallest length key wins
    ({}, 2048),  # no length key: vLLM assumes 2048
])
def test_derived_max_model_len_follows_vllm(cfg, want):
    from perfmodel.modelspec import derived_max_model_len

    assert derived_max_model_len(cfg) == want


# ---- simulate ---------------------------------------------------------------------------------
def test_prompt_past_llama33_limit_rejected_with_context_length(tmp_path, capsys):
    """A 200,000-token prompt on Llama-3.3-70B (limit 131,072) used to complete."""
    trace = _trace(tmp_path, [(0.0, 1000, 100), (0.5, 200_000, 100), (1.0, 2000, 50)])
    s = _simulate(capsys, "--trace", trace, "--policy", "tp", "--model", "llama-3.3-70b")
    assert s["completed"] == 2 and s["rejected"] == 1
    (reason, count), = s["rejected_reasons"].items()
    assert reason.startswith("context_length") and count == 1
    assert s["max_model_len"] == 131072


def test_llama2_prompt_plus_output_past_4096_rejected_and_never_run(tmp_path):
    """8,100 tokens on Llama-2-70B (limit 4,096) used to complete; prompt + output counts (vLLM's API
    server rejects prompt + max_tokens > max_model_len); a rejected request never runs a step."""
    from simulator.run import run_summary
    from simulator.workload import load_trace

    wl = load_trace(_trace(tmp_path, [(0.0, 8000, 100), (0.1, 4000, 97), (0.2, 4000, 96), (0.3, 1000, 10)]))
    s, req, _ = run_summary(wl, "tp", frames=True, model="llama-2-70b", profile="none")
    assert list(req["status"]) == ["rejected", "rejected", "completed", "completed"]  # 4097 > 4096 >= 4096
    assert all(r.startswith("context_length") for r in req.loc[req["status"] == "rejected", "reject_reason"])
    assert s["rejected_reasons"] == {next(iter(s["rejected_reasons"])): 2}
    rejected = req[req["status"] == "rejected"]  # never scheduled, no token, on no engine
    assert rejected["scheduled_s"].isna().all() and (rejected["generated_tokens"] == 0).all()
    assert (rejected["engine"] == -1).all()
    assert s["total_input_tokens"] == 4000 + 1000  # only the served requests' prompts


def test_max_model_len_override_lowers_the_limit(tmp_path, capsys):
    trace = _trace(tmp_path, [(0.0, 1000, 100), (0.5, 3000, 100), (1.0, 1998, 50)])  # 2048 fits
    s = _simulate(capsys, "--trace", trace, "--policy", "tp", "--max-model-len", "2048")
    assert s["completed"] == 2 and s["max_model_len"] == 2048
    assert list(s["rejected_reasons"]) == ["context_length: prompt + output > max_model_len (2048)"]


def test_max_model_len_above_the_models_is_refused(tmp_path, capsys):
    """vLLM refuses --max-model-len above the derived length unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    trace = _trace(tmp_path, [(0.0, 1000, 100)])
    assert simulate_main(["--trace", trace, "--policy", "tp", "--max-model-len", "200000", "--profile", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "200000" in err[0] and "131072" in err[0]


# ---- perfmodel estimate -----------------------------------------------------------------------
def _estimate(capsys, *argv):
    rc = perfmodel_main(["estimate", "--profile", "none", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_estimate_max_context_is_the_limit_and_kv_capacity_separate(capsys):
    """TP8 of Llama-3.3-70B holds ~3M KV tokens (3,054,076 with the driver's memory; 2,839,737 with the datasheet's
    80e9 bytes before 2026-12-02), which `max_context_tokens` used to report; the longest request is the model's
    131,072."""
    rc, out, _ = _estimate(capsys, "--strategies", "tp,dp", "--format", "json")
    assert rc == 0
    rows = {r["strategy"]: r for r in json.loads(out)}
    assert rows["tp"]["max_context_tokens"] == 131072 < 20 * 131072 < rows["tp"]["kv_capacity_tokens"]
    assert rows["dp"]["max_context_tokens"] == 131072 < rows["dp"]["kv_capacity_tokens"]  # 160,960 per replica


def test_estimate_max_context_bounded_by_kv_when_kv_is_smaller(capsys):
    rc, out, _ = _estimate(capsys, "--hardware", "h20", "--strategies", "dp", "--format", "json")
    row, = json.loads(out)
    assert rc == 0 and row["max_context_tokens"] == row["kv_capacity_tokens"] < 131072


@pytest.mark.parametrize("argv", [["--input", "0"], ["--input", "1000000"], ["--input", "131000", "--output", "100"],
                                  ["--model", "llama-2-70b", "--input", "8100"],
                                  ["--max-model-len", "200000"]])
def test_estimate_refuses_empty_or_too_long_requests(capsys, argv):
    """`--input 0` gave TTFT 0.0 and `--input 1000000` a TTFT; both now stop with one line, exit 2."""
    rc, out, err = _estimate(capsys, *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and err.startswith("error: ")


def test_estimate_max_model_len_override(capsys):
    rc, out, _ = _estimate(capsys, "--strategies", "tp", "--max-model-len", "8192", "--input", "4096",
                           "--output", "250", "--format", "json")
    assert rc == 0 and json.loads(out)[0]["max_context_tokens"] == 8192
    assert _estimate(capsys, "--max-model-len", "4096", "--input", "4096", "--output", "1")[0] == 2
