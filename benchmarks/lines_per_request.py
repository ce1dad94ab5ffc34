"""Where the simulator's Python work goes, counted rather than timed (issue 36): the lines simulator/ and perfmodel/
execute per request (sys.settrace), in all and per function, for the issue's deployment (DP=8 Llama-3.1-8B on 8 x
H100 SXM, calibrated profile, BurstGPT-like gamma arrivals) at a given rate and framework, or another policy on
those GPUs. A deterministic figure: two commits, or two machines, compare exactly (tests/test_overload_cost.py
bounds its growth with the load); the tracer makes the run ~10x slower, so keep n small. 2026-12-02, 1,500
requests at 30 req/s: dp 664 lines per request (637 after the bit-identical cuts later that day), tp 547, flying
767, disagg 940, sidp 6,090 (13 loop turns per request; its compute-as-a-service FFN GEMMs are costed through
perfmodel.ops at every step, not from a table).

    python benchmarks/lines_per_request.py [--rate 300] [--n 10000] [--framework vllm] [--policy dp] [--top 25]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

os.environ["PSIM_NATIVE"] = "0"  # sys.settrace sees Python lines only: the engine core's sources (perfmodel/native.py)
import perfmodel  # noqa: E402
import simulator  # noqa: E402
from simulator.run import RunSpec, run  # noqa: E402
from simulator.workload import load_trace  # noqa: E402

ROOTS = tuple(os.path.dirname(m.__file__) + os.sep for m in (simulator, perfmodel))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=300.0, help="arrivals per second (saturation is ~217 for vLLM)")
    p.add_argument("--n", type=int, default=10_000, help="requests")
    p.add_argument("--framework", default="vllm", choices=("vllm", "sglang", "trtllm"))
    p.add_argument("--policy", default="dp", help="parallelism policy on the 8 GPUs (dp, tp, sidp, flying, ...)")
    p.add_argument("--top", type=int, default=25, help="functions to list")
    a = p.parse_args()
    w = load_trace(f"synthetic:gamma?rate={a.rate:g}&burstiness=0.5&n={a.n}&lengths=burstgpt.csv", seed=0)
    lines: collections.Counter = collections.Counter()

    def local(frame, event, arg):
        if event == "line":
            code = frame.f_code
            lines[(os.path.relpath(code.co_filename, os.path.dirname(ROOTS[0].rstrip(os.sep))), code.co_name)] += 1
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(ROOTS) else None

    sys.settrace(calls)
    try:
        r = run(w, RunSpec(policy=a.policy, model="llama-3.1-8b", hardware="h100_sxm", gpus=8, framework=a.framework))
    finally:
        sys.settrace(None)
    total = sum(lines.values())
    print(f"{a.policy}, {a.framework}, {a.rate:g} req/s, {a.n:,} requests: {total / a.n:.1f} lines per request, "
          f"{len(r.steps) / a.n:.2f} engine-loop turns per request")
    for (path, name), n in lines.most_common(a.top):
        print(f"  {n / a.n:8.1f}  {path}:{name}")


if __name__ == "__main__":
    main()
