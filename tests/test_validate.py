"""`simulate validate`: measured rows read into cases (every row replayed or skipped with a reason),
the JSON contract, one-line errors for bad files, and on the real H100 file the groups this session
brought within bounds stay there (docs/fidelity.md has the whole table)."""
import json

import pytest

from perfmodel.modelspec import load_model
from perfmodel.hardware import load_hardware
from simulator.apps.cli import main
from simulator.apps.validate.harness import as_launched, harness
from simulator.apps.validate.replay import run_spec
from simulator.apps.validate.rows import Case, Skip, case_of

COLS = ("id,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,"
        "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms,"
        "silicon_concurrency")
ROWS = [
    "a8b,trtllm,1.0.0rc3,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,8,1,1,,1,1,191.0,7.9,8",
    "q32,sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,16,8,1,,1,1,350.0,8.0,16",
    "gb,trtllm,1.0,meta-llama/Llama-3.1-8B-Instruct,mi300x,,agg,1024,128,,,8,1,1,,1,1,191.0,7.9,8",
    "v32,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,16,2,1,,1,1,188.0,22.2,16",
]


def _csv(tmp_path, rows=ROWS, cols=COLS):
    p = tmp_path / "runs.csv"
    p.write_text("\n".join([cols, *rows]) + "\n")
    return p


DISAGG_COLS = COLS + (",prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,"
                      "prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,"
                      "decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,"
                      "decode_moe_ep_size")
DISAGG = ("ds,trtllm,0.8.1,deepseek-ai/DeepSeek-V3,h100_sxm,fp8,disagg,1024,1024,fp8,fp8,,,,,,,5052.4,19.9,30,"
          "1,1,1,1,16,1,16,10,3,16,1,1,1,16")


def test_rows_become_cases_or_skips_with_reasons():
    r = dict(zip(COLS.split(","), ROWS[2].split(",")))
    s = case_of(2, r)
    assert isinstance(s, Skip) and "'mi300x' has no hardware preset" in s.reason
    # disaggregated rows (issue 18) are replayed as --policy disagg with the row's pools, placed node-major:
    # a 16-GPU attention-DP + EP16 prefill worker and 3 decode workers of TP16 x EP16 = 64 GPUs, 8 nodes
    d = case_of(3, dict(zip(DISAGG_COLS.split(","), DISAGG.split(","))))
    assert isinstance(d, Case) and d.policy == "disagg" and d.gpus == 64 and d.nodes == 8
    assert dict(d.policy_args) == {"prefill": "1x(dp=16,tp=1,ep=16)", "decode": "3x(tp=16,ep=16)"}
    c = case_of(0, dict(zip(COLS.split(","), ROWS[0].split(","))))
    assert isinstance(c, Case) and c.layout == "tp=1" and c.weights == "bf16" and c.concurrency == 8


def test_harness_follows_each_framework():
    def case(i):
        return case_of(i, dict(zip(COLS.split(","), ROWS[i].split(","))))
    t, s = harness(case(0)), harness(case(1))
    assert t.engine.scheduler == "trtllm" and not t.engine.enable_chunked_prefill
    assert s.engine.scheduler == "sglang" and s.engine.schedule_order == "prefill-first" and s.engine.block_size == 1
    assert run_spec(case(1), s).hbm_gb is None  # the preset's memory: what the driver reports (SGLang sizes by it)
    # aiconfigurator's harness recorded no engine flags, so each framework runs its own defaults (harness.py),
    # the same for all three and said so: vLLM 0.12's 8192 tokens / 1024 seqs, not the generator's limits
    v = harness(case(3))
    assert v.engine.max_num_batched_tokens is None and v.engine.max_num_seqs is None  # (vLLM's by GPU)
    assert t.engine.max_num_batched_tokens == 8192 and t.memory_fraction is None
    assert all("not recorded" in h.unknown for h in (t, s, v))


def test_validate_json_contract_on_a_fixture(tmp_path, capsys):
    assert main(["validate", "--measurements", str(_csv(tmp_path)), "--format", "json", "--jobs", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    keys = {"group", "rows", "skipped", "ttft_median_abs_rel_err", "ttft_p90_abs_rel_err", "ttft_median_rel_err",
            "tpot_median_abs_rel_err", "tpot_p90_abs_rel_err", "tpot_median_rel_err"}
    assert all(set(r) == keys for r in rows)
    first = rows[0]
    assert first["group"] == "all" and first["rows"] == 3 and first["skipped"] == 1
    assert {r["group"] for r in rows[1:]} == {"trtllm Llama-3.1-8B-Instruct h100", "sglang Qwen3-32B h100",
                                              "vllm Qwen3-32B h100", "trtllm Llama-3.1-8B-Instruct mi300x"}
    # a group whose every row was skipped is listed with its count and no error (null, not NaN)
    gb = next(r for r in rows if r["group"].endswith("mi300x"))
    assert (gb["rows"], gb["skipped"], gb["ttft_median_abs_rel_err"]) == (0, 1, None)
    assert all(0 <= r["ttft_median_abs_rel_err"] < 10 for r in rows if r["rows"])


@pytest.mark.parametrize("bad, needle", [
    ("a,trtllm,1,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,0,128,,,8,1,1,,1,1,191.0,7.9,8", "isl=0"),
    ("a,trtllm,1,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,8,1,1,,1,1,-1,7.9,8", "must be > 0"),
])
def test_bad_rows_give_one_line_naming_file_row_and_field(tmp_path, capsys, bad, needle):
    p = _csv(tmp_path, [bad])
    assert main(["validate", "--measurements", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(p) in err and "line 2" in err and needle in err


def test_missing_file_and_column(tmp_path, capsys):
    assert main(["validate", "--measurements", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    p = tmp_path / "x.csv"
    p.write_text("id,backend\n1,vllm\n")
    assert main(["validate", "--measurements", str(p)]) == 2
    assert "missing column" in capsys.readouterr().err



def test_inferencex_rows_replay_as_their_script_launched_them():
    """InferenceX's vLLM scripts launch TP (+ expert parallel) only, never data parallel: a row of that
    source whose columns say attention DP 4 x MoE EP 16 (16 GPUs; the MiniMax rows of 2026-04-06, ids
    `tp4_ep4`) is replayed as TP4 with EP4 inside it on 4 GPUs; rows of aiconfigurator's harness and rows
    without DP are left as their columns say."""
    cols = COLS.split(",")
    mm = "mm_c16_tp4_ep4,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,1024,fp8,fp8,4,4,1,4,1,16,107.0,15.5,16"
    c = case_of(0, dict(zip(cols, mm.split(","))))
    assert c.layout == "dp=4,tp=4,ep=16" and c.gpus == 16  # the columns, as read
    got = as_launched(c)
    assert (got.layout, got.gpus, got.nodes, got.concurrency) == ("tp=4,ep=4", 4, 1, 16)
    aic = case_of(0, dict(zip(cols, mm.replace("vllm,0.18.0", "vllm,0.12.0").split(","))))
    assert as_launched(aic) is aic  # aiconfigurator's own harness does run attention DP
    plain = case_of(0, dict(zip(cols, ROWS[3].replace("0.12.0", "0.18.0").split(","))))
    assert as_launched(plain) is plain

@pytest.mark.slow
def test_groups_within_the_bounds_reached(shared, capsys):
    """The groups that meet the issue's targets (TTFT 35%, TPOT 15% for any group; tighter where reached) with
    facts only (2026-11-28: no setup chosen by fit, InferenceX scripts cited per row, scripts.py): SGLang Qwen3-32B
    (84 rows, aiperf, SGLang's defaults), InferenceX vLLM Llama-3.1-70B and MiniMax-M2.5 on H100, and on H200
    (never tuned on) InferenceX vLLM Llama-3.1-70B, vLLM gpt-oss and TRT-LLM Llama-3.1-70B (TPOT 8.3% since its
    ModelOpt FP8 checkpoint's static scales skip the compute-scale pass, 2026-12-02: 21.7% before, 27.2% when the
    preset charged 1 ms a step; TTFT 6.6% since its script's TRT-LLM batch waiting at 1k/1k below TP 8 is
    replayed, 11.6% before)."""
    h100, h200 = (shared / "data" / "e2e" / f"silicon_{s}_sxm.csv" for s in ("h100", "h200"))
    for f, match, group, ttft, tpot in (
            (h100, "qwen3_32b_h100_sxm_sglang_agg", "sglang Qwen3-32B h100", 0.20, 0.08),
            (h100, "llama_3_1_70b_h100", "vllm Llama-3.1-70B h100", 0.20, 0.15),
            (h100, "minimax_m2_5", "vllm MiniMax-M2.5 h100", 0.35, 0.15),
            (h200, "llama_3_1_70b_h200_sxm_vllm", "vllm Llama-3.1-70B h200", 0.15, 0.15),
            (h200, "gpt_oss_120b_h200_sxm_vllm", "vllm gpt-oss-120b h200", 0.25, 0.08),
            (h200, "llama_3_1_70b_h200_sxm_trtllm", "trtllm Llama-3.1-70B h200", 0.09, 0.12)):
        assert main(["validate", "--measurements", str(f), "--format", "json", "--match", match]) == 0
        g = next(x for x in json.loads(capsys.readouterr().out) if x["group"] == group)
        assert g["rows"] >= 30, g
        assert g["ttft_median_abs_rel_err"] <= ttft and g["tpot_median_abs_rel_err"] <= tpot, g


@pytest.mark.slow
def test_h100_trtllm_deepseek_disagg_rows_stay_within_reach(shared, capsys):
    """The 2026-03-25 TRT-LLM DeepSeek-R1 disagg rows (28) replayed as launched: TTFT and TPOT within 35%
    (median; 2026-11-28: 27.0% / 27.0%). The 20 rows whose concurrency two recipes ran replay the first (the rows
    do not say which ran; the measured-rank labels of twins.py, which gave 28.9% / 15.2%, read the measurement).
    Before the recipes they were 95% / 22% off; a regression in the recipe table, MTP or the disagg loop shows."""
    f = shared / "data" / "e2e" / "silicon_h100_sxm.csv"
    assert main(["validate", "--measurements", str(f), "--format", "json", "--match",
                 "2026_03_25_deepseek_r1_h100_sxm_trtllm"]) == 0
    g = next(x for x in json.loads(capsys.readouterr().out) if x["group"] == "trtllm DeepSeek-R1 h100 disagg")
    assert g["rows"] == 28 and g["skipped"] == 0, g
    assert g["ttft_median_abs_rel_err"] <= 0.35 and g["tpot_median_abs_rel_err"] <= 0.35, g


def test_match_that_selects_nothing_is_one_line(tmp_path, capsys):
    assert main(["validate", "--measurements", str(_csv(tmp_path)), "--match", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--match 'nope'" in err


def test_framework_override_replays_rows_under_another_framework(tmp_path, capsys):
    p = str(_csv(tmp_path))
    got = {}
    for extra in ([], ["--framework", "vllm"]):
        assert main(["validate", "--measurements", p, "--format", "json", "--jobs", "1", *extra]) == 0
        rows = json.loads(capsys.readouterr().out)
        got[bool(extra)] = next(r for r in rows if r["group"].startswith("sglang"))
    assert got[True]["ttft_median_rel_err"] != got[False]["ttft_median_rel_err"]
    assert got[True]["group"] == got[False]["group"]  # grouped by the measured backend either way


def test_json_has_null_not_nan_for_a_group_without_replayed_rows(tmp_path, capsys):
    """Regression: a group with no replayed row (here every row skipped) printed NaN, which is not JSON
    (jq and strict parsers reject it); its errors are null now."""
    assert main(["validate", "--measurements", str(_csv(tmp_path, rows=[ROWS[2]])), "--format", "json",
                 "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rows[0]["group"] == "all" and rows[0]["rows"] == 0 and rows[0]["skipped"] == 1
    assert rows[0]["ttft_median_abs_rel_err"] is None


def test_a_disagg_row_without_its_concurrency_is_skipped_with_the_reason():
    """A disagg row's batch columns are per-worker engine limits, not the benchmark's clients: with
    silicon_concurrency blank it is skipped (reason kept), not replayed at a guessed concurrency; an agg row
    falls back to batch_size (the schema's agg concurrency)."""
    r = dict(zip(DISAGG_COLS.split(","), DISAGG.split(",")))
    s = case_of(5, {**r, "silicon_concurrency": ""})
    assert isinstance(s, Skip) and "concurrency is not recorded" in s.reason and s.id == "ds"
    a = case_of(0, {**dict(zip(COLS.split(","), ROWS[0].split(","))), "silicon_concurrency": ""})
    assert isinstance(a, Case) and a.concurrency == 8


def test_int4_weight_only_rows_replay_only_for_checkpoints_shipped_in_int4():
    """Issue 37 (coverage): `int4_wo` rows are replayed in the experts-only int4 format of a checkpoint
    shipped in it (Kimi-K2.5's compressed-tensors W4A16); of another model (every linear layer int4, not
    modelled) they are skipped with the reason. NVIDIA's FP8 Llama-3.1-8B resolves to the 8B preset."""
    base = dict(zip(COLS.split(","), ROWS[3].split(",")))
    kimi = case_of(0, {**base, "model_path": "moonshotai/Kimi-K2.5", "system": "h200_sxm", "gemm_quant_mode": "int4_wo",
                       "tp_size": "8"})
    assert isinstance(kimi, Case) and kimi.weights == "int4"
    dense = case_of(1, {**base, "gemm_quant_mode": "int4_wo"})
    assert isinstance(dense, Skip) and "int4_wo" in dense.reason and "not modelled" in dense.reason
    fp8 = case_of(2, {**base, "model_path": "nvidia/Llama-3.1-8B-Instruct-FP8", "gemm_quant_mode": "fp8",
                      "tp_size": "1"})
    assert isinstance(fp8, Case) and fp8.weights == "fp8"
    assert load_model(fp8.model).num_layers == load_model("llama-3.1-8b").num_layers


def test_blackwell_rows_are_replayed_with_their_4bit_format(tmp_path, capsys):
    """Synthetic Blackwell rows (the real ones are the project's held-out test, never read): B200 / GB200 systems
    map to their presets, nvfp4 is nvfp4 except for a checkpoint shipped in mxfp4 (gpt-oss, which aiconfigurator
    labels nvfp4), and the rows replay."""
    rows = ["b2,trtllm,1.1.0,meta-llama/Llama-3.1-8B-Instruct,b200_sxm,,agg,1024,128,nvfp4,,8,1,1,,1,1,50.0,3.0,8",
            "g2,trtllm,1.1.0,openai/gpt-oss-120b,gb200,,agg,1024,128,nvfp4,,8,4,1,,1,1,80.0,4.0,8",
            "g3,trtllm,1.1.0,deepseek-ai/DeepSeek-R1,gb300,,agg,1024,128,nvfp4,,8,8,1,,1,8,90.0,9.0,8"]
    cases = [case_of(i, dict(zip(COLS.split(","), r.split(",")))) for i, r in enumerate(rows)]
    assert all(isinstance(c, Case) for c in cases), cases
    assert [(c.hardware, c.weights) for c in cases] == [("b200", "nvfp4"), ("gb200", "mxfp4"), ("gb300", "nvfp4")]
    assert main(["validate", "--measurements", str(_csv(tmp_path, rows=rows)), "--format", "json", "--jobs", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got[0]["rows"] == 3 and got[0]["skipped"] == 0


def test_unrecorded_attention_dp_follows_the_moe_width():
    """Regression: vLLM Qwen3-235B-A22B-FP8 rows with tp_size 1, moe_tp_size 2 and no attention_dp_size were
    replayed on one GPU and refused (236 GB of weights). aiconfigurator's rows keep tp x attention_dp ==
    moe_tp x moe_ep (sdk/config.py resolve_moe_parallelism), so they ran attention DP 2 with the MoE TP over
    both ranks (vLLM's DP without expert parallelism: costed as EP over them)."""
    row = dict(zip(COLS.split(","), "q1,vllm,0.12.0,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,,agg,1000,100,fp8,,8,1,1,,2,1,"
                                    "300.0,20.0,8".split(",")))
    c = case_of(0, row)
    assert isinstance(c, Case) and (c.layout, c.gpus) == ("dp=2,tp=1,ep=2", 2)
    row.update(tp_size="2", moe_tp_size="2")  # as wide as the attention: no attention DP
    assert case_of(0, row).layout == "tp=2"
    row.update(tp_size="1", moe_tp_size="2", attention_dp_size="1")  # recorded: taken as it is
    assert case_of(0, row).layout.startswith("tp=1")


def test_replays_size_memory_by_what_the_driver_reports():
    """Engines size their memory by the driver's total (nvidia-smi: H100 SXM 81559 MiB, H200 SXM 143771 MiB), not by
    the datasheet's "80 GB" / "141 GB" as 1e9 bytes. Regression (2026-12-02): H200 rows replayed 141e9 bytes a GPU,
    9.8 GB short, so their KV-bound rows preempted where the measured runs did not. The presets now carry the driver's
    figure, so a replay and a user's `simulate --hardware h200` plan the same memory (no --hbm-gb in the command)."""
    cols = COLS.split(",")
    for system, mib in (("h100_sxm", 81559), ("h200_sxm", 143771)):
        row = ROWS[0].replace("h100_sxm", system)
        c = case_of(0, dict(zip(cols, row.split(","))))
        assert run_spec(c, harness(c)).hbm_gb is None and load_hardware(system).hbm_bytes == mib * 2**20
