"""SimPy events per simulated request, by the code that scheduled them (issue 36): each event costs the heap,
`Environment.step` and a callback or generator resume, which the line counts of lines_per_request.py do not see.
Deterministic: two commits compare exactly. The issue's deployment (DP=8 Llama-3.1-8B on 8 x H100 SXM, calibrated
profile, BurstGPT-like gamma arrivals) at a rate and framework. Every scheduled event is processed (the run ends
with the queue empty), so the total is the events processed; a cut stretch's own timeout, which fires calling
nothing, counts under `sleep_stretch`. 2026-12-02, 20k requests, vLLM: 108 req/s 5.17 -> 3.53, 300 req/s 2.75 ->
1.65 (an arrival timeout each and the interrupts that cut stretches gone: docs/simulator.md, "Events, not lines").

    python benchmarks/events_per_request.py [--rate 108] [--n 20000] [--framework vllm]
"""
from __future__ import annotations

import argparse
import collections
import inspect
import os
from pathlib import Path

import simpy.core

from simulator.run import RunSpec, run
from simulator.workload import load_trace

REPO = Path(__file__).resolve().parents[1]


def site() -> str:
    """The project function that scheduled the event being scheduled: the first caller outside simpy."""
    frame = inspect.currentframe().f_back.f_back  # (past this and the wrapper)
    while frame is not None and os.sep + "simpy" + os.sep in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.relpath(frame.f_code.co_filename, REPO)}:{frame.f_code.co_name}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=108.0, help="arrivals per second (vLLM saturates at ~215)")
    p.add_argument("--n", type=int, default=20_000, help="requests")
    p.add_argument("--framework", default="vllm")
    args = p.parse_args()
    counts: collections.Counter = collections.Counter()
    schedule = simpy.core.Environment.schedule

    def counted(env, event, priority=simpy.core.NORMAL, delay=0):
        counts[site()] += 1
        return schedule(env, event, priority, delay)

    simpy.core.Environment.schedule = counted
    try:
        w = load_trace(f"synthetic:gamma?rate={args.rate:g}&burstiness=0.5&n={args.n}&lengths=burstgpt.csv", seed=0)
        run(w, RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100_sxm", gpus=8, framework=args.framework))
    finally:
        simpy.core.Environment.schedule = schedule
    n = args.n
    total = sum(counts.values()) / n
    print(f"dp, {args.framework}, {args.rate:g} req/s, {n:,} requests: {total:.2f} events per request")
    for k, v in counts.most_common():
        print(f"  {v / n:6.2f}  {k}")


if __name__ == "__main__":
    main()
