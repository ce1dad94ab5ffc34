"""`simulate recommend` beyond one node and beyond aggregated serving (issue 19): disaggregated
prefill/decode candidates keep the pruned search's winner equal to the exhaustive one and their
closed-form bound above what they simulate; --nodes 2 searches layouts over 16 GPUs and runs them;
a preset without a network refuses --nodes 2 in one line; the Ray executor gives the rows the local
one gives. Small synthetic traces, fixed seeds."""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.apps.recommend.cli import main
from simulator.apps.recommend.core import recommend
from simulator.apps.recommend.rank import key
from simulator.apps.recommend.serve import commands
from simulator.workload import load_trace

SMALL = "synthetic:gamma?rate={rate}&burstiness={b}&n=80&input={i}&output={o}&seed={seed}"


def _random_cases(n: int, seed: int = 19):
    """(trace, gpus, ttft SLO, tpot SLO): random loads, lengths and SLOs, from tight to loose."""
    rng = np.random.default_rng(seed)
    for k in range(n):
        trace = SMALL.format(rate=int(rng.choice([5, 20, 60])), b=float(rng.choice([0.5, 1.0])),
                             i=int(rng.choice([512, 2048, 4096])), o=int(rng.choice([32, 128])), seed=100 + k)
        yield trace, int(rng.choice([2, 4])), float(rng.choice([100, 400, 1500])), float(rng.choice([8, 15, 40]))


@pytest.mark.parametrize("trace,gpus,ttft,tpot", list(_random_cases(4)))
def test_pruning_never_drops_the_best_with_disagg(trace, gpus, ttft, tpot):
    wl = load_trace(trace)
    kw = dict(model="llama-3.1-8b", hardware="h100", gpus=gpus, slo_ttft_ms=ttft, slo_tpot_ms=tpot, workers=1,
              kinds=("static", "disagg"))
    fast, full = recommend(wl, **kw), recommend(wl, prune=False, **kw)
    disagg = [r for r in full["ranking"] if r["kind"] == "disagg"]
    assert disagg, "no disaggregated candidate was generated"
    assert key(fast["winner"]) == key(full["winner"]), (fast["winner"]["label"], full["winner"]["label"])
    for r in disagg:  # the closed-form bound (prefill alone + transfer, decode step alone) holds
        assert r["good"] <= r["bound_good"] + 1e-9, r["label"]
        assert r["deployment"].startswith("prefill ") and r["policy_args"]["prefill"] in r["label"]


def test_disagg_splits_and_their_serving_commands():
    wl = load_trace("synthetic:gamma?rate=10&n=40&input=1024&output=32&seed=3")
    res = recommend(wl, model="llama-3.1-8b", hardware="h100", gpus=8, slo_ttft_ms=500, slo_tpot_ms=50,
                    kinds=("disagg",), workers=1, prune=False)
    labels = {r["label"] for r in res["ranking"]}
    # prefill on 1/4, 1/2, 3/4 of the GPUs at the smallest TP, and the TP-doubled variants
    assert {"disagg:2x(tp=1)/6x(tp=1)", "disagg:4x(tp=1)/4x(tp=1)", "disagg:6x(tp=1)/2x(tp=1)",
            "disagg:2x(tp=2)/4x(tp=1)", "disagg:4x(tp=1)/2x(tp=2)"} <= labels
    c = commands({"policy": "disagg", "policy_args": {"prefill": "2x(tp=2)", "decode": "4x(tp=1)"}},
                 "llama-3.3-70b", 8)
    assert "NixlConnector" in c["vllm"] and c["vllm"].count("vllm serve") == 2 and "proxy" in c["vllm"]
    assert "--disaggregation-mode prefill" in c["sglang"] and "--disaggregation-mode decode" in c["sglang"]
    assert "trtllm-serve disaggregated -c" in c["trtllm"] and "multi-process" in c["note"]


def test_two_nodes_search_layouts_over_16_gpus(capsys):
    rc = main(["--trace", "synthetic:gamma?rate=20&n=40&input=512&output=32&seed=8", "--model", "llama-3.1-8b",
               "--hardware", "h100", "--nodes", "2", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
               "--workers", "1", "--no-prune", "--candidates", "static,dynamic", "--format", "json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["setup"]["gpus"] == 16 and res["setup"]["nodes"] == 2
    labels = {r["label"] for r in res["ranking"]}
    assert {"dp=2 x tp=8", "tp=16", "dp=16 x tp=1"} <= labels  # inside a node, over both, one GPU each
    assert "seesaw" not in labels and "sidp" not in labels  # one node only (docs/multinode.md)
    assert {d["label"] for d in res["dropped"]} >= {"seesaw", "sidp"}
    for r in res["ranking"]:
        if r["kind"] == "static":
            d = r["degrees"]
            assert d["dp"] * d["tp"] * d["pp"] * d["sp"] == 16
            inst = d["tp"] * d["pp"] * d["sp"]
            assert 8 % inst == 0 or inst % 8 == 0, r["label"]  # no instance straddles a node
    assert "2 nodes" in (res["commands"]["note"] or "")


def test_two_nodes_without_a_network_is_one_line(capsys):
    rc = main(["--trace", "synthetic:gamma?rate=5&n=10&input=128&output=8", "--model", "llama-3.1-8b",
               "--hardware", "a10", "--nodes", "2", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: --nodes 2: a10") and "network" in err[0]


def test_ray_executor_gives_the_local_rows():
    """Two candidates through simulator.apps.sweep.executors.run_ray (a 2-CPU Ray started by the search) and
    in this process: the same rows. Ray 2.60 has no local_mode any more, so a small local Ray runs it."""
    pytest.importorskip("ray")
    from perfmodel.framework import framework_preset
    from simulator.apps.recommend.candidates import generate
    from simulator.apps.recommend.prune import bounds
    from simulator.apps.recommend.rank import finish_row, search
    from simulator.run import hardware_and_profile, model_spec

    wl = load_trace("synthetic:gamma?rate=10&n=30&input=256&output=16&seed=9")
    spec, (hw, prof), fw = model_spec("llama-3.1-8b", "fp8", "bf16"), hardware_and_profile("h100", None), \
        framework_preset("vllm")
    cands = generate(spec, hw, 2, fw, ("static",), prof)[0][:2]
    b, _ = bounds(cands, wl, spec, hw, 2, fw, prof, 500, 50, 90)
    task = dict(workload=wl, model="llama-3.1-8b", hardware="h100", gpus=2, weights="fp8", profile=None,
                framework="vllm", slo_ttft_ms=500, slo_tpot_ms=50, pct=90)
    def finish(row):
        return finish_row(row, 3.0, 2, 90, None, 500, 50)

    here, _ = search(cands, b, task, 1, finish, prune=False)
    ray_rows, _ = search(cands, b, task, 2, finish, prune=False, executor="ray")
    assert len(cands) == 2 and all("error" not in r for r in here)
    assert sorted(here, key=lambda r: r["label"]) == sorted(ray_rows, key=lambda r: r["label"])


def test_ray_missing_is_one_line(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    rc = main(["--trace", "synthetic:gamma?rate=5&n=10&input=128&output=8", "--model", "llama-3.1-8b",
               "--hardware", "h100", "--gpus", "2", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100",
               "--executor", "ray"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--executor ray needs Ray" in err[0]


def test_help_lists_the_new_flags(capsys):
    """Regression: --help crashed (TypeError) on a bare '%' in --slo-percentile's help."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and all(f in out for f in ("--nodes", "--gpus-per-node", "--executor", "disagg"))
