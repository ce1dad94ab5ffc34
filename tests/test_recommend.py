"""`simulate recommend` (simulator/apps/recommend/): the pruned search picks the winner an exhaustive
evaluation of every candidate picks; SLOs nobody meets give met: false and the closest misses; a model
that fits nothing is one `error:` line and exit 2. Small synthetic traces, fixed seeds, one process."""
from __future__ import annotations

import json

import pytest

from simulator.apps.recommend.cli import main
from simulator.apps.recommend.core import recommend
from simulator.apps.recommend.rank import key
from simulator.apps.recommend.serve import commands
from simulator.workload import load_trace

CASES = [  # (trace, gpus, ttft SLO ms, tpot SLO ms)
    ("synthetic:gamma?rate=20&n=150&input=512&output=64&seed=1", 2, 300, 30),
    ("synthetic:gamma?rate=20&n=150&input=512&output=64&seed=2", 4, 50, 10),
    ("synthetic:gamma?rate=60&burstiness=0.5&n=200&input=2048&output=128&seed=3", 4, 400, 25),
    ("synthetic:gamma?rate=150&n=200&input=1024&output=64&seed=4", 2, 1000, 40),
    ("synthetic:gamma?rate=4&n=80&input=8192&output=32&seed=12", 4, 400, 8),  # prunes: SLO out of reach
    ("synthetic:gamma?rate=8&n=120&input=4096&output=64&seed=14", 4, 150, 10),  # prunes: TTFT bound
]
PRUNING = CASES[-2:]


@pytest.mark.parametrize("trace,gpus,ttft,tpot", CASES)
def test_pruned_winner_is_the_exhaustive_best(trace, gpus, ttft, tpot):
    wl = load_trace(trace)
    kw = dict(model="llama-3.1-8b", hardware="h100", gpus=gpus, slo_ttft_ms=ttft, slo_tpot_ms=tpot, workers=1)
    fast, full = recommend(wl, **kw), recommend(wl, prune=False, **kw)
    assert full["counts"]["pruned"] == 0 and full["counts"]["simulated"] == fast["counts"]["generated"]
    assert key(fast["winner"]) == key(full["winner"]), (fast["winner"]["label"], full["winner"]["label"])
    assert fast["met"] == full["met"]
    c = fast["counts"]
    refused = [d for d in fast["dropped"] if "simulator" in d["reason"]]
    assert c["simulated"] + c["pruned"] == c["generated"] - len(refused)
    for r in full["ranking"]:  # the closed-form bound never falls below a simulated result
        assert r["good"] <= r["bound_good"] + 1e-9, r["label"]
    ranked = [key(r) for r in full["ranking"]]
    assert ranked == sorted(ranked, reverse=True)


@pytest.mark.parametrize("trace,gpus,ttft,tpot", PRUNING)
def test_pruning_skips_candidates(trace, gpus, ttft, tpot):
    res = recommend(load_trace(trace), model="llama-3.1-8b", hardware="h100", gpus=gpus, slo_ttft_ms=ttft,
                    slo_tpot_ms=tpot, workers=1)
    c = res["counts"]
    assert c["pruned"] >= 1 and c["simulated"] < c["generated"] and sum(c["pruned_by_reason"].values()) == c["pruned"]


def test_candidates_cover_static_and_dynamic():
    wl = load_trace("synthetic:gamma?rate=5&n=30&input=256&output=16&seed=5")
    res = recommend(wl, model="llama-3.1-8b", hardware="h100", gpus=4, slo_ttft_ms=500, slo_tpot_ms=50,
                    workers=1, prune=False)
    labels = {r["label"] for r in res["ranking"]}
    assert {"tp=4", "dp=4 x tp=1", "dp=2 x tp=2", "pp=4", "sp=4", "flying", "sidp"} <= labels
    assert {lab for lab in labels if lab.startswith("shift:threshold=")}
    for r in res["ranking"]:
        if r["kind"] == "static":
            d = r["degrees"]
            assert d["dp"] * d["tp"] * d["pp"] * d["sp"] == 4


def test_met_false_lists_the_closest(capsys):
    rc = main(["--trace", "synthetic:gamma?rate=20&n=60&input=2048&output=32&seed=6", "--model", "llama-3.1-8b",
               "--hardware", "h100", "--gpus", "2", "--slo-ttft-ms", "1", "--slo-tpot-ms", "0.5",
               "--workers", "1", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["met"] is False
    assert out["closest"] and all(r["ttft_miss_ms"] > 0 for r in out["closest"])
    assert out["winner"] is not None and out["counts"]["generated"] > 0


def test_model_that_fits_nothing_exits_2(capsys):
    rc = main(["--trace", "synthetic:gamma?rate=5&n=10&input=128&output=8", "--model", "llama-3.1-405b",
               "--weights", "bf16", "--hardware", "a10", "--gpus", "1", "--slo-ttft-ms", "1000",
               "--slo-tpot-ms", "100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "fits no" in err[0]


def test_table_plot_and_out(tmp_path, capsys):
    png, out = tmp_path / "p.png", tmp_path / "o"
    rc = main(["--trace", "synthetic:gamma?rate=10&n=60&input=512&output=32&seed=7", "--model", "llama-3.1-8b",
               "--hardware", "h100", "--gpus", "2", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
               "--gpu-hour-usd", "2", "--workers", "1", "--top", "3", "--plot", str(png), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "recommended:" in text and "vllm serve meta-llama/" in text and "trtllm: not servable by TRT-LLM" in text
    assert png.stat().st_size > 0 and (out / "recommend.json").exists() and (out / "ranking.csv").exists()
    res = json.loads((out / "recommend.json").read_text())
    assert res["met"] is True and res["winner"]["usd_per_mtok"] > 0


def test_serving_commands():
    static = {"policy": "layout", "degrees": {"dp": 2, "tp": 2, "pp": 2, "sp": 1, "ep": 1}}
    c = commands(static, "llama-3.3-70b", 8)
    assert c["vllm"] == ("vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 2 "
                         "--pipeline-parallel-size 2 --data-parallel-size 2")
    assert "--tp 2 --dp 2" in c["sglang"] and "--tp_size 2 --pp_size 2" in c["trtllm"] and c["note"] is None
    moe = commands({"policy": "layout", "degrees": {"dp": 8, "tp": 1, "pp": 1, "sp": 1, "ep": 8}}, "qwen3-30b-a3b", 8)
    assert "--enable-expert-parallel" in moe["vllm"]


def test_serving_commands_for_the_two_kinds_of_ep():
    """Regression (2026-11-26): every EP layout got SGLang's `--enable-dp-attention` next to its own --tp, so
    tp=16,ep=8 (EP inside TP) read `--tp 16 --dp 1 ... --enable-dp-attention` and dp=8,ep=8 (attention DP)
    read `--tp 1 --dp 8`, which SGLang serves on one GPU; TRT-LLM got `--tp_size 1 --ep_size 8`."""
    def cmd(**deg):
        return commands({"policy": "layout", "degrees": {"pp": 1, "sp": 1, **deg}}, "qwen3-30b-a3b", 16)
    adp = cmd(dp=8, tp=1, ep=8)  # attention DP: 8 DP ranks form one EP group
    assert "--tp 8 --dp 8 --enable-dp-attention --ep-size 8" in adp["sglang"]
    assert "--tp_size 8 --pp_size 1 --ep_size 8" in adp["trtllm"] and "enable_attention_dp" in adp["trtllm"]
    assert "--data-parallel-size 8 --enable-expert-parallel" in adp["vllm"] and adp["note"] is None
    inside = cmd(dp=1, tp=16, ep=8)  # EP inside the TP group, each expert TP-sharded over 2
    assert "--tp 16 --dp 1 --ep-size 8" in inside["sglang"] and "dp-attention" not in inside["sglang"]
    assert "--tp_size 16 --pp_size 1 --ep_size 8" in inside["trtllm"]
    assert "EP 16 there, not 8" in inside["note"]  # vLLM cannot ask for ep < tp
    two = cmd(dp=4, tp=1, ep=2)  # two attention-DP EP groups of 2 ranks
    assert "--tp 2 --dp 2 --enable-dp-attention --ep-size 2" in two["sglang"] and "x 2 replicas" in two["sglang"]
    shift = commands({"policy": "shift", "policy_args": {"threshold": "512"}, "deployment": "base: sp=8 / shift: tp=8"},
                     "llama-3.3-70b", 8)
    assert "ArcticInference" in shift["note"] and "--shift-parallel-threshold 512" in shift["vllm"]
    for p in ("sidp", "seesaw", "flying"):
        assert "research prototype" in commands({"policy": p, "deployment": "dp=4 x tp=2"}, "llama-3.3-70b", 8)["note"]


def test_pp_ttft_bound_holds_without_dividing_by_pp():
    """Regression: the TTFT bound of PP layouts was divided by pp (a prompt's prefill used to be split over
    micro-batches); now a prompt is never split, so the simulated TTFT stays above the bound (x margin)."""
    import numpy as np

    from perfmodel.estimate import estimate
    from perfmodel.framework import SchedulerLimits, framework_preset
    from simulator import RunSpec, run
    from simulator.apps.recommend.prune import LATENCY_MARGIN
    from simulator.run import hardware_and_profile, model_spec
    from simulator.workload.workload import make_workload

    rng = np.random.default_rng(1)
    n = 60
    inp, out = rng.integers(100, 3000, n), rng.integers(10, 200, n)
    wl = make_workload({"arrival_s": np.sort(rng.uniform(0, 4, n)), "input_tokens": inp, "output_tokens": out},
                       source="pp-bound")
    spec, (hw, prof) = model_spec("llama-3.1-8b", "fp8", "bf16"), hardware_and_profile("h100", None)
    for lay in ("pp=4", "tp=2,pp=2"):
        req = run(wl, RunSpec(policy="layout", layout=lay, model="llama-3.1-8b", hardware="h100", gpus=4)).requests
        for i in range(0, n, 6):
            alone = estimate(lay, spec, hw, 4, int(inp[i]), 2, prof, framework_preset("vllm", None),
                             SchedulerLimits(int(inp[i]), 1024), None, spec.max_model_len)["ttft_ms"]
            assert req["ttft_ms"].iloc[i] >= LATENCY_MARGIN * alone, (lay, i)


def test_disagg_serving_commands_carry_each_pool_layout():
    """Regression (2026-11-26): a disaggregated pool's EP / attention-DP layout was dropped from its command
    lines (a dp=8,tp=1,ep=8 decode pool was served as `--tp 1`)."""
    c = commands({"policy": "disagg", "policy_args": {"prefill": "1x(tp=8)", "decode": "1x(dp=8,tp=1,ep=8)"}},
                 "deepseek-v3", 16)
    assert "--disaggregation-mode decode --tp 8 --dp 8 --enable-dp-attention --ep-size 8" in c["sglang"]
    assert "--disaggregation-mode prefill --tp 8 --dp 1 --disaggregation" in c["sglang"]
    assert "generation x1: trtllm-serve deepseek-v3 --tp_size 8 --pp_size 1 --ep_size 8 --port" in c["trtllm"]
    assert "--data-parallel-size 8 --enable-expert-parallel --port 8200" in c["vllm"]
    assert "decode TRT-LLM: with enable_attention_dp" in c["note"]
