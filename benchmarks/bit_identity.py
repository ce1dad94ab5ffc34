"""Bit-identity guard for refactors: a hash of every policy's request and step frames.

Runs 18 policy / framework / layout cases (every policy of the registry, a layout, the three frameworks, SiDP
and Flying variants, a closed loop, disagg round-robin routing, prefix caching off) on two workloads: a bursty
synthetic one with 0-output and long prompts whose requests share prefix blocks in five groups (vLLM's
prefix caching, on by default, acts on it), and the bundled BurstGPT sample (no block hashes). Each runs fast-forwarded and
step by step on 4 x H100, datasheet roofline. It prints one line per run: case, fast or not, a 16-hex hash
of the request and step frames, and the step rows. Run it before and after a change and `diff` the two
outputs: an empty diff means every number of every run is the same bit for bit.

    python benchmarks/bit_identity.py > before.txt   # (then change, rerun into after.txt, diff)
    python benchmarks/bit_identity.py --quick        # 120 synthetic requests only (tests/test_native.py)
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib

import numpy as np
import pandas as pd

from simulator.engine.config import framework_engine
from simulator.run import RunSpec, run
from simulator.workload import load_trace
from simulator.workload.workload import Workload

CASES = [("tp", {}), ("dp", {}), ("pp", {}), ("sp", {}), ("shift", {}), ("sidp", {}), ("flying", {}),
         ("seesaw", {}), ("disagg", {}), ("layout", {"layout": "tp=2,pp=2"}), ("ep", {"model": "qwen3-30b-a3b"}),
         ("dp", {"framework": "sglang"}), ("tp", {"framework": "trtllm"}), ("sidp", {"policy_args": {"hysteresis": 2}}),
         ("flying", {"policy_args": {"switching": "soft"}}), ("dp", {"max_concurrency": 8}),
         ("disagg", {"model": "qwen3-30b-a3b", "policy_args": {"decode_routing": "round_robin"}}),
         ("dp", {"engine_kw": {"enable_prefix_caching": False}})]


def synthetic(n: int = 400) -> Workload:
    """n (400) requests, bursts of 30 at 4x the gaps, prompts of 1-6,000 tokens, outputs 0 to 700; each
    prompt's 512-token blocks start with up to 3 its group (one of 5) shares, then its own."""
    rng = np.random.default_rng(3)
    gaps = rng.exponential(0.02, n) * (1 + 3 * (np.arange(n) % 100 < 30))
    gaps[0] = 0.0
    inp = rng.integers(1, 6000, n)
    blocks = [tuple((i % 5) * 100 + j if j < 3 else 10_000 + 100 * i + j for j in range(-(-int(p) // 512)))
              for i, p in enumerate(inp)]
    return Workload(pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.cumsum(gaps), "input_tokens": inp,
                                  "output_tokens": rng.choice([0, 1, 5, 100, 700], n),
                                  "priority": rng.integers(0, 2, n), "prefix_blocks": blocks}))


def frames_hash(r) -> str:
    h = hashlib.sha1(pd.util.hash_pandas_object(r.requests.astype(str), index=False).values.tobytes())
    h.update(pd.util.hash_pandas_object(r.steps.astype(str), index=False).values.tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the synthetic workload alone, 120 requests: every case in "
                   "seconds (tests/test_native.py: the compiled engine core against its sources)")
    a = p.parse_args()
    loads = (("synthetic", synthetic(120)),) if a.quick else (("synthetic", synthetic()),
                                                              ("burstgpt", load_trace("burstgpt.csv")))
    for name, w in loads:
        for policy, extra in CASES:
            extra = dict(extra)
            fw, engine_kw = extra.pop("framework", "vllm"), extra.pop("engine_kw", {})
            for fast in (True, False):
                eng = dataclasses.replace(framework_engine(fw), fast_forward=fast, **engine_kw)
                kw = {"model": "llama-3.1-8b", "hardware": "h100", "gpus": 4, "profile": "none", **extra}
                try:
                    r = run(w, RunSpec(policy=policy, framework=fw, engine=eng, **kw))
                except Exception as exc:  # (a case that stops: its error is part of the fingerprint)
                    print(f"{name} {policy} {fw} {extra} {engine_kw} fast={fast} ERROR {type(exc).__name__}: {exc}")
                    continue
                print(f"{name} {policy} {fw} {extra} {engine_kw} fast={fast} {frames_hash(r)} steps={len(r.steps)}",
                      flush=True)


if __name__ == "__main__":
    main()
