"""Cell sources of notebook 09 (DeepSeek-R1 on 8 x H200, 8 x B200 and GB200 NVL72, fp8 vs nvfp4, at equal
traffic per GPU); see nb_cells.py."""

BLACKWELL = [
    ("md", """
# 09 · Blackwell: which layout wins for DeepSeek-R1 on 8 x H200, 8 x B200 and GB200 NVL72, fp8 vs nvfp4

DeepSeek-R1 (671B MoE, MLA, 256 routed experts, 8 per token) served by TensorRT-LLM (`framework="trtllm"`),
fp8 KV cache, in two weight formats: DeepSeek's own block **fp8** and NVIDIA ModelOpt **nvfp4** (9/16 byte per
weight; MLA projections, routers and lm_head stay bf16; fp4 tensor cores on Blackwell). Systems: one HGX
8 x H200, one HGX 8 x B200 and one GB200 NVL72 rack (72 GPUs in one NVLink domain, docs/hardware.md).

**Equal traffic** = the same arrival rate *per GPU*: 2 requests/s per GPU, i.e. 16/s on an 8-GPU server and
144/s on the rack, a gamma process with burstiness 0.5 (CV sqrt 2), request lengths resampled from the bundled
BurstGPT-format trace (~620 prompt / ~350 output tokens on average: chat lengths, not R1's long reasoning
outputs), over the same span on every system. SLOs as notebook 08: TTFT <= 1 s and TPOT <= 50 ms.

**Layouts** (a family name, the same colour in the figure, on every system):
- 8 GPUs: `tp=8` (experts TP-sliced), `tp=8,ep=8` (TP8 attention, whole experts on 8 ranks), `dp=8,ep=8`
  (attention data-parallel, experts on 8 ranks: the ranks step in lock-step, docs/simulator.md);
- the rack: the same three families replicated 9 times (`dp=9 x tp=8`, `dp=9 x (tp=8,ep=8)`, `dp=72,ep=8`),
  `dp=18 x tp=4`, **wide EP** `dp=72,ep=72` (ceil(256 / 72) = 4 expert slots per rank, 32 of them redundant
  copies, the model's load the balanced mean), and wide EP as it is usually deployed on NVL72, behind
  disaggregated prefill: `--policy disagg` with prefill 4 x TP4 (16 GPUs) and decode DP56 + EP56 (one split,
  not searched).

**Winner** per system and format: the rule of `simulate recommend` (notebook 08): layouts meeting the SLOs
(>= 90% of requests meet both) first, then SLO goodput per GPU, then the lower p90 TTFT.

**Caveat: Blackwell numbers are datasheet roofline.** The project ships no calibrated Blackwell profile
(docs/hardware.md): B200 and GB200 run on their datasheet peaks with *assumed* achieved rates (80% of peak
compute, the H200's HBM efficiency, H100's collectives with twice the bandwidth; groups beyond 8 ranks keep
the 8-rank floors). So they compare with each other and with the **H200 datasheet** rows (`profile="none"`),
not with the calibrated H200 rows without that caveat: on H100, where both exist, the roofline's TPOT is
21-42% lower than the calibrated one's. **H200 nvfp4 is not simulated**: Hopper has no fp4 tensor cores, so
NVFP4 there can only run weight-only (W4A16: dequantised into bf16 MMAs, as vLLM's Marlin does), a memory saving
rather than the format this comparison is about; the fp4 cell below shows what W4A16 does to an H200 prefill.
"""),
    ("code", """
import matplotlib.pyplot as plt

from perfmodel.batch import prefill_batch
from perfmodel.calibration.profile import resolve_profile
from perfmodel.cost import step_cost
from perfmodel.deploy import deployment
from perfmodel.estimate import estimate
from perfmodel.framework import for_hardware, framework_preset
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from simulator import RunSpec, run
from simulator.run import workload

MODEL = dict(model="deepseek-r1", kv_dtype="fp8", framework="trtllm")
SLO = dict(slo_ttft_ms=1000.0, slo_tpot_ms=50.0)
RATE_PER_GPU = 2.0  # requests/s per GPU: the same for every system
SPAN_S = 30 if QUICK else 300  # arrivals over this span on every system
DISAGG = {"prefill": "4x(tp=4)", "decode": "1x(dp=56,ep=56)"}
HGX = {"TP8": "tp=8", "TP8 + EP8": "tp=8,ep=8", "DP8 + EP8": "dp=8,ep=8"}
RACK = {"TP8": "tp=8,dp=9", "TP8 + EP8": "tp=8,ep=8,dp=9", "DP8 + EP8": "dp=72,ep=8", "TP4": "tp=4,dp=18",
        "wide EP72": "dp=72,ep=72", "disagg + wide EP56": DISAGG}
SYSTEMS = [  # (system, hardware, GPUs, profile: None = the hardware's calibrated one, "none" = datasheet)
    ("8 x H200 (calibrated)", "h200", 8, None, ("fp8",), HGX),
    ("8 x H200 (datasheet)", "h200", 8, "none", ("fp8",), HGX),
    ("8 x B200", "b200", 8, "none", ("fp8", "nvfp4"), HGX),
    ("GB200 NVL72", "gb200", 72, "none", ("fp8", "nvfp4"), RACK),
]


def traffic(gpus):
    \"\"\"RATE_PER_GPU x gpus requests/s for SPAN_S seconds, BurstGPT lengths.\"\"\"
    return workload(f"gamma?rate={RATE_PER_GPU * gpus:g}&burstiness=0.5&duration_s={SPAN_S}"
                    "&lengths=burstgpt.csv&seed=1")


def trtllm(hw):
    return for_hardware(framework_preset("trtllm", None), hw)


pd.DataFrame({f"{g} GPUs": traffic(g).requests[["input_tokens", "output_tokens"]].agg(["count", "mean", "max"]).stack()
              for g in (8, 72)}).T
"""),
    ("md", """
**Memory per GPU and one request alone** (`perfmodel estimate`'s closed forms, 1,024 prompt / 512 output
tokens, no other traffic). KV tokens per GPU = the instance's KV capacity x instances / GPUs: MLA's latent KV is
replicated over the TP ranks of an instance, so attention-DP layouts hold many more distinct tokens per GPU.
"""),
    ("code", """
mem = []
for system, hardware, gpus, profile, formats, layouts in SYSTEMS:
    hw = load_hardware(hardware)
    for weights in formats:
        spec = load_model(MODEL["model"], weights=weights, kv=MODEL["kv_dtype"])
        for family, lay in layouts.items():
            if isinstance(lay, dict):  # disagg: its pools' memory comes from the simulated run below
                continue
            e = estimate(lay, spec, hw, gpus, 1024, 512, prof=resolve_profile(hw, profile), fw=trtllm(hw))
            instances = deployment(lay, spec, hw, gpus, trtllm(hw)).instances
            mem.append(dict(system=system, weights=weights, family=family, layout=e["layout"],
                            weights_gb_per_gpu=e["weights_gb_per_gpu"],
                            kv_tokens_per_gpu=e["kv_capacity_tokens"] * instances / gpus,
                            alone_ttft_ms=e["ttft_ms"], alone_tpot_ms=e["tpot_ms"]))
mem = pd.DataFrame(mem)
mem.set_index(["system", "weights", "family"]).round(1)
"""),
    ("md", """
**At equal traffic** (the simulator, `simulator.run`). Output tokens/s per GPU is the served rate over the run's
duration (last completion included): where every layout keeps up it is the offered load, less a drain tail.
"""),
    ("code", """
rows = []
for system, hardware, gpus, profile, formats, layouts in SYSTEMS:
    wl = traffic(gpus)
    span = wl.requests.arrival_s.max() - wl.requests.arrival_s.min()
    for weights in formats:
        for family, lay in layouts.items():
            how = dict(policy="disagg", policy_args=lay) if isinstance(lay, dict) else dict(policy="layout", layout=lay)
            s = run(wl, RunSpec(**how, hardware=hardware, gpus=gpus, weights=weights, profile=profile, **MODEL,
                                **SLO)).summary
            rows.append(dict(system=system, weights=weights, family=family, deployment=s["layout"],
                             requests=len(wl.requests), completed=s["completed"], rejected=s["rejected"],
                             out_tok_s_per_gpu=s["output_throughput"] / gpus, p90_ttft_ms=s["p90_ttft_ms"],
                             p90_tpot_ms=s["p90_tpot_ms"], slo_met_pct=100 * s["goodput_requests"] / len(wl.requests),
                             goodput_per_gpu=s["goodput_requests"] / span / gpus,
                             kv_tokens_per_gpu=s["kv_capacity_tokens"] / gpus))
sim = pd.DataFrame(rows)
sim["met"] = sim.slo_met_pct >= 90
sim.drop(columns=["requests", "rejected"]).set_index(["system", "weights", "family"]).round(1)
"""),
    ("code", """
ranked = sim.sort_values(["met", "goodput_per_gpu", "p90_ttft_ms"], ascending=[False, False, True])
GROUPS = list(dict.fromkeys(zip(sim.system, sim.weights)))  # the systems' order
top2 = ranked.groupby(["system", "weights"], sort=False).head(2).set_index(["system", "weights"]).loc[GROUPS]
winners = top2.groupby(level=[0, 1], sort=False).head(1)
print("winner, then runner-up, per system and format:")
top2[["family", "deployment", "met", "slo_met_pct", "p90_ttft_ms", "p90_tpot_ms", "out_tok_s_per_gpu"]].round(1)
"""),
    ("code", """
FAMILIES = list(RACK)  # colour per family
LEGEND = {"TP8": "TP8 (experts TP-sliced)", "TP8 + EP8": "TP8 attention + EP8 experts",
          "DP8 + EP8": "DP8 attention + EP8 (lock-step)", "TP4": "TP4 (experts TP-sliced)",
          "wide EP72": "DP72 attention + EP72 (wide EP, lock-step)",
          "disagg + wide EP56": "disagg: prefill 4 x TP4 / decode DP56 + EP56"}
PANELS = (("kv_tokens_per_gpu", "KV cache capacity (tokens per GPU)", True, None),
          ("out_tok_s_per_gpu", "output tokens/s per GPU", False, None),
          ("p90_ttft_ms", "p90 TTFT (ms)", True, SLO["slo_ttft_ms"]),
          ("p90_tpot_ms", "p90 TPOT (ms)", False, SLO["slo_tpot_ms"]))
fig, axes = plt.subplots(2, 2, figsize=(15, 8.5), sharex=True)
width = 0.8 / len(FAMILIES)
for ax, (col, label, log, slo) in zip(axes.flat, PANELS):
    for i, (system, weights) in enumerate(GROUPS):
        here = sim[(sim.system == system) & (sim.weights == weights)].reset_index(drop=True)
        best = winners.loc[(system, weights), "family"]
        for j, r in here.iterrows():
            x = i + (j - (len(here) - 1) / 2) * width
            ax.bar(x, r[col], width, color=f"C{FAMILIES.index(r.family)}",
                   edgecolor="black" if r.family == best else "none", linewidth=1.5)
    if slo:
        ax.axhline(slo, color="red", ls="--", lw=1)
    ax.set(ylabel=label, yscale="log" if log else "linear")
    ax.grid(axis="y", alpha=0.3, which="both")
labels = [(system + "\\n" + weights).replace(" (", "\\n(") for system, weights in GROUPS]
for ax in axes[1]:
    ax.set_xticks(range(len(GROUPS)), labels, fontsize=9)
handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{k}") for k in range(len(FAMILIES))]
handles += [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", linewidth=1.5),
            plt.Line2D([], [], color="red", ls="--", lw=1)]
fig.legend(handles, [LEGEND[f] for f in FAMILIES] + ["winner (black edge)", "SLO: TTFT 1 s, TPOT 50 ms"],
           loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=9, frameon=False)
fig.suptitle(f"DeepSeek-R1, fp8 KV, TensorRT-LLM, {RATE_PER_GPU:g} req/s per GPU (BurstGPT lengths); Blackwell and "
             "'datasheet' H200 on the datasheet roofline (no calibrated Blackwell profile)", fontsize=11)
fig.tight_layout()
save(fig, "09_blackwell_layouts")
plt.close(fig)  # shown once, by save
"""),
    ("md", """
**What nvfp4 buys in a prefill.** One 8,192-token prompt on `tp=8`, the step's GEMM and attention terms, both GPUs
on their datasheet roofline. On B200 nvfp4 weights run fp4 GEMMs at twice the fp8 rate; on H200 they are W4A16
(dequantised into a bf16 MMA, half the fp8 rate). The gain on B200 is small: the MLA projections stay bf16 in the
NVFP4 checkpoint (fp8 in DeepSeek's), and the TP-sliced expert GEMMs move bf16 activations.
"""),
    ("code", """
PROMPT = 8192
pre = []
for hardware in ("b200", "h200"):
    hw = load_hardware(hardware)
    for weights in ("fp8", "nvfp4"):
        spec = load_model(MODEL["model"], weights=weights, kv=MODEL["kv_dtype"])
        terms = step_cost(spec, ParallelLayout.parse("tp=8"), hw, prefill_batch(PROMPT), None, trtllm(hw)).breakdown()
        pre.append(dict(hardware=hardware, weights=weights, gemm_ms=1e3 * float(terms["gemm"]),
                        attention_ms=1e3 * float(terms["attention"]), step_ms=1e3 * float(sum(terms.values()))))
pre = pd.DataFrame(pre).set_index(["hardware", "weights"])
pre.round(2)
"""),
    ("md", """
**Checks** (physical facts the numbers above must show):
- every request of every run completes, none rejected (2 req/s per GPU fits every layout's KV);
- nvfp4 weights take less HBM per GPU than fp8 on every layout, and leave at least as much KV capacity;
- attention-DP layouts (DP8 + EP8, wide EP72) hold over 4x the KV tokens per GPU of TP8 instances (MLA's latent
  is replicated over the TP ranks), and estimate and simulate plan the same KV per GPU;
- fp4 tensor cores: the prefill GEMM term is shorter with nvfp4 than fp8 on B200, longer on H200 (W4A16);
- lock-step interference: alone, wide EP72's TPOT is within 10% of DP8 + EP8's on the rack, but at traffic its
  p90 TPOT is over 1.5x: with 72 ranks stepping together, some rank is prefilling in most steps and stretches
  everyone's decode step; disaggregating prefill removes that, and gives the rack's lowest p90 TPOT. (This is
  the imbalance TensorRT-LLM's "ADP Balance Strategy" tech blog describes, with disaggregation as the usual
  remedy; its in-engine balancing, `attention_dp_config.enable_balance`, is `simulate --adp-balance` here, off in
  these runs as it is by default in TensorRT-LLM.)

The winners (printed last) are the model's conclusions at this traffic, not asserted: within a system the top two
are often a few percent apart in p90 TTFT.
"""),
    ("code", """
assert (sim.completed == sim.requests).all() and (sim.rejected == 0).all(), sim[sim.completed != sim.requests]
m = mem.set_index(["system", "family", "weights"])
for system, hardware, gpus, profile, formats, layouts in SYSTEMS:
    for family, lay in layouts.items():
        if "nvfp4" in formats and not isinstance(lay, dict):
            fp8, fp4 = m.loc[(system, family, "fp8")], m.loc[(system, family, "nvfp4")]
            assert fp4.weights_gb_per_gpu < fp8.weights_gb_per_gpu, (system, family)
            assert fp4.kv_tokens_per_gpu >= fp8.kv_tokens_per_gpu, (system, family)
kv = m.kv_tokens_per_gpu
for (system, family, weights), tokens in kv.items():
    if family in ("DP8 + EP8", "wide EP72"):
        assert tokens > 4 * kv[(system, "TP8", weights)], (system, family, weights, tokens)
s = sim.set_index(["system", "family", "weights"])
both = s.kv_tokens_per_gpu.loc[kv.index]
assert np.allclose(both, kv, rtol=1e-4), pd.concat([both, kv], axis=1)  # (the simulator: whole KV blocks)
assert pre.gemm_ms["b200", "nvfp4"] < pre.gemm_ms["b200", "fp8"], pre
assert pre.gemm_ms["h200", "nvfp4"] > pre.gemm_ms["h200", "fp8"], pre
for weights in ("fp8", "nvfp4"):
    alone = m.alone_tpot_ms.loc["GB200 NVL72"].xs(weights, level="weights")
    p90 = s.p90_tpot_ms.loc["GB200 NVL72"].xs(weights, level="weights")
    assert alone["wide EP72"] <= 1.1 * alone["DP8 + EP8"], (weights, alone)
    assert p90["wide EP72"] > 1.5 * p90["DP8 + EP8"], (weights, p90)
    assert p90.idxmin() == "disagg + wide EP56", (weights, p90)
print("winners:", {f"{sy} {w}": r.family for (sy, w), r in winners.iterrows()})
"""),
]
