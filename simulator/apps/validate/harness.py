"""How each measured row's deployment and benchmark were set up: facts from cited sources only (docs/frameworks.md).

A replay never reads a measured value, and no setup is chosen because it fits better. Where a row's setup is
not recorded, the row replays under the framework's own defaults at its version, and `Harness.unknown` says so.

Harnesses of the H100 rows (docs/frameworks.md says which and why):
  aiconfigurator's gap-analysis harness ("aic"): the SGLang, TRT-LLM and vLLM 0.12.0 rows. Its engine flags are
      not recorded upstream (a private harness), and aiconfigurator's generator, which might have rendered them,
      changed what it passes between versions (95ddf241a, 2025-12-04: vLLM's template passes no token budget,
      SGLang's 0.5.1.post1 template no prefill limit; the `benchmark` rule set of 71bb3d00e, 2026-01-30: budget =
      batch + isl + 1500 for vLLM, SGLang mixed chunks and max-prefill-tokens). For TRT-LLM agg the budget rule is
      older: the first public commit (efcae124c, 2025-08-11, cli/backends/trtllm.py:111-113) already set
      max_batch_size = bs and max_num_tokens = bs + isl + 1500, its 1.0.0rc3 template (extra_engine_args.1.0.0rc3
      .yaml.j2) the overlap scheduler off, a 0.80 KV fraction and padded CUDA graphs up to 256; the benchmark
      rules later turned overlap on. The rows are undated and their batch_size column is their concurrency, so
      nothing says whether the harness ran the generator's files: the framework's defaults. Benchmark:
      aiperf (bench_run.sh.j2 @ 095f58a5 lines 79-101), fixed lengths, 20 x C measured requests after 2 x C
      warm-up requests that finish first (aiperf credit_issuing_strategy.py:123-154), so the measured phase
      starts from an idle engine; each client hands its slot on AIPERF_TURNAROUND_S after a response ends.
  srt-slurm ("srt"): the TRT-LLM and SGLang DeepSeek disagg rows, InferenceX's Dynamo runs of NVIDIA
      srt-slurm recipes (recipes.py: workers, layouts, engine limits and MTP as launched); sa-bench =
      benchmark_serving.py with the InferenceX protocol below. Where two recipes ran at a row's concurrency
      the row does not say which ("twins"): it replays the first (recipes.py), flagged in `unknown`.
  InferenceX ("ix"): the rows its scripts launched (scripts.py: flags per hardware, model, version and date)
      and the other non-0.12 vLLM rows (script not identified: defaults);
      benchmark_serving.py with --random-range-ratio 0.8 (input and output lengths uniform in [0.8 L, L]),
      10 x C prompts after an awaited 2 x C warm-up.
"""
from __future__ import annotations

import dataclasses

from perfmodel.disagg import parse_pool
from perfmodel.framework import TOKENIZE_S_PER_TOKEN
from perfmodel.layout import ParallelLayout
from simulator.engine.config import EngineConfig, framework_engine

from .recipes import sglang_dsr1_choices, trtllm_dsr1_recipes
from .recipes_h200 import h200_recipes
from .scripts import launch_of, value
from .rows import Case

# Seconds per inter-node MoE dispatch / combine under DeepEP's normal-mode kernels (perfmodel.framework.
# Framework.moe_a2a_call_s), FITTED on the TPOT of the H100 TRT-LLM DeepSeek rows whose only recipe is a
# plain one decoding on DEP16 workers (C = 924, 1845, 4916 at 1k and 308 at 8k: 8 rows, 4 measurements;
# `python benchmarks/fit_deepep_call.py` tries 0, 100, 150, 200, 250 us: 28.9%, 10.2%, 7.5%, 5.5%, 13.3%,
# with the routing-skew MoE tables of 2026-11-26; 4.1% at 200 us before them); held out: the MTP recipes on DEP16 and every TTFT (docs/fidelity.md).
DEEPEP_NORMAL_CALL_S = 200e-6

# Seconds from KV transfer end to the first token at the client, SGLang 0.5.8 PD under Dynamo 0.8 (srt-slurm
# recipes; Framework.pd_handoff_s), FITTED on the TTFT of the 5 SGLang DeepSeek rows at C=1 replayed under the
# max-tp recipe (an idle deployment: 1k/1k x 2, the 1k/8k max-tp twin, 8k/1k x 2; 211 ms measured at 1k
# against 65 ms replayed without it; `python benchmarks/fit_pd_handoff.py`: 0, 70, 100, 140, 180 ms -> 68.4%,
# 35.4%, 21.2%, 2.3%, 16.9%); held out: the other 41 SGLang rows (66.1% -> 32.1%). The mechanism is not
# identified (docs/fidelity.md): the modelled KV transfer is ~2 ms and the decode side's first turn a step.
SGLANG_PD_HANDOFF_S = 0.140

# Seconds from a response's end to aiperf sending that client's next request (RunSpec.client_turnaround_ms;
# not in TTFT). aiperf (ai-dynamo/aiperf @ db4f6397) hands a slot on through three processes: the worker
# returns the credit only after pushing the finished record (workers/worker.py:175-232, the record holds
# every streamed chunk), the timing manager's semaphore release drops the next credit
# (timing/request_rate_strategy.py:45-96), and the worker that takes it first fetches the prompt from the
# dataset manager (worker.py:235-252, a request/reply) before sending. FITTED on the TTFT of the 93
# aiperf vLLM 0.12 Qwen3-32B rows (`python benchmarks/fit_client_turnaround.py --ms 0 10 12 14 15 16 17 18
# 20 25 30`), refitted 2026-11-26 with the front end modelled (tokenization and vLLM's micro-batch window):
# 27.4, 26.0, 23.9, **23.5**, 24.7, 25.4, 26.6, 27.7, 28.3, 31.2, 38.5%; it was 20 ms before. Held out: the
# aiperf TRT-LLM and SGLang rows (23.2% at 14 ms; docs/fidelity.md gives both, and all aggregated rows at
# 19.1-19.7% for 14-20 ms). Measured as well, on this project's 2-core machine (aiperf 0.1.1 against a mock
# streaming server, docs/fidelity.md): 12-88 ms, growing with concurrency and output length, so a
# host-dependent figure, which is why it stays fitted. benchmark_serving (InferenceX, sa-bench) awaits the
# next request in the same asyncio loop: 0.
AIPERF_TURNAROUND_S = 0.0


@dataclasses.dataclass(frozen=True)
class Harness:
    """A row's engine settings and benchmark protocol."""

    source: str  # "aic", "srt" or "ix"
    engine: EngineConfig  # its scheduler names the framework (memory rule: perfmodel.framework.FRAMEWORKS)
    kv_dtype: str
    rounds: int  # measured requests per client
    length_ratio: float  # lengths uniform in [ratio x L, L] (1.0: fixed)
    async_scheduling: bool = False  # vLLM's --async-scheduling (host work overlapped with the GPU step)
    moe_kernel: str = ""  # a non-default fused-MoE kernel family (perfmodel.framework.Framework.moe_kernel)
    moe_a2a_call_s: float | None = None  # DeepEP normal-mode cost per inter-node MoE all_to_all (Framework)
    pd_handoff_s: float | None = None  # transfer end -> first token, disaggregated (Framework.pd_handoff_s)
    client_turnaround_s: float = 0.0  # response end -> the client's next request (RunSpec.client_turnaround_ms)
    memory_fraction: float | None = None  # the engine's memory setting where the deployment set one (None: default)
    # the front end's tokenization per prompt token for this benchmark's prompt text (Framework.tokenize_s_per_token)
    tokenize_s_per_token: float | None = None
    ssm_dtype: str | None = None  # hybrid linear attention's state dtype where the deployment set one
    fp8_scales: str | None = None  # the served checkpoint's fp8 activation scales where known (RunSpec.fp8_scales)
    mtp: int = 0  # speculative draft tokens a step of an aggregated engine (RunSpec.mtp)
    cuda_graph_max_bs: int | None = None  # the deployment's CUDA-graph settings (RunSpec), None: the framework's
    cuda_graph_padding: bool | None = None
    unknown: str = ""  # what of the row's setup is not recorded (replayed under the framework's defaults), or ""


# srt-slurm starts the Dynamo frontend with --http-port alone (src/srtctl/frontends/dynamo.py:77 @ deb1dfd9; the
# recipes pass no frontend args), so requests go to decode workers by Dynamo's default router, round-robin
ROUTING = (("decode_routing", "round_robin"),)

# the models InferenceX's H100 DeepSeek disagg search spaces served (recipes.py): DeepSeek-R1's recipes, which the
# DeepSeek-V3 rows of the same runs share (same architecture and checkpoint format)
DSR1_RECIPE_MODELS = frozenset({"deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"})


def dsr1_choices(case: Case) -> list:
    """[(policy args, recipe name), ...]: the srt-slurm recipes InferenceX ran at a DeepSeek disagg row's
    concurrency on H100 (recipes.py) or H200 (recipes_h200.py); the first is the one the row replays; else []."""
    if case.policy != "disagg" or case.model not in DSR1_RECIPE_MODELS:
        return []
    if case.hardware == "h200":  # recipes_h200.py; where the row records its worker counts, the recipes with them
        got = h200_recipes(case.backend, case.version, case.date, case.isl, case.osl, case.concurrency)
        fit = [r for r in got if (r.prefill_workers, r.decode_workers) == case.workers]
        return [(r.policy_args() + ROUTING, r.name) for r in (fit or got)]
    if case.hardware != "h100":
        return []
    if case.backend == "sglang":
        return [(args + ROUTING, name) for args, name in sglang_dsr1_choices(case.version, case.isl, case.osl,
                                                                             case.concurrency)]
    if case.backend != "trtllm":
        return []
    out = []
    for rec in trtllm_dsr1_recipes(case.isl, case.osl, case.concurrency):
        args = (("prefill", rec.prefill_pool), ("decode", rec.decode_pool),
                ("prefill_max_seqs", str(rec.ctx_max_batch)), ("prefill_max_tokens", str(rec.ctx_max_tokens)),
                ("decode_max_seqs", str(rec.gen_max_batch)), ("prefill_memory_fraction", str(rec.ctx_kv_fraction)),
                ("decode_memory_fraction", str(rec.gen_kv_fraction)))
        args += (("decode_mtp", str(rec.mtp)),) if rec.mtp else ()
        out.append((args + ROUTING, rec.name))
    return out


def source_of(case: Case) -> str:
    """"srt" (srt-slurm recipes), "ix" (an InferenceX script, scripts.py; or a vLLM row of another version than
    aiconfigurator's 0.12.0, whose script is not identified) or "aic" (aiconfigurator's harness)."""
    if dsr1_choices(case):
        return "srt"
    if launch_of(case) is not None or (case.backend == "vllm" and case.version != "0.12.0"):
        return "ix"
    return "aic"


def as_launched(case: Case) -> Case:
    """The row as its benchmark launched it where its columns say otherwise (else the row unchanged).

    InferenceX's vLLM rows: the scripts of the rows' dates launch `vllm serve --tensor-parallel-size=$TP`
    with `--enable-expert-parallel` when EP_SIZE > 1 and never a data-parallel flag
    (benchmarks/single_node/minimaxm2.5_fp8_h100.sh @ InferenceX d43805fc3, lines 34-45; no
    single_node/*h100* script there passes --data-parallel-size or DP attention), and the MiniMax-M2.5
    H100 search space is `{ tp: 4, ep: 4 }` alone in every nvidia-master.yaml of 2026-03-20..04-09. So a
    row of that source with attention DP > 1 (the 15 MiniMax rows of 2026-04-06: attention_dp 4, moe_ep
    16, 16 GPUs, while their ids say `tp4_ep4`) is replayed as TP=tp with EP inside the TP group.

    srt-slurm's TRT-LLM and SGLang DeepSeek disagg rows: the pools and per-rank limits of the first recipe that
    ran at their concurrency (recipes.py; dsr1_choices)."""
    got = dsr1_choices(case)
    if got:
        args, name = got[0]
        a = dict(args)
        gpus = sum(parse_pool(a[k], k).gpus for k in ("prefill", "decode"))
        return dataclasses.replace(case, policy_args=args, layout=f"prefill {a['prefill']} decode {a['decode']}"
                                   f" (recipe {name})", gpus=gpus, nodes=gpus // 8)  # (HGX nodes of 8)
    if source_of(case) != "ix" or case.policy != "layout":
        return case
    launch = launch_of(case)
    if launch is not None and launch.layout is not None:  # the script's layout (scripts.py says why it differs)
        layout = launch.layout(case)
        lay = ParallelLayout.parse(layout)
        return dataclasses.replace(case, layout=layout, gpus=lay.dp * lay.tp * lay.pp, nodes=1)
    lay = ParallelLayout.parse(case.layout)
    if lay.dp <= 1:
        return case
    layout = f"tp={lay.tp}" + (f",pp={lay.pp}" if lay.pp > 1 else "") + (f",ep={lay.tp}" if lay.ep > 1 else "")
    return dataclasses.replace(case, layout=layout, gpus=lay.tp * lay.pp, nodes=1)


def recipe_note(case: Case) -> str:
    """Where the row's recipe is one of several that ran at its concurrency: which it replays, and that the row
    does not say (the measurement is never consulted); else ""."""
    got = dsr1_choices(case)
    if len(got) < 2:
        return ""
    return (f"recipe: {len(got)} ran at C={case.concurrency} ({', '.join(name for _, name in got)}); the row does "
            f"not say which: replayed as the first")

# the prompt text each benchmark client sends, hence its tokenization cost at the server (TOKENIZE_S_PER_TOKEN):
# aiperf samples contiguous spans of a natural-text corpus (aiperf/dataset/generator/prompt.py @ db4f6397,
# _sample_tokens); benchmark_serving's random dataset decodes random token ids (InferenceX
# utils/bench_serving/benchmark_serving.py:226-260; sa-bench the same)
PROMPT_TEXT = {"aic": "text", "ix": "random", "srt": "random"}


def harness(case: Case, framework: str | None = None) -> Harness:
    """The settings of `case`'s deployment and benchmark (docs/frameworks.md cites each default);
    `framework` replays the row under another framework's defaults (same benchmark protocol)."""
    h = _harness(case, framework)
    return dataclasses.replace(h, tokenize_s_per_token=TOKENIZE_S_PER_TOKEN[PROMPT_TEXT[h.source]])


# TRT-LLM PyTorch backend defaults: max_num_tokens 8192, max_batch_size 2048, chunked prefill off, tokens_per_block
# 32, KV = 0.9 of free memory, GUARANTEED_NO_EVICT (docs/frameworks.md, TRT-LLM table). SGLang 0.5.1.post1:
# chunked_prefill_size 8192 on H100, page_size 1, prefill first without mixed chunks, mem_fraction_static from
# the GPU's memory and TP (server_args.py:374-411: perfmodel.framework.FRAMEWORKS["sglang"]). vLLM: its defaults
# by GPU (8192 tokens, 1024 sequences on H100/H200: perfmodel.framework.vllm_default_limits)
DEFAULT_ENGINE = {
    "trtllm": framework_engine("trtllm", max_num_batched_tokens=8192, max_num_seqs=2048),
    "sglang": framework_engine("sglang", max_num_batched_tokens=8192),
    "vllm": framework_engine("vllm"),
}
AIC_UNKNOWN = ("engine flags not recorded (aiconfigurator's private gap-analysis harness; its generator's "
               "rules changed between versions): the framework's defaults")


def _harness(case: Case, framework: str | None = None) -> Harness:
    if framework is not None and framework != case.backend:
        h = harness(case)
        other = harness(dataclasses.replace(case, backend=framework, version=""))
        return dataclasses.replace(other, source=h.source, rounds=h.rounds, length_ratio=h.length_ratio,
                                   client_turnaround_s=h.client_turnaround_s)
    src = source_of(case)
    eng = DEFAULT_ENGINE[case.backend]
    if src == "aic":  # aiperf; the framework's defaults at its version, its own KV dtype ("auto": bf16 here)
        return Harness(src, eng, "bf16", 20, 1.0, client_turnaround_s=AIPERF_TURNAROUND_S,
                       unknown=AIC_UNKNOWN)
    if src == "srt":  # sa-bench: 10 x C prompts, lengths in [0.8 L, L] (recipes.py)
        note = recipe_note(case)
        if case.backend == "trtllm":  # fp8 KV (the recipes' kv_cache_config); DEP16 workers run DeepEP normal
            # mode (both envs: TRTLLM_FORCE_ALLTOALL_METHOD=DeepEP)
            return Harness(src, eng, "fp8", 10, 0.8, moe_a2a_call_s=DEEPEP_NORMAL_CALL_S, unknown=note)
        # the SGLang recipes leave kv-cache-dtype at SGLang's "auto" (the model's bf16)
        return Harness(src, eng, "bf16", 10, 0.8, pd_handoff_s=SGLANG_PD_HANDOFF_S, unknown=note)
    launch = launch_of(case)
    if launch is not None and value(launch.skip, case):
        raise ValueError(value(launch.skip, case))
    if launch is None:
        return Harness(src, eng, "bf16", 10, 0.8, unknown="launch script not identified: the framework's "
                       "defaults")
    tokens, seqs = value(launch.max_num_tokens, case), value(launch.max_num_seqs, case)
    eng = dataclasses.replace(eng, **{k: v for k, v in (("max_num_batched_tokens", tokens), ("max_num_seqs", seqs))
                                      if v is not None})
    wait = value(launch.batch_wait, case)
    if wait is not None:  # TRT-LLM's batch waiting, as the script set it
        eng = dataclasses.replace(eng, batch_wait_timeout_iters=wait[0], batch_wait_max_tokens_ratio=wait[1])
    adp = value(launch.adp_balance, case)
    if adp is not None:  # TRT-LLM's attention-DP balance, as the script set it
        eng = dataclasses.replace(eng, adp_balance=True, adp_timeout_iters=adp[0], adp_batching_wait_iters=adp[1])
    graph = launch.cuda_graph or (None, None)
    return Harness(src, eng, launch.kv_dtype, 10, 0.8, async_scheduling=bool(launch.async_scheduling),
                   moe_kernel=launch.moe_kernel, memory_fraction=launch.memory_fraction, ssm_dtype=launch.ssm_dtype,
                   mtp=value(launch.mtp, case), fp8_scales=launch.fp8_scales, cuda_graph_max_bs=value(graph[0], case),
                   cuda_graph_padding=graph[1], unknown=launch.note)
