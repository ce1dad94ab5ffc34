"""The disaggregated DeepSeek-R1 deployments behind the H200 disagg rows, as their srt-slurm recipes launched them.

The rows (TRT-LLM under Dynamo 0.8.1.post1, dated 2026-02-14 and 2026-03-23; SGLang 0.5.8.post1, 2026-02-07) are
InferenceX's `dsr1-fp8-h200-dynamo-trt` search space (.github/configs/nvidia-master.yaml:1942-2484 @ 49f8ceee0; the
same recipes at f316a0ef6, :2145-2687, whose change is prefill metadata only) and `dsr1-fp8-h200-dynamo-sglang`
(:5059-5315 @ fcc04aaa2). runners/launch_h200-dgxc-slurm.sh:12-14,84 @ 49f8ceee0 runs each entry's srt-slurm
recipe (ishandhanani/srt-slurm branch sa-submission-q1-2026, squash-merged into NVIDIA/srt-slurm as 5063eb43,
where the recipe files cited below are read: recipes/trtllm/h200/<isl>/<stp|mtp>/<name>.yaml and
recipes/h200/<isl>/<name>.yaml). Each recipe's `benchmark.concurrencies` is the row's concurrency. The rows'
own columns carry no worker counts or limits for the DeepSeek-R1 rows, and label every TRT-LLM layout tp8 without
attention DP; the "DeepSeek-V3" rows are aiconfigurator's relabelled copies of the same runs (InferenceX serves
DeepSeek-R1-0528 only), whose worker counts agree with these recipes.

TRT-LLM (every recipe TP8 + EP8 on both sides, CUTLASS MoE, fp8 KV, chunked prefill off; limits per attention-DP
rank): 1k prefill DEP8 (attention DP 8) with max_batch_size 8, max_num_tokens 8192, KV 0.6; 8k prefill TEP8 with
2 / 16640, KV 0.85; decode TEP8 or DEP8 with the recipe's max batch, KV 0.9 (1k TEP and STP DEP) or 0.85.
SGLang (attention flashinfer, KV dtype unset: "auto"): prefill TP8 (DEP8 in bs256-1p6d-dep), decode TP8 or DEP8;
MTP recipes run EAGLE on decode with 2 steps (2 draft tokens). A DEP decode's max-running-requests is split over
its 8 DP ranks (as recipes.py reads SGLang 0.5.8 for H100).

Where two or more recipes ran at one concurrency, a row that records its worker counts (the "DeepSeek-V3" copies)
keeps the recipes with those counts; otherwise the rows do not say which ran: the row replays the first listed
below (plain before MTP, then the search space's order), and its setup note says so.
"""
from __future__ import annotations

import dataclasses

TEP8, DEP8 = "tp=8,ep=8", "dp=8,tp=1,ep=8"
TP8 = "tp=8"


@dataclasses.dataclass(frozen=True)
class H200Recipe:
    """One recipe: pools and per-engine limits (per attention-DP rank where the pool runs DP)."""

    name: str
    prefill_workers: int
    prefill_layout: str
    prefill_max_seqs: int
    prefill_max_tokens: int
    prefill_kv: float
    decode_workers: int
    decode_layout: str
    decode_max_seqs: int
    decode_kv: float
    mtp: int = 0  # draft tokens per decode step (0: none)

    def policy_args(self) -> tuple:
        args = (("prefill", f"{self.prefill_workers}x({self.prefill_layout})"),
                ("decode", f"{self.decode_workers}x({self.decode_layout})"),
                ("prefill_max_seqs", str(self.prefill_max_seqs)), ("prefill_max_tokens", str(self.prefill_max_tokens)),
                ("decode_max_seqs", str(self.decode_max_seqs)), ("prefill_memory_fraction", str(self.prefill_kv)),
                ("decode_memory_fraction", str(self.decode_kv)))
        return args + ((("decode_mtp", str(self.mtp)),) if self.mtp else ())


def _trt(isl: int, name: str, ctx: int, gen: int, dep: bool, batch: int, mtp: int) -> H200Recipe:
    pre = (DEP8, 8, 8192, 0.6) if isl == 1024 else (TEP8, 2, 16640, 0.85)
    gen_kv = 0.9 if isl == 1024 and (mtp == 0 or not dep) else 0.85  # 1k STP and 1k TEP decode: 0.9
    return H200Recipe(name, ctx, pre[0], pre[1], pre[2], pre[3], gen, DEP8 if dep else TEP8, batch, gen_kv, mtp)


# (isl, concurrency) -> recipes (plain first). (ctx workers, gen workers, DEP decode, decode max batch, MTP)
TRTLLM_H200: dict = {}
for _isl, _rows in (
    (1024, [(11, "stp/c1_ctx1_gen9_tep8_batch1", 1, 9, False, 1, 0),
            (36, "stp/c4_ctx1_gen9_tep8_batch256", 1, 9, False, 256, 0),
            (72, "stp/c8_ctx1_gen9_tep8_batch256", 1, 9, False, 256, 0),
            (144, "stp/c16_ctx1_gen9_tep8_batch256", 1, 9, False, 256, 0),
            (288, "stp/c32_ctx1_gen9_tep8_batch256", 1, 9, False, 256, 0),
            (576, "stp/c64_ctx1_gen9_tep8_batch256", 1, 9, False, 256, 0),
            (1152, "stp/c128_ctx1_gen9_dep8_batch512", 1, 9, True, 512, 0),
            (1536, "stp/c256_ctx1_gen6_dep8_batch512", 1, 6, True, 512, 0),
            (3584, "stp/c512_ctx2_gen7_dep8_batch512", 2, 7, True, 512, 0),
            (13, "mtp/c1_ctx1_gen11_tep8_batch1_mtp3", 1, 11, False, 1, 3),
            (44, "mtp/c4_ctx1_gen11_tep8_batch128_mtp3", 1, 11, False, 128, 3),
            (88, "mtp/c8_ctx1_gen11_tep8_batch128_mtp3", 1, 11, False, 128, 3),
            (144, "mtp/c16_ctx1_gen9_tep8_batch128_mtp3", 1, 9, False, 128, 3),
            (352, "mtp/c32_ctx1_gen11_tep8_batch128_mtp3", 1, 11, False, 128, 3),
            (512, "mtp/c64_ctx1_gen8_dep8_batch128_mtp3", 1, 8, True, 128, 3),
            (896, "mtp/c128_ctx1_gen7_dep8_batch128_mtp3", 1, 7, True, 128, 3),
            (1024, "mtp/c256_ctx1_gen4_dep8_batch128_mtp3", 1, 4, True, 128, 3),
            (1024, "mtp/c512_ctx1_gen2_dep8_batch256_mtp1", 1, 2, True, 256, 1)]),
    (8192, [(9, "stp/c1_ctx1_gen7_tep8_batch1", 1, 7, False, 1, 0),
            (28, "stp/c4_ctx1_gen7_tep8_batch32", 1, 7, False, 32, 0),
            (48, "stp/c8_ctx1_gen6_tep8_batch16", 1, 6, False, 16, 0),
            (48, "stp/c16_ctx1_gen3_tep8_batch32", 1, 3, False, 32, 0),
            (160, "stp/c32_ctx2_gen5_tep8_batch128", 2, 5, False, 128, 0),
            (192, "stp/c64_ctx2_gen3_dep8_batch128", 2, 3, True, 128, 0),
            (128, "stp/c128_ctx1_gen1_dep8_batch256", 1, 1, True, 256, 0),
            (768, "stp/c256_ctx5_gen3_dep8_batch256", 5, 3, True, 256, 0),
            (512, "stp/c512_ctx3_gen1_dep8_batch512", 3, 1, True, 512, 0),
            (9, "mtp/c1_ctx1_gen7_tep8_batch1_mtp3", 1, 7, False, 1, 3),
            (28, "mtp/c4_ctx1_gen7_tep8_batch32_mtp3", 1, 7, False, 32, 3),
            (48, "mtp/c8_ctx1_gen6_tep8_batch32_mtp3", 1, 6, False, 32, 3),
            (48, "mtp/c16_ctx1_gen3_tep8_batch32_mtp2", 1, 3, False, 32, 2),
            (160, "mtp/c32_ctx3_gen5_tep8_batch32_mtp3", 3, 5, False, 32, 3),
            (64, "mtp/c64_ctx1_gen1_dep8_batch32_mtp2", 1, 1, True, 32, 2),
            (128, "mtp/c128_ctx2_gen1_dep8_batch32_mtp2", 2, 1, True, 32, 2),
            (256, "mtp/c256_ctx3_gen1_dep8_batch32_mtp2", 3, 1, True, 32, 2),
            (512, "mtp/c512_ctx3_gen1_dep8_batch64_mtp1", 3, 1, True, 64, 1)]),
):
    for _c, _name, _ctx, _gen, _dep, _b, _mtp in _rows:
        TRTLLM_H200.setdefault((_isl, _c), []).append(_trt(_isl, f"{_isl // 1024}k1k/{_name}", _ctx, _gen, _dep, _b,
                                                             _mtp))


def _sgl(name: str, pw: int, pdep: bool, pmrr: int, chunk: int, pmem: float, dw: int, ddep: bool, dmrr: int,
         dmem: float, mtp: bool) -> H200Recipe:
    # a DEP pool's max-running-requests is the server's: each of its 8 DP ranks gets an eighth
    return H200Recipe(name, pw, DEP8 if pdep else TP8, max(pmrr // 8, 1) if pdep else pmrr, chunk, pmem, dw,
                      DEP8 if ddep else TP8, max(dmrr // 8, 1) if ddep else dmrr, dmem, 2 if mtp else 0)


# SGLang recipes (recipes/h200/<isl>/<name>.yaml @ 5063eb43): concurrencies, then the recipe; listed plain first, in
# the search space's order (nvidia-master.yaml:5073-5301 @ fcc04aaa2)
SGLANG_H200 = (
    (1024, (1, 4, 8, 16, 32, 64, 128, 256), _sgl("1k1k/low-latency-1p9d", 1, False, 256, 163840, 0.82, 9, False, 256, 0.82, False)),
    (1024, (512, 1024, 2048), _sgl("1k1k/bs256-1p6d-tp", 1, False, 512, 163840, 0.7, 6, False, 512, 0.82, False)),
    (1024, (128, 256, 512, 1024, 2048), _sgl("1k1k/bs256-1p6d-dep", 1, True, 512, 262144, 0.75, 6, True, 512, 0.82, False)),
    (1024, (1, 4, 8, 16, 32, 64, 128, 256), _sgl("1k1k/low-latency-1p9d-mtp", 1, False, 256, 163840, 0.82, 9, False, 64, 0.75, True)),
    (1024, (512, 1024, 2048), _sgl("1k1k/bs256-1p6d-tp-mtp", 1, False, 512, 163840, 0.7, 6, False, 128, 0.75, True)),
    (1024, (128, 256, 512, 1024, 2048), _sgl("1k1k/bs256-1p6d-dep-mtp", 1, True, 64, 65536, 0.82, 6, True, 128, 0.75, True)),
    (8192, (1, 4, 8), _sgl("8k1k/bs4-1p7d", 1, False, 16, 32768, 0.82, 7, False, 8, 0.82, False)),
    (8192, (4, 8, 16), _sgl("8k1k/bs8-1p6d", 1, False, 16, 32768, 0.82, 6, False, 16, 0.82, False)),
    (8192, (8, 16, 32), _sgl("8k1k/bs16-1p3d", 1, False, 16, 32768, 0.82, 3, False, 32, 0.82, False)),
    (8192, (32, 64, 128), _sgl("8k1k/bs64-2p3d", 2, False, 16, 32768, 0.82, 3, False, 128, 0.82, False)),
    (8192, (64, 128, 256), _sgl("8k1k/bs128-1p1d-dep", 1, False, 16, 163840, 0.75, 1, True, 256, 0.88, False)),
    (8192, (1, 4, 8), _sgl("8k1k/bs4-1p7d-mtp", 1, False, 16, 32768, 0.82, 7, False, 2, 0.75, True)),
    (8192, (2, 4, 8, 16, 32), _sgl("8k1k/bs8-1p6d-mtp", 1, False, 16, 32768, 0.82, 6, False, 16, 0.82, True)),
    (8192, (4, 8, 16, 32, 64), _sgl("8k1k/bs16-1p3d-mtp", 1, False, 16, 32768, 0.82, 3, False, 32, 0.82, True)),
    (8192, (32, 64, 128), _sgl("8k1k/bs64-2p3d-mtp", 2, False, 16, 32768, 0.82, 3, False, 16, 0.75, True)),
    (8192, (32, 64, 128, 256, 512), _sgl("8k1k/bs128-1p1d-dep-mtp", 1, False, 16, 163840, 0.75, 1, True, 192, 0.85, True)),
)


def h200_recipes(backend: str, version: str, date: str, isl: int, osl: int, concurrency: int) -> list:
    """The recipes InferenceX ran at an H200 DeepSeek disagg row's concurrency (plain first), [] for other rows."""
    if osl != 1024:
        return []
    if backend == "trtllm" and version == "0.8.1.post1" and "2026-02-14" <= date <= "2026-03-23":
        return list(TRTLLM_H200.get((isl, concurrency), ()))
    if backend == "sglang" and version == "0.5.8.post1" and date == "2026-02-07":
        return [r for i, concs, r in SGLANG_H200 if i == isl and concurrency in concs]
    return []
