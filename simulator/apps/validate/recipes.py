"""The disaggregated DeepSeek-R1 deployments behind the H100 TRT-LLM disagg rows, as their recipes launched them.

The rows' own columns do not describe what ran. Their concurrencies (6, 9, 30, ..., 1845, 4916) are exactly
InferenceX's `dsr1-fp8-h100-dynamo-trt` search space (configs/nvidia-master.yaml and
configs/deprecated/nvidia-1k1k-master.yaml @ SemiAnalysisAI/InferenceX 00942911), each concurrency one
NVIDIA srt-slurm recipe (branch sa-submission-q2-2026 @ deb1dfd9, recipes/trtllm/h100-fp8/<isl>/<stp|mtp>/),
where the columns say one 16-GPU prefill and one 16-GPU decode worker without attention DP. What the
recipes set (each file's `resources` and `trtllm_config`, Dynamo 0.8.1.post3):
  prefill ("ctx"): N workers of TP16 + EP16 with attention DP (16 DP ranks), per rank max_batch_size 2 and
      max_num_tokens 2048 (1k input) or 1 and 8224 (8k input);
  decode ("gen"): M workers of TEP16 (TP16 attention, EP16 MoE) or DEP16 (attention DP 16 + EP16), each
      (DEP: each DP rank) with max_batch_size B;
  the benchmark: sa-bench (vLLM's benchmark_serving.py: --random-range-ratio 0.8, 10 x C prompts after a
      2 x C warm-up run; src/srtctl/benchmarks/sa_bench.py lines 99-104) at C ~ 1.2 x the decode slots,
      so requests wait for a decode slot and that wait is in their TTFT (the rows show it: TTFT ~ the
      slots' turnover, f(C) x osl x TPOT with the same f for 1k and 8k prompts).
Some recipes run MTP speculative decoding (`speculative_config: MTP`, 1-3 draft tokens per step;
perfmodel.specdec): a concurrency only an MTP recipe ran replays it with `decode_mtp`. Where both an MTP and
a plain recipe ran at one concurrency, the dataset holds two rows with identical columns ("twins"): each
recipe is replayed and the labels are given back by rank (twins.py); a concurrency with one distinct
measurement replays the first recipe (the plain one).
The SGLang DeepSeek disagg rows (SGLang 0.5.8, 2026-02-13) are InferenceX's MTP-only search space of that
day (SGLANG_DSR1_H100_MTP below), replayed the same way.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One srt-slurm recipe's deployment: workers, their layouts and per-rank engine limits."""

    name: str  # the recipe file's stem
    ctx_workers: int
    ctx_max_batch: int  # per attention-DP rank
    ctx_max_tokens: int
    gen_workers: int
    gen_attention_dp: bool  # DEP16 (16 DP ranks, each max_batch_size) or TEP16 (one engine)
    gen_max_batch: int
    mtp: int = 0  # MTP draft layers (0: none)
    # kv_cache_config free_gpu_memory_fraction: ctx 0.6 at 1k input, 0.3 at 8k; gen 0.9 in every recipe
    ctx_kv_fraction: float = 0.6
    gen_kv_fraction: float = 0.9

    @property
    def prefill_pool(self) -> str:
        return f"{self.ctx_workers}x(dp=16,tp=1,ep=16)"

    @property
    def decode_pool(self) -> str:
        return f"{self.gen_workers}x(" + ("dp=16,tp=1,ep=16" if self.gen_attention_dp else "tp=16,ep=16") + ")"


def _r(ctx: int, gen: int, dep: bool, batch: int, mtp: int, isl: int) -> Recipe:
    kind = "dep16" if dep else "tep16"
    name = f"ctx{ctx}_gen{gen}_{kind}_batch{batch}_eplb0_mtp{mtp}"
    ctx_batch, ctx_tokens, ctx_kv = (2, 2048, 0.6) if isl == 1024 else (1, 8224, 0.3)
    return Recipe(name, ctx, ctx_batch, ctx_tokens, gen, dep, batch, mtp, ctx_kv)


# (isl, osl, concurrency) -> the recipes InferenceX ran there (plain first)
TRTLLM_DSR1_H100: dict = {}
for _isl, _rows in (
    (1024, [(6, 1, 3, False, 1, 0), (9, 1, 3, False, 2, 0), (30, 1, 3, False, 8, 0), (60, 1, 3, False, 16, 0),
            (231, 1, 3, True, 4, 0), (462, 1, 3, True, 8, 0), (924, 1, 3, True, 16, 0), (1845, 1, 3, True, 32, 0),
            (4916, 2, 1, True, 256, 0),
            (6, 1, 3, False, 1, 3), (9, 1, 3, False, 2, 3), (30, 1, 3, False, 8, 3), (60, 1, 3, False, 16, 3),
            (117, 1, 3, False, 32, 3), (231, 1, 3, True, 4, 3), (462, 1, 3, False, 128, 3),
            (615, 1, 1, True, 32, 2), (1229, 1, 1, True, 64, 1)]),
    (8192, [(6, 1, 3, False, 1, 0), (9, 1, 3, False, 2, 0), (30, 1, 3, False, 8, 0), (154, 1, 2, False, 64, 0),
            (308, 2, 1, True, 16, 0),
            (6, 1, 3, False, 1, 3), (9, 1, 3, False, 2, 3), (30, 1, 3, False, 8, 3), (77, 1, 1, True, 4, 3),
            (154, 2, 1, True, 8, 3)]),
):
    for _c, _ctx, _gen, _dep, _b, _mtp in _rows:
        TRTLLM_DSR1_H100.setdefault((_isl, 1024, _c), []).append(_r(_ctx, _gen, _dep, _b, _mtp, _isl))


# InferenceX's `dsr1-fp8-h100-dynamo-sglang` search space (image lmsysorg/sglang:v0.5.8-cu130) from commit
# 78d48618f (2026-02-12 21:10 -0600, "h100: mtp configs sglang") on: only MTP recipes, the plain ones commented
# out. The SGLang 0.5.8 DeepSeek rows are dated 2026-02-13 and sit exactly on it (1k/8k output up to C=64,
# where the plain space stopped at 32; two rows per concurrency, one at C=128). Two recipes ran at each
# concurrency: "max-tp" (srt-slurm recipes/h100/<isl>/mtp/h100-fp8-1p{2,1}d-max-tp-mtp.yaml, every
# concurrency) and "max-dep" (...-1p1d-max-dep-mtp.yaml, up to 64); the rows' columns cannot tell them
# apart: both are replayed and twins.py gives the labels back where two distinct measurements exist (a lone
# measurement replays max-tp). max-tp: prefill 1 x TP16 (MoE TP, no EP), max-running-requests 2,
# chunked-prefill-size 2048; decode N x TP16 with max-running-requests M; EAGLE speculative decoding with
# speculative-num-steps 2, topk 1 (2 draft tokens); KV cache dtype unset (SGLang "auto": the checkpoint's
# bf16 activations). (isl, osl) -> (concurrencies, decode workers, decode max-running-requests, recipe)
SGLANG_DSR1_H100_MTP = {(1024, 1024): ((1, 2, 4, 8, 16, 32, 64, 128), 2, 128, "h100-fp8-1p2d-max-tp-mtp"),
                        (1024, 8192): ((1, 2, 4, 8, 16, 32, 64), 2, 64, "h100-fp8-1p2d-max-tp-mtp"),
                        (8192, 1024): ((1, 2, 4, 8, 16, 32, 64, 128), 1, 128, "h100-fp8-1p1d-max-tp-mtp")}


# max-dep (recipes/h100/<isl>/mtp/h100-fp8-1p1d-max-dep-mtp.yaml, concurrencies 1..64 for all three lengths):
# prefill 1 x TP16 with max-running-requests 4 (chunk 2048); decode 1 x DEP16 (tp 16, dp 16, ep 16, DP
# attention) with max-running-requests 64, which SGLang 0.5.8 splits over the DP ranks under speculative
# decoding (model_runner_kv_cache_mixin.py:288: max_running_requests // dp_size = 4 per rank); same EAGLE.
SGLANG_DSR1_H100_MAX_DEP = ("h100-fp8-1p1d-max-dep-mtp", 64, 4)  # (recipe, last concurrency, per-rank requests)


def sglang_dsr1_choices(version: str, isl: int, osl: int, concurrency: int) -> list:
    """[(policy args, recipe name), ...] of the recipes InferenceX ran at an SGLang 0.5.8 DeepSeek disagg row's
    concurrency on H100 (max-tp first, then max-dep); [] when the row is not one of them."""
    got = SGLANG_DSR1_H100_MTP.get((isl, osl))
    if version != "0.5.8" or got is None or concurrency not in got[0]:
        return []
    _, workers, running, name = got
    # mem-fraction-static: prefill 0.6 in both recipes, decode 0.9 (max-tp) / 0.85 (max-dep)
    out = [((("prefill", "1x(tp=16)"), ("decode", f"{workers}x(tp=16)"), ("prefill_max_seqs", "2"),
             ("prefill_max_tokens", "2048"), ("decode_max_seqs", str(running)), ("decode_mtp", "2"),
             ("prefill_memory_fraction", "0.6"), ("decode_memory_fraction", "0.9")), name)]
    dep_name, dep_last, dep_rank = SGLANG_DSR1_H100_MAX_DEP
    if concurrency <= dep_last:
        out.append(((("prefill", "1x(tp=16)"), ("decode", "1x(dp=16,tp=1,ep=16)"), ("prefill_max_seqs", "4"),
                     ("prefill_max_tokens", "2048"), ("decode_max_seqs", str(dep_rank)), ("decode_mtp", "2"),
                     ("prefill_memory_fraction", "0.6"), ("decode_memory_fraction", "0.85")), dep_name))
    return out


def trtllm_dsr1_recipes(isl: int, osl: int, concurrency: int) -> list:
    """The recipes InferenceX ran at a TRT-LLM DeepSeek disagg row's concurrency on H100, plain first
    ([] when the row is not one of them)."""
    return list(TRTLLM_DSR1_H100.get((isl, osl, concurrency), ()))
