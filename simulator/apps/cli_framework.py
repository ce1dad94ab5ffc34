"""`simulate`'s serving-framework flags (the framework, its version, and each setting of perfmodel.framework a
deployment may change), and the RunSpec fields they give. One place: `simulate validate` writes its rows'
commands with these flags (simulator/apps/validate/command.py)."""
from __future__ import annotations

import argparse

from perfmodel.framework import DEFAULT_FRAMEWORK, MOE_KERNELS, SYNC_STEP_OVERHEAD_S
from simulator.engine.config import FRAMEWORK_ENGINE


def add_framework_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--framework", default="vllm", choices=sorted(FRAMEWORK_ENGINE),
                   help="whose scheduler and defaults: vllm (recompute preemption), sglang (new-token-ratio "
                        "admission, retraction, prefill first, page size 1), trtllm (GUARANTEED_NO_EVICT: "
                        "whole-request KV reserved at admission, never preempts; 32-token blocks; no chunked "
                        "context); docs/frameworks.md")
    p.add_argument("--framework-version", help="the framework's version where a default changed between versions "
                   "(vLLM >= 0.14: async scheduling, no exposed host time per step); default: the version the "
                   "constants describe (docs/frameworks.md); one outside the versions it cites runs with the nearest one's "
                   "defaults, with a note")
    p.add_argument("--gpu-memory-utilization", type=float, help="fraction of each GPU's memory the engine may use "
                   f"(weights, activations, KV), as vLLM's flag; default {DEFAULT_FRAMEWORK.gpu_memory_utilization}")
    p.add_argument("--step-overhead-ms", type=float, help="fixed CPU time per engine step that the GPU waits on "
                   f"(scheduling, sampling); default: vLLM's synchronous loop {1e3 * DEFAULT_FRAMEWORK.step_overhead_s:g} "
                   "(fitted: perfmodel/framework.py), 0 where the loop schedules ahead (vLLM's async scheduling, "
                   f"SGLang's and TRT-LLM's overlap schedulers), SGLang and TRT-LLM with overlap off "
                   f"{1e3 * SYNC_STEP_OVERHEAD_S:g}")
    p.add_argument("--tokenize-us-per-token", type=float, help="the serving front end's tokenization time per "
                   "prompt token, before an engine sees a request (one thread, requests in arrival order; counted "
                   f"in TTFT); default {1e6 * DEFAULT_FRAMEWORK.tokenize_s_per_token:g} (measured: "
                   "benchmarks/measure_tokenizer.py); 0: no front end (a request reaches its engine when sent)")
    p.add_argument("--async-scheduling", choices=("on", "off"), help="the engine schedules step n+1 while step n "
                   "runs (vLLM's --async-scheduling; TRT-LLM's and SGLang's overlap schedulers): a request reaching "
                   "a busy engine joins the step after next, and the host's step work is hidden (0 ms step "
                   "overhead). Default: the framework's (on for SGLang, TRT-LLM and vLLM >= 0.14)")
    p.add_argument("--moe-kernel", choices=[k for k in MOE_KERNELS if k], help="a non-default fused-MoE kernel family: marlin = "
                   "vLLM's VLLM_MXFP4_USE_MARLIN=1 (W4A16 Marlin for mxfp4 on Hopper; default: the framework's)")
    p.add_argument("--moe-a2a-call-us", type=float, help="host cost of each MoE dispatch / combine whose EP group "
                   "spans nodes, for DeepEP's normal-mode kernels (default 0; the fitted value: "
                   "simulator/apps/validate/harness.py DEEPEP_NORMAL_CALL_S)")
    p.add_argument("--pd-handoff-ms", type=float, help="disaggregated: KV transfer end -> first token, on top of "
                   "the modelled transfer (default 0; the fitted SGLang 0.5.8 value: harness.py SGLANG_PD_HANDOFF_S)")
    p.add_argument("--seq-overhead-us", type=float, help="microseconds each sequence in a step (prompt chunk or "
                   "decode) adds to the step, on top of its kernels and the step overhead "
                   "(default 0; a lead, not fitted: docs/fidelity.md, benchmarks/fit_seq_overhead.py)")
    p.add_argument("--host-floor-us", type=float, help="an overlapped loop's host time per step, which the GPU "
                   "waits for when its kernels take less: a step takes at least this + --host-floor-seq-us x its "
                   "sequences (default: the framework's, 0 but TRT-LLM 1.0's fitted preset: perfmodel/framework.py "
                   "TRTLLM_HOST_FLOOR_S)")
    p.add_argument("--host-floor-seq-us", type=float, help="the host floor's microseconds per sequence in the step "
                   "(default: the framework's; TRT-LLM 1.0: TRTLLM_HOST_FLOOR_SEQ_S)")
    p.add_argument("--cuda-graph-max-bs", type=int, help="the largest CUDA-graph batch the engine captures "
                   "(SGLang's --cuda-graph-max-bs, TRT-LLM's cuda_graph_config max_batch_size, vLLM's "
                   "max_cudagraph_capture_size); default: the framework's for the GPU and TP (perfmodel/graphs.py)")
    p.add_argument("--cuda-graph-padding", choices=("on", "off"), help="whether a step runs the graph of the next "
                   "captured batch size, costed as that many tokens (TRT-LLM's cuda_graph_config enable_padding: "
                   "default off; SGLang and vLLM: on, off as SGLang's --disable-cuda-graph-padding)")
    p.add_argument("--batch-wait-timeout-iters", type=int, help="TRT-LLM's batch waiting (its "
                   "batch_wait_timeout_iters): while requests decode, new prompts are held up to this many "
                   "iterations for more to gather; default 0 (off). Needs --batch-wait-max-tokens-ratio > 0 too, "
                   "as in TRT-LLM")
    p.add_argument("--batch-wait-max-tokens-ratio", type=float, help="TRT-LLM's batch_wait_max_tokens_ratio: held "
                   "prompts run once they and the decoders make this fraction of max_num_tokens; default 0 (off)")
    p.add_argument("--adp-balance", action="store_true", default=None, help="TRT-LLM's attention-DP balance "
                   "(attention_dp_config enable_balance): the attention-DP ranks of one expert group hold their "
                   "prompts until every rank has one, so their prefills run in the same step (default: off)")
    p.add_argument("--adp-timeout-iters", type=int, help="with --adp-balance: iterations prompts are held at most "
                   "while some rank has none (attention_dp_config timeout_iters; default 50)")
    p.add_argument("--adp-batching-wait-iters", type=int, help="with --adp-balance: iterations every rank's prompts "
                   "are held further for more to gather (attention_dp_config batching_wait_iters; default 10)")
    p.add_argument("--hbm-gb", type=float, help="memory per GPU in GB as the driver reports it (engines size their "
                   "KV by it; default: the preset's, which for H100 / H200 SXM is the driver's figure)")


def framework_engine_fields(args) -> dict:
    """The EngineConfig fields of the framework-specific scheduler flags (None: the framework's default)."""
    return dict(batch_wait_timeout_iters=args.batch_wait_timeout_iters,
                batch_wait_max_tokens_ratio=args.batch_wait_max_tokens_ratio, adp_balance=args.adp_balance,
                adp_timeout_iters=args.adp_timeout_iters, adp_batching_wait_iters=args.adp_batching_wait_iters)


def framework_fields(args) -> dict:
    """The RunSpec fields of the flags add_framework_flags declares."""
    return dict(gpu_memory_utilization=args.gpu_memory_utilization, step_overhead_ms=args.step_overhead_ms,
                tokenize_us_per_token=args.tokenize_us_per_token,
                async_scheduling=None if args.async_scheduling is None else args.async_scheduling == "on",
                framework=args.framework, framework_version=args.framework_version, moe_kernel=args.moe_kernel,
                moe_a2a_call_us=args.moe_a2a_call_us, pd_handoff_ms=args.pd_handoff_ms,
                seq_overhead_us=args.seq_overhead_us, host_floor_us=args.host_floor_us,
                host_floor_seq_us=args.host_floor_seq_us, hbm_gb=args.hbm_gb, cuda_graph_max_bs=args.cuda_graph_max_bs,
                cuda_graph_padding=None if args.cuda_graph_padding is None else args.cuda_graph_padding == "on")
