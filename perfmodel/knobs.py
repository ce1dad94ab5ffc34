"""Knobs that perfmodel, the simulator and the kernels share: one definition each, with its source.

A layer that needs one of these imports it from here; none keeps its own copy (a copy drifts: the
Shift threshold was once 512 in the kernels and 256 everywhere else).
"""
from __future__ import annotations

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
