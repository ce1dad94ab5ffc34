"""Cell sources of notebook 08 (`simulate recommend`: choose a deployment for a trace under SLOs)."""

RECOMMEND = [
    ("md", """
# 08 · Choose a deployment: `simulate recommend` on two traces, Llama-3.3-70B on 8 x H200

Every static layout that fits (DP x TP x PP x SP), the dynamic policies with their knobs (Shift thresholds,
Flying, Seesaw, SiDP) and disaggregated prefill/decode splits, pruned by closed-form bounds, the survivors
simulated on the trace; ranked by SLO goodput per GPU (requests meeting both SLOs at the 90th percentile
per second per GPU). Traces: the bundled BurstGPT-format sample at 8x its arrival rate, and the Azure 2023
conversation trace when `../shared` is present. Same as `simulate recommend --trace ... --plot ...`.
"""),
    ("code", """
from pathlib import Path

from simulator import load_trace
from simulator.apps.recommend.core import recommend
from simulator.apps.recommend.plot import frontier, pareto_plot
from simulator.workload import rate_scale, time_window

SETUP = dict(model="llama-3.3-70b", hardware="h200", gpus=8, workers=2)
SLO = dict(slo_ttft_ms=1000.0, slo_tpot_ms=50.0)
traces = {"burstgpt x8": rate_scale(time_window(load_trace("burstgpt.csv"), 0, 300 if QUICK else 1800), 8)}
azure = Path("../../shared/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv")
if azure.exists():
    traces["azure conv"] = time_window(load_trace(str(azure)), 0, 600) if QUICK else load_trace(str(azure))
else:
    print("../shared absent: the Azure trace is skipped")
results = {name: recommend(wl, **SETUP, **SLO) for name, wl in traces.items()}
pd.DataFrame({name: {**r["counts"], "winner": r["winner"]["label"], "met": r["met"], "wall_s": round(r["wall_s"], 1)}
              for name, r in results.items()}).T
"""),
    ("code", """
COLS = ["label", "kind", "met", "goodput_per_gpu", "throughput_per_gpu", "p90_ttft_ms", "p90_tpot_ms"]
for name, r in results.items():
    display(pd.DataFrame(r["ranking"])[COLS].head(10).round(3).style.set_caption(name))
"""),
    ("code", """
for name, r in results.items():
    fig_name = "08_recommend_" + name.split()[0]
    pareto_plot(r, FIGURES / f"{fig_name}.png")
    display(Image(filename=str(FIGURES / f"{fig_name}.png")))
    print(name, "frontier:", [f["label"] for f in frontier(r["ranking"])])
print(results["burstgpt x8"]["commands"]["vllm"])
"""),
    ("md", """
**Checks.** The winner is the best simulated candidate on the objective; pruning never dropped a better one
(the same search without pruning picks the same winner, on the smaller trace); every pruned candidate's
bound is below the best simulated result; the winner comes with a serving command line.
"""),
    ("code", """
from simulator.apps.recommend.rank import key

for name, r in results.items():
    best = max(r["ranking"], key=key)
    assert key(best) == key(r["winner"]), (name, best["label"], r["winner"]["label"])
    assert r["commands"] and r["commands"]["vllm"].startswith("vllm serve"), r["commands"]
full = recommend(traces["burstgpt x8"], **SETUP, **SLO, prune=False)
assert key(full["winner"]) == key(results["burstgpt x8"]["winner"]), (full["winner"]["label"],)
print("winners:", {n: r["winner"]["label"] for n, r in results.items()})
"""),
]
