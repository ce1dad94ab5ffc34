"""`simulate validate` predicts with `simulate` and nothing else (issue 37): every replayed row carries the
`simulate` command that reproduces its prediction bit for bit, no replay reads a measured value, and the
validation path builds no framework of its own."""
import ast
import shlex
from pathlib import Path

import pandas as pd
import pytest

from simulator.apps.cli import build_parser, main, run_spec as cli_run_spec
from simulator.apps.validate.command import command
from simulator.apps.validate.harness import as_launched, harness
from simulator.apps.validate.replay import blind, replay, run_spec
from simulator.apps.validate.rows import Case, case_of
from simulator.engine.config import EngineConfig
from simulator.run import RunSpec

COLS = ("id,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,"
        "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms,"
        "silicon_concurrency").split(",")
# one row of each harness and framework (aiperf TRT-LLM / SGLang / vLLM 0.12, InferenceX vLLM with its script's
# flags, an unidentified InferenceX script), kept small: C <= 8, short outputs
ROWS = [
    "t8,trtllm,1.0.0rc3,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,512,32,,,4,1,1,,1,1,60.0,6.0,4",
    "s32,sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,,agg,512,32,,,4,2,1,,1,1,90.0,9.0,4",
    "v32,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,32,,,8,2,1,,1,1,120.0,12.0,8",
    "mm,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,32,fp8,fp8,4,4,1,1,1,4,107.0,15.5,4",
    "l8,vllm,0.18.0,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,32,,,4,1,1,,1,1,40.0,5.0,4",
]


def _cases():
    return [case_of(i, dict(zip(COLS, r.split(",")))) for i, r in enumerate(ROWS)]


def _spec_of(case: Case) -> RunSpec:
    seen = blind(as_launched(case))
    return run_spec(seen, harness(seen))


@pytest.mark.parametrize("i", range(len(ROWS)))
def test_each_rows_command_parses_back_to_the_replays_run_spec(i):
    case = _cases()[i]
    r = replay(case)
    argv = shlex.split(r.command)
    assert argv[0] == "simulate" and "--trace" in argv
    args = build_parser().parse_args(argv[1:])
    assert cli_run_spec(args.policy, args) == _spec_of(case)


@pytest.mark.parametrize("i", [0, 1, 2])
def test_a_rows_command_gives_its_prediction_bit_for_bit(tmp_path, i):
    """The command run as a user runs it (the CLI, --out files) gives the replay's mean TTFT and TPOT exactly."""
    case = _cases()[i]
    r = replay(case)
    assert main(shlex.split(r.command)[1:] + ["--out", str(tmp_path / "run")]) == 0
    req = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    done = req[req["status"] == "completed"]
    assert (float(done["ttft_ms"].mean()), float(done["tpot_ms"].mean())) == (r.ttft_ms, r.tpot_ms)


def test_measured_columns_shuffled_give_identical_predictions():
    """A replay never reads a measured value: permuting the measured TTFT / TPOT among the rows (and blanking
    them) changes no prediction."""
    cases = _cases()
    got = [replay(c) for c in cases]
    rotated = [dict(zip(COLS, r.split(","))) for r in ROWS]
    for a, b in zip(rotated, rotated[1:] + rotated[:1]):
        a["silicon_ttft_ms"], a["silicon_tpot_ms"] = b["silicon_ttft_ms"], b["silicon_tpot_ms"]
    shuffled = [replay(case_of(i, r)) for i, r in enumerate(rotated)]
    assert [(g.ttft_ms, g.tpot_ms, g.command) for g in got] == [(s.ttft_ms, s.tpot_ms, s.command) for s in shuffled]
    assert [g.case.ttft_ms for g in got] != [s.case.ttft_ms for s in shuffled]  # (the shuffle took)


def test_a_setting_without_a_simulate_flag_is_refused():
    """A replay cannot depend on a setting `simulate` does not offer: command() refuses it by name."""
    odd = RunSpec(policy="layout", layout="tp=1", model="llama-3.1-8b", hardware="h100", gpus=1,
                  engine=EngineConfig(sglang_init_new_token_ratio=0.5, scheduler="sglang", block_size=1,
                                      schedule_order="prefill-first"), framework="sglang")
    with pytest.raises(ValueError, match="sglang_init_new_token_ratio"):
        command(odd, "synthetic:batch?n=4")


def test_the_validation_path_builds_no_framework_of_its_own():
    """simulator/apps/validate/ never hands run() a Framework (framework=...) nor builds one: every setting
    it uses goes through RunSpec, as `simulate`'s flags do (a planted copy is found)."""
    root = Path(__file__).resolve().parents[1] / "simulator" / "apps" / "validate"

    def offenders(src: str) -> list:
        bad = []
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name in ("framework_preset", "Framework", "with_knobs", "with_deployment"):
                    bad.append(name)
                if name == "run" and any(k.arg == "framework" for k in node.keywords):
                    bad.append("run(framework=)")
            if isinstance(node, ast.ImportFrom) and node.module == "perfmodel.framework":
                bad += [a.name for a in node.names if not a.name.isupper()]  # (constants may be read)
        return bad
    assert offenders("from perfmodel.framework import framework_preset\nrun(w, rs, framework=fw)\n")
    for f in sorted(root.glob("*.py")):
        assert offenders(f.read_text()) == [], f.name


def _h200_disagg(isl: int, conc: int, backend: str = "trtllm", workers: tuple = ()) -> Case:
    return Case(row=0, id="x", backend=backend, version="0.8.1.post1" if backend == "trtllm" else "0.5.8.post1",
                model="deepseek-ai/DeepSeek-R1", hardware="h200", weights="fp8", layout="prefill 1x(tp=8) decode 1x(tp=8)",
                gpus=16, isl=isl, osl=1024, concurrency=conc, batch_size=conc, ttft_ms=1.0, tpot_ms=1.0,
                policy="disagg", policy_args=(("prefill", "1x(tp=8)"), ("decode", "1x(tp=8)")), nodes=2,
                date="2026-02-14" if backend == "trtllm" else "2026-02-07", workers=workers)


def test_h200_disagg_rows_replay_their_recipe_and_recorded_workers_pick_among_twins():
    """H200 DeepSeek disagg rows (recipes_h200.py): the recipe of the row's concurrency, its pools and per-rank
    limits; where several ran, the row's recorded worker counts keep the matching ones, else the first (plain)."""
    from simulator.apps.validate.harness import dsr1_choices

    one = dsr1_choices(_h200_disagg(1024, 1152))  # stp/c128_ctx1_gen9_dep8_batch512 alone
    assert len(one) == 1 and dict(one[0][0])["decode"] == "9x(dp=8,tp=1,ep=8)"
    assert dict(one[0][0])["prefill"] == "1x(dp=8,tp=1,ep=8)" and dict(one[0][0])["decode_max_seqs"] == "512"
    four = dsr1_choices(_h200_disagg(8192, 48))
    assert [name for _, name in four][0] == "8k1k/stp/c8_ctx1_gen6_tep8_batch16" and len(four) == 4
    picked = dsr1_choices(_h200_disagg(8192, 48, workers=(1, 3)))
    assert [name for _, name in picked] == ["8k1k/stp/c16_ctx1_gen3_tep8_batch32", "8k1k/mtp/c16_ctx1_gen3_tep8_batch32_mtp2"]
    launched = as_launched(_h200_disagg(8192, 48, workers=(1, 3)))
    assert (launched.gpus, launched.nodes) == (32, 4)
    # SGLang: a DEP decode's max-running-requests is split over its 8 DP ranks (256 -> 32 per rank)
    dep = dsr1_choices(_h200_disagg(8192, 256, backend="sglang"))
    assert dep[0][1] == "8k1k/bs128-1p1d-dep" and dict(dep[0][0])["decode_max_seqs"] == "32"
    assert dsr1_choices(_h200_disagg(8192, 48, backend="sglang")) == []  # no recipe ran there: the columns


def test_every_h200_disagg_row_has_its_recipe(shared):
    """All 184 H200 disagg rows map to the srt-slurm recipe(s) of their concurrency (none replays its columns)."""
    from simulator.apps.validate.harness import dsr1_choices
    from simulator.apps.validate.rows import cases, read_measurements

    found, _ = cases(read_measurements(shared / "data" / "e2e" / "silicon_h200_sxm.csv"))
    disagg = [c for c in found if c.policy == "disagg"]
    assert len(disagg) == 184 and all(dsr1_choices(c) for c in disagg)


def test_another_frameworks_replay_does_not_take_the_rows_version():
    """Regression: `validate --framework vllm` on a TRT-LLM 1.0.0rc3 row passed "1.0.0rc3" as vLLM's version,
    which reads as >= 0.18 (async scheduling, no host time per step). The row's version names its own framework."""
    trt = _cases()[0]
    seen = blind(as_launched(trt))
    assert run_spec(seen, harness(seen)).framework_version == "1.0.0rc3"
    other = run_spec(seen, harness(seen, "vllm"))
    assert other.framework == "vllm" and other.framework_version is None
