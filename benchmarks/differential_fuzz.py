"""A wide fast-path-vs-step-by-step fuzz (issue 33's differential check, more mixes and seeds than the tests draw).

Each case is a policy with framework, engine and workload options; each seed draws a bursty trace (same-instant
arrivals, prompts of 1 to `--max-prompt` tokens, 0-output rows, optional shared prefix blocks). A case passes when
the closed-form run equals the step-by-step one (tests/test_sim_util.assert_same_requests: integers exactly, times
to 1e-9), their summary counts agree and both satisfy every invariant (simulator/results/invariants.py). It prints
one line per case and exits 1 if any failed. 2026-12-02: found SGLang counting a chunked 0-output request done
early (tests/test_sglang_chunked_prefill.py); after the fix 19 + 20 + 10 mixes x 6-25 seeds ran clean. 2026-12-03,
seeds 1000-1007: Flying on TRT-LLM stranded a moved request whose recompute (prompt + generated) outgrew the
unchunked step budget, both paths raising "nothing schedulable" (tests/test_dyn_flying.py); a crash now fails its
case instead of ending the run. `--relation causal` then failed four cases falsely (tests/test_metamorphic.py: a
decode stretch begun before t runs as long as what happens after t decides); 12 mixes appended. `--hbm-gb 22`
(KV pressure) found SGLang's decode stretches running past the step whose decayed reservation admits a queued
prompt, and Flying's hard switch reading a unit's free KV as of its stretch's start (tests/test_stretch_headroom.py).
After the fixes, clean: 46 mixes x 16 seeds (7000-7015), x 10 with prompts to 30,000 tokens (8000-8009), x 12 at
--hbm-gb 22 and 12 (6000-6011, 20-80 requests), x 10 at 16 GB with 30-120 requests (8000-8009); causal x 20 seeds
(3000-3019) and x 8 at 22 GB; shift x 12 (3000-3011) and x 8 at 22 GB; --big x 3 (8000-8002). (SGLang's mixes at
12 or 16 GB, and a few others, end in LayoutError: the model does not fit; not failures of the paths.)

`--relation` checks a metamorphic relation of the (default, closed-form) run instead (metamorphic.py):
  shift   the trace moved later in time gives the same latencies (nothing reads the absolute clock);
  causal  a request appended to arrive at t changes nothing that happened before t (no look-ahead: the front
          end and the stretches know future arrival times and must not act on them).
2026-12-02: both clean over 27 mixes x 25 seeds (found nothing); the two CUDA-graph mixes added after, 10 seeds;
the five host-floor mixes (2026-12-02) clean over 10 seeds, and both relations over 5.

    python benchmarks/differential_fuzz.py [--seeds 10] [--first-seed 0] [--max-prompt 9000] [--big] [--match TEXT]
        [--relation fast|shift|causal] [--hbm-gb 12] [--requests 5-40]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from test_sim_util import assert_same_requests  # noqa: E402

from simulator.results.invariants import check_run  # noqa: E402
from simulator.run import run  # noqa: E402
from simulator.workload.workload import Workload  # noqa: E402

from metamorphic import RELATIONS, spec, trace  # noqa: E402 (tests/metamorphic.py)

# (policy, RunSpec fields, EngineConfig fields, shared prefix blocks)
MIXES = [
    ("dp", {"framework": "sglang", "max_concurrency": 4}, {}, False),
    ("dp", {"framework": "trtllm", "max_concurrency": 3}, {}, False),
    ("tp", {"framework": "trtllm"}, {"batch_wait_timeout_iters": 5, "batch_wait_max_tokens_ratio": 0.5}, False),
    ("dp", {}, {"priority_scheduling": True}, False),
    ("dp", {}, {"enable_chunked_prefill": False}, False),
    ("dp", {}, {"max_num_seqs": 3, "max_num_batched_tokens": 1024}, False),
    ("dp", {}, {"max_waiting": 2}, False),
    ("dp", {}, {}, True),
    ("dp", {"max_concurrency": 5}, {}, True),
    ("tp", {"mtp": 2}, {}, False),
    ("tp", {"framework": "trtllm", "mtp": 1}, {}, False),
    ("disagg", {"framework": "sglang"}, {}, False),
    ("disagg", {"framework": "trtllm"}, {}, False),
    ("disagg", {}, {}, True),
    ("shift", {"framework": "sglang"}, {}, False),
    ("flying", {"framework": "trtllm"}, {}, False),
    ("flying", {"max_concurrency": 6}, {}, True),
    ("seesaw", {"framework": "sglang"}, {}, False),
    ("seesaw", {"max_concurrency": 4}, {}, False),
    ("sidp", {"framework": "trtllm"}, {}, False),
    ("pp", {"framework": "trtllm"}, {"max_num_batched_tokens": 1024}, False),
    ("layout", {"framework": "sglang", "layout": "tp=2,pp=2", "gpus": 4}, {}, False),
    ("layout", {"framework": "trtllm", "layout": "dp=2,tp=1,ep=2", "model": "qwen3-30b-a3b"},
     {"adp_balance": True, "adp_timeout_iters": 5, "adp_batching_wait_iters": 1}, False),
    ("ep", {"framework": "sglang", "model": "qwen3-30b-a3b"}, {}, False),
    ("dp", {"framework_version": "0.18.0", "max_concurrency": 3}, {"max_num_batched_tokens": 700}, False),
    ("tp", {"framework": "sglang", "framework_version": "0.5.9"}, {"max_num_batched_tokens": 512}, False),
    ("tp", {"framework": "sglang"}, {"priority_scheduling": True, "max_num_batched_tokens": 768}, False),
    ("tp", {"framework": "trtllm", "mtp": 1, "cuda_graph_padding": True, "cuda_graph_max_bs": 16}, {}, False),
    ("dp", {"framework": "sglang", "framework_version": "0.5.9", "cuda_graph_max_bs": 8}, {}, True),
    # the host floor (runner.floored_line): TRT-LLM 1.0's fitted preset, and floors above MTP, attention-DP ticks and
    # a disaggregated decode pool's kernels
    ("dp", {"framework": "trtllm", "framework_version": "1.0.0rc3", "max_concurrency": 6}, {}, False),
    ("tp", {"framework": "trtllm", "mtp": 1, "host_floor_us": 4000.0, "host_floor_seq_us": 50.0}, {}, False),
    ("layout", {"framework": "trtllm", "layout": "dp=2,tp=1,ep=2", "model": "qwen3-30b-a3b", "host_floor_us": 6000.0,
                "host_floor_seq_us": 100.0}, {"adp_balance": True, "adp_timeout_iters": 5}, False),
    ("disagg", {"framework": "trtllm", "host_floor_us": 5000.0, "host_floor_seq_us": 80.0}, {}, False),
    ("sidp", {"host_floor_us": 3000.0, "host_floor_seq_us": 60.0}, {}, True),
    # 2026-12-03: the dynamic policies under each framework's rules, and limits they had not met (appended: a mix's
    # index seeds its traces, so the earlier mixes keep theirs)
    ("shift", {"framework": "trtllm"}, {}, False),
    ("seesaw", {"framework": "trtllm"}, {}, False),
    ("flying", {"framework": "sglang"}, {}, False),
    ("flying", {}, {"enable_chunked_prefill": False}, False),
    ("sidp", {"framework": "sglang"}, {}, False),
    ("flying", {"framework": "trtllm", "max_concurrency": 4}, {}, False),
    ("disagg", {}, {"priority_scheduling": True}, False),
    ("shift", {}, {"max_num_seqs": 3, "max_num_batched_tokens": 1024}, False),
    ("seesaw", {}, {"enable_chunked_prefill": False}, False),
    ("sidp", {}, {"max_waiting": 2}, False),
    ("pp", {"framework": "sglang"}, {"max_num_batched_tokens": 1024}, False),
    ("ep", {"framework": "trtllm", "model": "qwen3-30b-a3b"}, {}, False),
]
BIG = [  # the served models of the measured files, on 8 x H200 (slower: --big)
    ("layout", {"framework": "sglang", "model": "deepseek-r1", "layout": "tp=8,ep=8"}, {}, False),
    ("layout", {"framework": "trtllm", "model": "deepseek-r1", "layout": "dp=8,tp=1,ep=8", "mtp": 1}, {}, False),
    ("layout", {"framework": "sglang", "model": "qwen3.5-397b-a17b", "layout": "tp=8,ep=8"}, {}, False),
    ("layout", {"framework": "sglang", "model": "glm-5", "layout": "tp=8"}, {}, False),
    ("layout", {"model": "kimi-k2.5", "layout": "tp=8", "max_concurrency": 4}, {}, False),
    ("layout", {"framework": "trtllm", "model": "llama-3.1-70b", "layout": "tp=4,pp=2"}, {}, False),
    ("layout", {"model": "gpt-oss-120b", "layout": "tp=2,ep=2"}, {}, False),
]


def check(w: Workload, policy: str, fields: dict, eng: dict, big: bool) -> None:
    a, b = (run(w, spec(policy, fields, eng, fast, big)) for fast in (True, False))
    assert_same_requests(a.result, b.result)
    for key in ("completed", "rejected", "num_requests", "total_output_tokens", "mode_switches"):
        assert a.summary.get(key) == b.summary.get(key), key
    bad = check_run(a.result) + check_run(b.result)
    assert not bad, bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--max-prompt", type=int, default=9000, help="prompts of 1 to this many tokens")
    p.add_argument("--big", action="store_true", help="the measured files' models on 8 x H200 instead")
    p.add_argument("--match", default="", help="only cases whose description contains this")
    p.add_argument("--hbm-gb", type=float, default=None,
                   help="KV pressure: this many GB a GPU for the mixes of the default model (Llama-3.1-8B: 12 leaves "
                        "vLLM and TRT-LLM a few requests' KV; SGLang, which holds back ~10 GB, needs ~22)")
    p.add_argument("--requests", default="5-40", help="requests per trace, LO-HI (drawn per seed)")
    p.add_argument("--relation", default="fast", choices=("fast", *RELATIONS),
                   help="fast: closed form = step by step (default); shift, causal: metamorphic.py")
    args = p.parse_args()
    failed = 0
    lo, hi = (int(x) for x in args.requests.split("-"))
    for ci, (policy, fields, eng, prefix) in enumerate(BIG if args.big else MIXES):
        if args.hbm_gb is not None and "model" not in fields:
            fields = {**fields, "hbm_gb": args.hbm_gb}
        name = f"{policy} {fields} {eng}" + (" prefix" if prefix else "")
        if args.match not in name:
            continue
        for s in range(args.first_seed, args.first_seed + args.seeds):
            rng = np.random.default_rng(s * 100 + ci)
            w = trace(rng, int(rng.integers(lo, hi)), args.max_prompt, prefix)
            try:
                if args.relation == "fast":
                    check(w, policy, fields, eng, args.big)
                else:
                    RELATIONS[args.relation](w, spec(policy, fields, eng, True, args.big), rng)
            except Exception as e:  # (a crash is a failure of its case too: the other cases still run)
                failed += 1
                print(f"FAIL {name} seed {s}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                break
        else:
            print(f"ok   {name} ({args.seeds} seeds)", flush=True)
    print(f"{failed} case(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
