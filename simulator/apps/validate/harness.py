"""How each measured row's deployment and benchmark were set up, from cited sources (docs/frameworks.md).

Two harnesses produced the H100 aggregated rows (docs/frameworks.md says which and why):
  aiconfigurator's gap-analysis harness ("aic"): the SGLang, TRT-LLM and vLLM 0.12.0 rows. Its engine
      flags are not recorded upstream; of the two cited candidates (the framework's own defaults at that
      version, aiconfigurator's generator limits: aic_benchmark_limits) each framework runs the one its rows
      fit: SGLang its defaults, TRT-LLM 1.0.0rc3 and vLLM 0.12 the generator's limits (docs/fidelity.md gives
      both results for each). Benchmark: aiperf (bench_run.sh.j2 @ 095f58a5 lines 79-101), fixed lengths,
      20 x C measured requests after 2 x C warm-up requests that finish first (aiperf
      credit_issuing_strategy.py:123-154), so the measured phase starts from an idle engine; each client
      hands its slot on AIPERF_TURNAROUND_S after a response ends (fitted, below).
  srt-slurm ("srt"): the TRT-LLM and SGLang DeepSeek disagg rows, InferenceX's Dynamo runs of NVIDIA
      srt-slurm recipes (recipes.py: workers, layouts, engine limits and MTP as launched); sa-bench =
      benchmark_serving.py with the InferenceX protocol below.
  InferenceX ("ix"): the other vLLM rows. Flags from its H100 scripts; benchmark_serving.py with
      --random-range-ratio 0.8 (input and output lengths uniform in [0.8 L, L]), 10 x C prompts after
      an awaited 2 x C warm-up.
KV dtype: fp8 with fp8 or 4-bit weights under aiconfigurator (its SDK sets it: helpers.py:658-661);
under InferenceX only where the script asks (Llama-3.1-70B: --kv-cache-dtype fp8).
"""
from __future__ import annotations

import dataclasses

from perfmodel.disagg import parse_pool
from perfmodel.framework import TOKENIZE_S_PER_TOKEN
from perfmodel.layout import ParallelLayout
from simulator.engine.config import EngineConfig

from .recipes import sglang_dsr1_choices, trtllm_dsr1_recipes
from .rows import Case

# what the driver reports for an H100 SXM 80GB (nvidia-smi: 81559 MiB); engines size memory by it,
# not by the datasheet's "80 GB" the hardware preset carries
DRIVER_MIB = {"h100": 81559}

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
AIPERF_TURNAROUND_S = 0.014


@dataclasses.dataclass(frozen=True)
class Harness:
    """A row's engine settings and benchmark protocol."""

    source: str  # "aic" or "ix"
    engine: EngineConfig  # its scheduler names the framework (memory rule: perfmodel.framework.FRAMEWORKS)
    kv_dtype: str
    rounds: int  # measured requests per client
    length_ratio: float  # lengths uniform in [ratio x L, L] (1.0: fixed)
    hbm_gb: float | None
    async_scheduling: bool = False  # vLLM's --async-scheduling (host work overlapped with the GPU step)
    moe_kernel: str = ""  # a non-default fused-MoE kernel family (perfmodel.framework.Framework.moe_kernel)
    cuda_graph_sizes: tuple | None = None  # captured batch sizes other than the framework's (None: its own)
    moe_a2a_call_s: float | None = None  # DeepEP normal-mode cost per inter-node MoE all_to_all (Framework)
    pd_handoff_s: float | None = None  # transfer end -> first token, disaggregated (Framework.pd_handoff_s)
    client_turnaround_s: float = 0.0  # response end -> the client's next request (RunSpec.client_turnaround_ms)
    memory_fraction: float | None = None  # the engine's memory setting where the deployment set one (None: default)
    # the front end's tokenization per prompt token for this benchmark's prompt text (Framework.tokenize_s_per_token)
    tokenize_s_per_token: float | None = None


# srt-slurm starts the Dynamo frontend with --http-port alone (src/srtctl/frontends/dynamo.py:77 @ deb1dfd9; the
# recipes pass no frontend args), so requests go to decode workers by Dynamo's default router, round-robin
ROUTING = (("decode_routing", "round_robin"),)


def dsr1_choices(case: Case) -> list:
    """[(policy args, recipe name), ...]: the srt-slurm recipes InferenceX ran at a DeepSeek disagg row's
    concurrency on H100 (recipes.py; the first is the one a lone measurement replays), else []."""
    if case.policy != "disagg" or case.hardware != "h100" or "deepseek" not in case.model.lower():
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
    if dsr1_choices(case):
        return "srt"
    if case.backend in ("sglang", "trtllm") or case.version == "0.12.0":
        return "aic"
    return "ix"


def as_launched(case: Case, choice: int = 0) -> Case:
    """The row as its benchmark launched it where its columns say otherwise (else the row unchanged).

    InferenceX's vLLM rows: the scripts of the rows' dates launch `vllm serve --tensor-parallel-size=$TP`
    with `--enable-expert-parallel` when EP_SIZE > 1 and never a data-parallel flag
    (benchmarks/single_node/minimaxm2.5_fp8_h100.sh @ InferenceX d43805fc3, lines 34-45; no
    single_node/*h100* script there passes --data-parallel-size or DP attention), and the MiniMax-M2.5
    H100 search space is `{ tp: 4, ep: 4 }` alone in every nvidia-master.yaml of 2026-03-20..04-09. So a
    row of that source with attention DP > 1 (the 15 MiniMax rows of 2026-04-06: attention_dp 4, moe_ep
    16, 16 GPUs, while their ids say `tp4_ep4` and their measurements repeat the TP4/EP4 rows' within
    1-3%) is replayed as TP=tp with EP inside the TP group.

    srt-slurm's TRT-LLM DeepSeek disagg rows: the pools and per-rank limits of the recipe their concurrency
    ran, and the SGLang DeepSeek disagg rows the same way (recipes.py); `choice` picks among the recipes that
    ran at that concurrency (dsr1_choices; twins.py gives twin rows their labels back)."""
    got = dsr1_choices(case)
    if got:
        args, name = got[choice]
        a = dict(args)
        gpus = sum(parse_pool(a[k], k).gpus for k in ("prefill", "decode"))
        return dataclasses.replace(case, policy_args=args, layout=f"prefill {a['prefill']} decode {a['decode']}"
                                   f" (recipe {name})", gpus=gpus, nodes=gpus // 8)  # (HGX nodes of 8)
    if source_of(case) != "ix" or case.policy != "layout":
        return case
    lay = ParallelLayout.parse(case.layout)
    if lay.dp <= 1:
        return case
    layout = f"tp={lay.tp}" + (f",pp={lay.pp}" if lay.pp > 1 else "") + (f",ep={lay.tp}" if lay.ep > 1 else "")
    return dataclasses.replace(case, layout=layout, gpus=lay.tp * lay.pp, nodes=1)


AIC_TRTLLM_KV_FRACTION = 0.80  # aiconfigurator's TRT-LLM 1.0.0rc3 template: free_gpu_memory_fraction default(0.80)


def aic_benchmark_limits(case: Case, tokens_per_block: int = 0) -> dict:
    """aiconfigurator's generator limits for an aggregated engine: max batch = the row's batch, token budget =
    batch + isl + 1500. The generator's default rules from their first version (rule_plugin/trtllm.rule and
    vllm.rule @ 95ddf241a, 2025-12-04: `agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500`) until the
    `benchmark` rule set took them over on 2026-01-30 (71bb3d00e; rule_plugin/benchmark/<backend>.rule @
    095f58a5, where TRT-LLM rounds the budget up to whole KV blocks, trtllm.rule:15, and vLLM leaves it,
    vllm.rule:15). At most one or two prompts fit a step, which keeps the closed loop from moving in lock-step
    waves."""
    bs = max(case.batch_size, 1)
    budget = bs + case.isl + 1500
    if tokens_per_block:
        budget = -(-budget // tokens_per_block) * tokens_per_block
    return {"max_num_batched_tokens": budget, "max_num_seqs": bs}


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


def _harness(case: Case, framework: str | None = None) -> Harness:
    if framework is not None and framework != case.backend:
        h = harness(case)
        other = harness(dataclasses.replace(case, backend=framework, version=""))
        return dataclasses.replace(other, source=h.source, rounds=h.rounds, length_ratio=h.length_ratio,
                                   client_turnaround_s=h.client_turnaround_s)
    src = source_of(case)
    mib = DRIVER_MIB.get(case.hardware)
    hbm_gb = mib * 2**20 / 1e9 if mib else None
    kv_aic = "fp8" if case.weights != "bf16" else "bf16"
    if case.backend == "trtllm":
        # TRT-LLM PyTorch backend defaults: max_num_tokens 8192, max_batch_size 2048, chunked prefill off,
        # tokens_per_block 32, KV = 0.9 of free memory, GUARANTEED_NO_EVICT (docs/frameworks.md, TRT-LLM table)
        eng = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=2048, enable_chunked_prefill=False,
                           block_size=32, scheduler="trtllm", enable_prefix_caching=False)
        kv_fraction = None
        if case.version == "1.0.0rc3":  # the gap-analysis rows: aiconfigurator's generator rules, as vLLM 0.12
            # (aic_benchmark_limits) and its 1.0.0rc3 engine template: limits under build_config (which the PyTorch
            # backend copies to the runtime: llm_args.py set_runtime_knobs_from_build_config, backend == "pytorch"),
            # kv_cache_config.free_gpu_memory_fraction `default(0.80)` (extra_engine_args.1.0.0rc3.yaml.j2:30-31)
            eng = dataclasses.replace(eng, **aic_benchmark_limits(case, tokens_per_block=32))
            kv_fraction = AIC_TRTLLM_KV_FRACTION
        if src == "srt":  # sa-bench: 10 x C prompts, lengths in [0.8 L, L]; fp8 KV (the recipes' kv_cache_config);
            # DEP16 workers run DeepEP normal mode (both envs: TRTLLM_FORCE_ALLTOALL_METHOD=DeepEP)
            return Harness(src, eng, "fp8", 10, 0.8, hbm_gb, moe_a2a_call_s=DEEPEP_NORMAL_CALL_S)
        return Harness(src, eng, kv_aic, 20, 1.0, hbm_gb, client_turnaround_s=AIPERF_TURNAROUND_S,
                       memory_fraction=kv_fraction)
    if case.backend == "sglang":
        # SGLang 0.5.1.post1 defaults: chunked_prefill_size 8192 on H100, page_size 1, prefill first without
        # mixed chunks, mem_fraction_static = (total - (9.5 + tp/2) GiB) / total of weights + KV
        # (server_args.py:374-411: perfmodel.framework.FRAMEWORKS["sglang"])
        eng = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=max(case.batch_size, 1), block_size=1,
                           scheduler="sglang", schedule_order="prefill-first")
        if src == "srt":  # sa-bench; the recipes leave kv-cache-dtype at SGLang's "auto" (the model's bf16)
            return Harness(src, eng, "bf16", 10, 0.8, hbm_gb, pd_handoff_s=SGLANG_PD_HANDOFF_S)
        return Harness(src, eng, kv_aic, 20, 1.0, hbm_gb, client_turnaround_s=AIPERF_TURNAROUND_S)
    if src == "aic":
        # vLLM 0.12.0 under aiconfigurator's benchmark rule set (rule_plugin/benchmark/vllm.rule @ 095f58a5:
        # agg max_num_tokens = max_batch_size + isl + 1500, max_batch_size = the benchmark's batch): at most
        # ~2 prompts per step, which keeps the closed loop from moving in lock-step waves. vLLM's own defaults
        # (8192 tokens, 1024 seqs: arg_utils.py:1827-1835) fit these rows worse: docs/fidelity.md, ledger.
        # the same rule captures a CUDA graph for every batch size 1..max_batch_size (cuda_graph_batch_sizes =
        # range(1, max_batch_size + 1)): no decode step is padded
        bs = max(case.batch_size, 1)
        eng = EngineConfig(**aic_benchmark_limits(case))
        return Harness(src, eng, kv_aic, 20, 1.0, hbm_gb, cuda_graph_sizes=tuple(range(1, bs + 1)),
                       client_turnaround_s=AIPERF_TURNAROUND_S)
    # InferenceX vLLM: 8192-token budget, --max-num-seqs C (MiniMax 256), fp8 KV only where the script asks
    seqs = 256 if "minimax" in case.model.lower() else case.concurrency
    eng = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=seqs)
    kv = "fp8" if "llama-3.1-70b" in case.model.lower() else "bf16"  # 70b_fp8_h100_docker.sh:15
    # async scheduling: on in the InferenceX scripts of Oct-Dec 2025 and the default of vLLM 0.18 (frameworks.md)
    # gpt-oss: the script exports VLLM_MXFP4_USE_MARLIN=1 (gptoss_fp4_h100.sh @ InferenceX 843c6254, line 35):
    # Marlin W4A16 MoE kernels instead of vLLM's default triton OAI kernel on Hopper
    moe = "marlin" if "gpt-oss" in case.model.lower() else ""
    return Harness(src, eng, kv, 10, 0.8, hbm_gb, async_scheduling=True, moe_kernel=moe)
