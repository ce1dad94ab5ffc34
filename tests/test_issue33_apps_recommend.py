"""Issue 33, finding 4: `simulate recommend --framework F` searches only what F can serve (no Shift or
Ulysses SP outside vLLM; the research policies Flying / Seesaw / SiDP only with --research, marked as
having no command), and the command it prints for F is the deployment it simulated."""
from __future__ import annotations

import json

from simulator.apps.recommend.cli import main
from simulator.apps.recommend.serve import commands

TRACE = "synthetic:gamma?rate=5&n=30&input=256&output=16&seed=5"
BASE = ["--trace", TRACE, "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "4", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "100", "--workers", "1", "--no-prune", "--format", "json"]


def run(capsys, *extra) -> dict:
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_sglang_search_holds_only_what_sglang_serves(capsys):
    res = run(capsys, "--framework", "sglang")
    labels = {r["label"] for r in res["ranking"]}
    assert labels and not {lab for lab in labels if lab.startswith(("shift", "flying", "seesaw", "sidp"))}
    assert all(r.get("degrees", {}).get("sp", 1) == 1 for r in res["ranking"])  # no Ulysses SP in SGLang
    why = {d["label"]: d["reason"] for d in res["dropped"]}
    assert "ArcticInference" in why["shift:threshold=256"] and "not servable by SGLang" in why["shift:threshold=256"]
    assert why["flying"].startswith("research: no SGLang command") and "--research" in why["flying"]
    # the printed command is the winner's deployment, for the framework simulated
    cm, w = res["commands"], res["winner"]
    assert cm["framework"] == "sglang" and cm["simulated"] == cm["sglang"] and cm["simulated"]
    d = w["degrees"]
    assert f"--tp {d['tp']} --dp {d['dp']}" in cm["simulated"]


def test_research_policies_only_when_asked_and_marked(capsys):
    res = run(capsys, "--framework", "sglang", "--research")
    assert {"flying", "sidp"} <= {r["label"] for r in res["ranking"]}
    assert not any(r["label"].startswith("shift") for r in res["ranking"])  # still not SGLang's
    c = commands({"policy": "flying", "deployment": "dp=4 x tp=1"}, "llama-3.1-8b", 4, None, "sglang")
    assert c["simulated"] is None and c["vllm"] is None and c["sglang"] is None and c["trtllm"] is None
    assert c["unservable"]["sglang"].startswith("research: no SGLang command")


def test_vllm_keeps_shift_and_other_frameworks_get_no_false_command():
    from simulator.apps.recommend.support import frameworks_of, why_not

    shift = commands({"policy": "shift", "policy_args": {"threshold": "512"}, "deployment": "base: sp=8 / shift: tp=8"},
                     "llama-3.3-70b", 8)
    assert "--enable-shift-parallel" in shift["vllm"]
    assert shift["sglang"] is None and shift["trtllm"] is None  # was: '--tp 8' / '--tp_size 8', not Shift
    assert "ArcticInference" in shift["unservable"]["sglang"]
    sp = commands({"policy": "layout", "degrees": {"dp": 1, "tp": 2, "pp": 1, "sp": 4, "ep": 1}}, "llama-3.3-70b", 8)
    assert "--ulysses-sequence-parallel-size 4" in sp["vllm"] and sp["sglang"] is None and sp["trtllm"] is None
    assert frameworks_of("layout", {"sp": 1}) == {"vllm", "sglang", "trtllm"} and frameworks_of("shift") == {"vllm"}
    assert why_not("disagg", {}, "trtllm") is None


def test_table_names_the_simulated_framework(capsys):
    assert main([*BASE[:-2], "--framework", "sglang"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cmd = [ln for ln in lines if ln.startswith("  sglang")]
    assert cmd and cmd[0].startswith("  sglang (simulated): python -m sglang.launch_server")
    assert not any("shift" in ln or "flying" in ln for ln in lines if ln[:3].strip().isdigit())
