"""Issue 36: the simulator's cost per request stays flat past saturation, under each framework's scheduler.

The cost is counted, not timed (no test asserts a wall-clock time): the Python lines the simulator and perfmodel
execute per request, traced with sys.settrace, a deterministic figure on any machine. One DP=1 engine of
Llama-3.1-8B on an H100 (calibrated profile), BurstGPT-like arrivals at half and four times its saturated rate
(~27 req/s: benchmarks/overload_speed.py measures it, 217 req/s for DP=8). Per request the overloaded run may cost at
most twice the light one (the issue's bound). Lines per request at 4x / 0.5x, 2026-12-02: before deb500d SGLang
8,218 / 1,860 (4.4x: every prompts-only step set each waiting decoder back, and the reservation summed the whole
batch), TRT-LLM 599 / 767, vLLM 379 / 629; after it (and the driver's memory in the H100 preset) 418 / 681,
365 / 663, 348 / 571.
"""
from __future__ import annotations

import os
import sys

import pytest

import perfmodel
import simulator
from simulator.run import RunSpec, run
from simulator.workload import load_trace

ROOTS = tuple(os.path.dirname(m.__file__) + os.sep for m in (simulator, perfmodel))
SATURATED_RPS = 27.0  # one engine's share of overload_speed.py's DP=8 figure (217 req/s), vLLM's rule
N = 1500


def lines_per_request(rate_rps: float, framework: str) -> float:
    """Lines of simulator/ and perfmodel/ code executed per request of a run at `rate_rps`."""
    w = load_trace(f"synthetic:gamma?rate={rate_rps:g}&burstiness=0.5&n={N}&lengths=burstgpt.csv", seed=0)
    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
        return local

    def calls(frame, event, arg):  # trace lines only in project code (simpy, numpy, pandas are not ours)
        return local if frame.f_code.co_filename.startswith(ROOTS) else None

    sys.settrace(calls)
    try:
        r = run(w, RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100_sxm", gpus=1, framework=framework))
    finally:
        sys.settrace(None)
    assert (r.requests["status"] == "completed").all()
    return count[0] / N


@pytest.mark.sources  # (patches the engine / traces its lines: tests/conftest.py)
@pytest.mark.slow
@pytest.mark.parametrize("framework", ["vllm", "sglang", "trtllm"])
def test_overload_costs_at_most_twice_per_request(framework):
    light = lines_per_request(0.5 * SATURATED_RPS, framework)
    heavy = lines_per_request(4 * SATURATED_RPS, framework)
    assert heavy <= 2 * light, f"{framework}: {heavy:.0f} lines per request at 4x load vs {light:.0f} at 0.5x"
