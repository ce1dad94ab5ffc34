"""Speed at every load (issue 36): the simulator's cost per request below, at and past saturation.

The deployment of the issue: Llama-3.1-8B fp8 on 8 x H100 SXM, DP=8, the calibrated h100_sxm profile,
BurstGPT-like arrivals (gamma, burstiness 0.5, lengths resampled from traces/burstgpt.csv). Its saturated
rate is measured first (a probe: 20k requests at 2,000 req/s, every engine's queue full; served requests
per second of the span), then n requests are replayed at 0.5x, 1x, 2x and 4x that rate; each line prints
wall seconds, us per request, engine-loop turns, preemptions, median queue and the process's peak RSS.
The cost per request at each load is printed against the 0.5x run's: `--strict` exits 1 past 2x (the
issue's bound; a benchmark, not a test: tests assert no wall-clock time). `--cli` adds the issue's own
command (1M requests at 300 req/s, --out) as a subprocess, and a machine yardstick: a fixed `python -c`
loop timed in the same sitting, so figures from different machines can be compared in yardsticks.

    python benchmarks/overload_speed.py [--n 100000] [--factors 0.5,1,2,4] [--frameworks vllm,sglang,trtllm]
        [--cli] [--cli-loads 0.5,2,4] [--repeat 3] [--strict]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time

from perfmodel import native
from simulator.run import RunSpec, run
from simulator.workload import load_trace

SPEC = RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100_sxm", gpus=8)
TRACE = "synthetic:gamma?rate={rate:g}&burstiness=0.5&n={n}&lengths=burstgpt.csv"
CLI = ("--trace", TRACE.format(rate=300, n=1_000_000), "--policy", "dp", "--model", "llama-3.1-8b",
       "--hardware", "h100_sxm", "--gpus", "8")
YARDSTICK = "sum(i * i for i in range(10**7))"  # ~0.4 s of pure-Python loop on this 2-core machine


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


def replay(rate: float, n: int, framework: str = "vllm"):
    """(wall seconds, the Run) of n requests at `rate` req/s under `framework`'s scheduler and defaults."""
    w = load_trace(TRACE.format(rate=rate, n=n), seed=0)
    t0 = time.perf_counter()
    r = run(w, dataclasses.replace(SPEC, framework=framework))
    return time.perf_counter() - t0, r


def saturated_rate(framework: str = "vllm") -> float:
    """Served requests per second with every queue full (20k requests at 2,000 req/s)."""
    _, r = replay(2000.0, 20_000, framework)
    req = r.requests[r.requests["status"] == "completed"]
    return len(req) / float(req["finish_s"].max() - req["first_token_s"].min())


def yardstick_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", YARDSTICK], check=True)
    return time.perf_counter() - t0


def cli_run(args=CLI) -> tuple[float, float]:
    """(wall seconds, peak RSS GB of the child) of the issue's 1M-request command with --out (`args`: another
    arrival rate). The peak is the largest of this process's children so far (getrusage)."""
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simulator.apps.cli", *args, "--out", f"{d}/out"], check=True,
                       capture_output=True)
        wall = time.perf_counter() - t0
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="requests per load (default 100k)")
    p.add_argument("--factors", default="0.5,1,2,4", help="loads as multiples of the saturated rate")
    p.add_argument("--cli", action="store_true", help="also time the issue's 1M-request CLI command")
    p.add_argument("--cli-loads", default="", help="also the 1M-request CLI command at these multiples of the "
                   "saturated rate (e.g. 0.5,2,4: the issue's 'the same at 0.5x, 2x and 4x load')")
    p.add_argument("--repeat", type=int, default=1, help="time the issue's CLI command this many times, a yardstick "
                   "before each and after the last, and report the best of each (on a shared machine the least "
                   "disturbed run; 2026-12-01 here: yardsticks of 0.48-0.67 s in one sitting)")
    p.add_argument("--frameworks", default="vllm", help="schedulers and defaults to replay under, comma-separated "
                   "(vllm, sglang, trtllm: each framework's own admission rule under overload)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a load costs over 2x the lightest per request")
    a = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; engine core "
          + native.core_label())
    worst = 0.0
    for fw in a.frameworks.split(","):
        sat = saturated_rate(fw)
        print(f"{fw}: saturated rate (DP=8 Llama-3.1-8B, 8 x H100 SXM, calibrated profile, BurstGPT lengths): "
              f"{sat:.0f} req/s")
        per = {}
        for f in (float(x) for x in a.factors.split(",")):
            wall, r = replay(f * sat, a.n, fw)
            per[f] = wall / a.n
            req = r.requests
            print(f"  {f:g}x = {f * sat:.0f} req/s, {a.n:,} requests: {wall:.2f} s wall, "
                  f"{1e6 * per[f]:.1f} us/request, {len(r.steps):,} loop turns, "
                  f"{int(req['preemptions'].sum()):,} preemptions, median queue "
                  f"{req['queue_ms'].median() / 1e3:.1f} s, peak RSS {rss_gb():.2f} GB")
        base = per[min(per)]
        ratios = {f: v / base for f, v in per.items()}
        worst = max(worst, *ratios.values())
        print("  cost per request vs the lightest load: " + ", ".join(f"{f:g}x {x:.2f}" for f, x in ratios.items())
              + " (bound 2.00)")
    if a.cli:
        walls, ys, peak = [], [yardstick_s()], 0.0
        for _ in range(max(1, a.repeat)):
            wall, peak = cli_run()
            walls.append(wall)
            ys.append(yardstick_s())
        wall, y = min(walls), min(ys)
        runs = f" (best of {len(walls)}: {', '.join(f'{w:.1f}' for w in walls)} s)" if len(walls) > 1 else ""
        print(f"CLI: simulate {' '.join(CLI)} --out DIR: {wall:.1f} s wall{runs} (bound 30 s), peak RSS {peak:.2f} GB "
              f"(bound 1 GB); machine yardstick (python -c '{YARDSTICK}') best {y:.2f} s of "
              f"{', '.join(f'{v:.2f}' for v in ys)} = {wall / y:.0f} yardsticks")
    for f in (float(x) for x in a.cli_loads.split(",") if x):
        args = ("--trace", TRACE.format(rate=round(f * sat), n=1_000_000), *CLI[2:])
        wall, peak = cli_run(args)
        print(f"CLI at {f:g}x ({round(f * sat)} req/s), 1M requests, --out: {wall:.1f} s wall (bound 30 s), "
              f"peak RSS so far {peak:.2f} GB")
    if a.strict and worst > 2.0:
        sys.exit(1)


if __name__ == "__main__":
    main()
