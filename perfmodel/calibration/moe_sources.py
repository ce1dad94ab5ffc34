"""Which aiconfigurator MoE table each framework's fused-MoE fit reads (calibration/moe.py), per quant mode,
and which weight format each quant mode is.

Two ways to pick the version folders of <dir>/moe/<backend>/<version>/moe_perf.parquet:
  pinned  SOURCES below, for a folder that holds every pinned file (the Hopper systems the bundled profiles
          were fitted on: the versions nearest the end-to-end runs);
  newest  each framework's newest version folder (aiconfigurator.version_key order), same keys, kernel
          filters and dtypes: for a GPU whose folder lacks the pinned versions and that has no bundled
          profile to copy from (a Blackwell system; calibrate.add_extra_sections decides the order).
"""
from __future__ import annotations

from pathlib import Path

from .aiconfigurator import newest

# which table each serving framework's kernels come from, per aiconfigurator quant mode: the
# version nearest the e2e runs (vLLM 0.18 / 0.11 rows; TRT-LLM 1.0-1.3 rows). A value is (backend, version,
# kernel_source filter or None, the rows' moe_dtype when it is not the key's). vLLM's only Hopper W4A16
# mxfp4 rows are in 0.24.0, from two kernel families that are fitted apart: the triton OAI kernel (gpt-oss
# shapes; vLLM's default on Hopper when triton_kernels is installed) and Marlin (a Kimi-K3 shape; what
# VLLM_MXFP4_USE_MARLIN=1 selects). int4 W4A16 (compressed-tensors WNA16, Kimi-K2.5's experts) runs vLLM's
# Marlin int4 MoE (MarlinExperts), taken from 0.24.0 (`int4_wo`, Kimi-K2.5's own shape at every TP/EP split).
# Three versions measured it at that shape (7168, 2048, 384 experts, top-8): 0.14.0 and 0.24.0 agree within
# 0.84-1.03x at TP1-8 and 1-16k tokens, 0.19.0 is 1.5-5.4x slower than both (peaking at 256 tokens), so the
# 0.19 table is taken for an anomalous collection, not the kernel of its time; 0.14 covers 10 shapes but EP >= 8
# at 1-2 points per shape (tests/test_moe_calibration.py checks the 0.24 fit against 0.14's points).
# Its fixed time per layer also serves gpt-oss: a 5th item names the key whose rows' intercept is the entry's
# floor. The 0.24 Marlin mxfp4 rows are vLLM's situ-as-silu path at 896 experts, whose intercept (60 us)
# is ~2x the same version's standard path (0.24 int4 MarlinExperts: 32 us TP, 47 us EP; in one version,
# SGLang 0.5.14, the situ mxfp4 Marlin at 896 experts takes 0.076-0.080 ms at one token on TP8/16 against
# 0.025-0.029 ms for its int4 Marlin at 384 experts). gpt-oss (128 experts, its own activation) takes the
# family's floor and the mxfp4 table's ratio above it.
# A key "<quant>_<kernel>" is that kernel family's table (Framework.moe_kernel picks it).
# The 4-bit formats of fp4 tensor cores (Blackwell) are fitted where a table has their rows (Hopper tables have
# none: those entries are skipped there): `nvfp4`, W4A4 (e2m1 weights and activations, an fp8 scale per 16),
# and MXFP4 weights with MXFP8 activations (`w4a8_mxfp4_mxfp8`; `_trtllm`: the TRT-LLM-gen kernel, a backend
# of its own per aiconfigurator's sdk/common.py). Every kernel family of these modes is pooled, as for bfloat16.
SOURCES = {
    "vllm": {"bfloat16": ("vllm", "0.19.0", None), "fp8_block": ("vllm", "0.19.0", None),
             "w4a16_mxfp4": ("vllm", "0.24.0", "oaitriton"),
             "w4a16_mxfp4_marlin": ("vllm", "0.24.0", "marlin", None, "w4a16_int4"),
             "w4a16_int4": ("vllm", "0.24.0", "marlin", "int4_wo"),
             "nvfp4": ("vllm", "0.24.0", None), "w4a8_mxfp4_mxfp8": ("vllm", "0.24.0", None)},
    "trtllm": {"bfloat16": ("trtllm", "1.3.0rc20", None), "fp8_block": ("trtllm", "1.3.0rc20", None),
               "w4a16_mxfp4": ("trtllm", "1.3.0rc20", None),
               "nvfp4": ("trtllm", "1.3.0rc20", None), "w4a8_mxfp4_mxfp8": ("trtllm", "1.3.0rc20", None),
               "w4a8_mxfp4_mxfp8_trtllm": ("trtllm", "1.3.0rc20", None)},
}
# ModelSpec.weight_dtype -> aiconfigurator quant mode. fp8 -> fp8_block: the fp8 MoE checkpoints
# served (Qwen3-*-FP8, MiniMax-M2.5, DeepSeek) are 128x128 block-scaled. Per-tensor fp8 tables are
# not committed (no model here maps to them; the shipped profile must stay small).
WEIGHT_DTYPE_MAP = {"bf16": "bfloat16", "fp8": "fp8_block", "mxfp4": "w4a16_mxfp4", "int4": "w4a16_int4"}
# aiconfigurator MoEQuantMode (sdk/common.py) -> ModelSpec.weight_dtype, the weights the formula is evaluated
# with: every MXFP4 mode's weights are mxfp4 (the activation format is the kernel's, which the ratio carries);
# nvfp4's are NVFP4 (costed on fp4 tensor cores where the GPU has them, perfmodel.ops)
MODEL_DTYPE = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "w4a16_mxfp4": "mxfp4", "w4a16_int4": "int4",
               "w4a8_mxfp4_mxfp8": "mxfp4", "w4a8_mxfp4_mxfp8_trtllm": "mxfp4", "nvfp4": "nvfp4"}
# ModelSpec.weight_dtype -> the quant keys a framework's table may be under, in order: the profile's
# weight_dtype_map names the fitted ones (a list where several are: each framework takes the first it has).
# mxfp4 takes the W4A16 table first on every GPU: vLLM v0.33.0's default gpt-oss MoE backend on sm_100 is
# FLASHINFER_TRTLLM_MXFP4_BF16 (fused_moe/oracle/mxfp4.py:402-435, 631), and perfmodel.ops runs mxfp4 as W4A16;
# the W4A8 (MXFP8 activation) tables answer where a framework has only those
WEIGHT_DTYPE_CANDIDATES = {"bf16": ("bfloat16",), "fp8": ("fp8_block",), "int4": ("w4a16_int4",),
                           "mxfp4": ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8_trtllm"),
                           "nvfp4": ("nvfp4",)}
MXFP4_ON_FP4_CORES = WEIGHT_DTYPE_CANDIDATES["mxfp4"]


def source(quant: str, src: tuple) -> tuple:
    """(backend, version, kernel filter, the rows' moe_dtype) of a SOURCES entry."""
    backend, version, kernel, *rest = src
    return backend, version, kernel, (rest[0] if rest and rest[0] else quant.split("_marlin")[0])


def pinned_files(moe_dir) -> list[Path]:
    """The parquet files SOURCES reads, under moe_dir (<dir>/moe)."""
    return [Path(moe_dir) / s[0] / s[1] / "moe_perf.parquet" for q in SOURCES.values() for s in q.values()]


def newest_sources(moe_dir) -> dict:
    """SOURCES with each framework's version replaced by its backend's newest version folder under moe_dir
    that holds moe_perf.parquet; frameworks without one are left out ({} when none has one)."""
    out = {}
    for fw, quants in SOURCES.items():
        backends = {src[0] for src in quants.values()}
        found = {b: newest(Path(moe_dir) / b, "moe_perf.parquet") for b in backends}
        if all(found.values()):
            out[fw] = {q: (src[0], found[src[0]].parent.name, *src[2:]) for q, src in quants.items()}
    return out


def weight_dtype_map(fitted, fp4_cores: bool = False) -> dict:
    """The section's ModelSpec.weight_dtype -> quant key map for the fitted quant keys `fitted` (no
    @routing): WEIGHT_DTYPE_MAP, where a format has other fitted keys the fitted ones (a list when several,
    in WEIGHT_DTYPE_CANDIDATES order; MXFP4_ON_FP4_CORES for mxfp4 where the GPU has `fp4_cores`). A Hopper
    fit gives WEIGHT_DTYPE_MAP unchanged."""
    out = dict(WEIGHT_DTYPE_MAP)
    for wd, cands in WEIGHT_DTYPE_CANDIDATES.items():
        cands = MXFP4_ON_FP4_CORES if wd == "mxfp4" and fp4_cores else cands
        have = [c for c in cands if c in fitted]
        if have:
            out[wd] = have if len(have) > 1 else have[0]
    return out
