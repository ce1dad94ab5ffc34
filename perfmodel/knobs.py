"""Knobs that perfmodel, the simulator and the kernels share: one definition each, with its source.

A layer that needs one of these imports it from here; none keeps its own copy (a copy drifts: the
Shift threshold was once 512 in the kernels and 256 everywhere else).
"""
from __future__ import annotations

import math

# Shift Parallelism: a step with more batched tokens than this runs the base (SP x TP) config, one
# with this many or fewer the shift (TP) config. ArcticInference's docs (shift parallelism page)
# give 256; its code default is 512. We keep 256: every published Shift figure we reproduce
# (TARGETS.md) was measured with it, and every golden summary in tests/golden was made with it.
SHIFT_THRESHOLD_TOKENS = 256

# SiDP orchestrator: WaS <-> CaS switches only after the other side has won this many decisions
# running. Not published (SYSTEMS.md: "with hysteresis"): two group steps of D = 8 replicas must
# agree before the mode flips, so one replica's completion cannot flap it.
SIDP_HYSTERESIS_DECISIONS = 16

# SiDP's B* is found for decode batches whose sequences hold this many tokens of context. Ours, not
# published (SYSTEMS.md defines B* by the batch alone): a 1K-token context is the short-context decode
# tail where the CaS mode matters; longer contexts add attention time and lower B*
# (tests/test_dyn_sidp.py::test_cas_variants_and_b_star).
SIDP_B_STAR_CONTEXT_TOKENS = 1024

# KV cache block in tokens: vLLM's default block_size on CUDA (the simulator's EngineConfig and the
# kernels' paged cache use the same block).
KV_BLOCK_TOKENS = 16

# Expert-load imbalance under EP: the busiest EP rank receives this many times the mean routed rows
# (max / mean over EP ranks). Default: aiconfigurator's MoE workload_distribution default
# 'power_law_1.01' (ai-dynamo/aiconfigurator@095f58a5, collector/helper.py _generate_power_law_distribution:
# per-expert loads ~ x^-1.01 on [1, 0.8 x tokens], scaled to tokens x top-k, capped at tokens, no EPLB),
# which we sampled (1000 draws, 4096 tokens, 256 experts top-8 as DeepSeek-V3) and averaged max/mean per
# EP degree: EP 16 gives 1.89 (1.77 at 1024 tokens, 2.01 at 16384). Other expert counts use the same
# table (an approximation; Framework.moe_imbalance sets it; 1.0 = uniform).
MOE_EP_IMBALANCE_POWER_LAW = {1: 1.0, 2: 1.089, 4: 1.238, 8: 1.479, 16: 1.893, 32: 2.594, 64: 3.775,
                              128: 5.705, 256: 8.205}


# Expert routing skew the fused-MoE kernel tables are read at (perfmodel.calibration.moe fits one table per
# routing): aiconfigurator's SDK predicts with workload_distribution "power_law" (sdk/config.py:37 @ 095f58a5)
# and a per-family alpha: 1.2 for its generic MoE model (sdk/models/moe.py:128; Mixtral, Qwen2/3-MoE, gpt-oss,
# MiniMax-M2 map to it, sdk/common.py:708-712), 1.01 for DeepSeek-V3/R1 and Kimi (deepseek.py:170, kimi_k3.py:574).
# Skew hits fewer experts in decode (fewer weight bytes) and loads the busiest expert in prefill.
MOE_ROUTING_GENERIC = "power_law_1.2"
MOE_ROUTING_MLA = "power_law_1.01"  # the MLA families (DeepSeek, Kimi): aiconfigurator's DeepSeek-derived models


def moe_routing(spec) -> str:
    """The routing skew whose measured kernel table a model's MoE layers are costed with (above)."""
    return MOE_ROUTING_MLA if getattr(spec, "is_mla", False) else MOE_ROUTING_GENERIC


def moe_ep_imbalance(ep: int) -> float:
    """Default busiest-rank / mean routed rows at EP degree `ep` (table above, log2-linear between)."""
    keys = sorted(MOE_EP_IMBALANCE_POWER_LAW)
    x = min(max(math.log2(max(ep, 1)), 0.0), math.log2(keys[-1]))
    lo = 2 ** math.floor(x)
    hi = min(lo * 2, keys[-1])
    a, b = MOE_EP_IMBALANCE_POWER_LAW[lo], MOE_EP_IMBALANCE_POWER_LAW[hi]
    return a + (b - a) * (x - math.log2(lo))
