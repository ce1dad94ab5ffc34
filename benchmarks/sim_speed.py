"""Simulator speed and size (issue #5): wall time, simulated requests and engine steps per wall-second.

1. The Azure 2023 conversation trace (19,366 requests, ../shared/data/traces) on Llama-3.3-70B fp8,
   8 x H200, TP=8 and DP=8: each under 2 s wall (Vidur: ~100 s for this trace on such a machine).
2. A generated BurstGPT-like trace (gamma arrivals, burstiness 0.5, (input, output) pairs resampled
   from the bundled BurstGPT sample: 565 / 322 tokens mean) on Llama-3.1-8B fp8, 8 x H100, DP=8,
   at 300 req/s: a busy deployment, not an overloaded one (perfmodel's saturated estimate at the
   mean lengths is ~370 req/s; median TTFT ~36 ms, TPOT ~19 ms, no queue build-up: the TTFT of
   the last tenth of arrivals is printed beside the first's). 10k, 100k and 1M requests; the 1M
   run under 60 s and 3 GB peak memory, the cost per request flat in n. The cost per request
   falls as the load rises (more arrivals and completions share a step boundary), so it is also
   printed at 100 and 200 req/s for 10k requests.

3. What users run: `simulate --trace AzureLLMInferenceTrace_conv.csv --policy tp --out DIR` as a
   subprocess with the CLI's defaults (Llama-3.3-70B fp8, 8 x H200, the hardware's calibrated
   profile, tqdm bar on stderr, parquet outputs), median of 3 wall times; then the same run's
   phases measured in-process (imports, trace load, simulate, frames + summary, writing), so a
   reader sees where the CLI's time goes beside the inner-loop figure of 1.

    python benchmarks/sim_speed.py [--max-n 1000000] [--profile] [--cli-only]
    python benchmarks/sim_speed.py --table [--repeat 2] [--no-validate]   # issue 36's whole table (speed_table.py)

Engine steps count every decode step a fast-forwarded stretch stands for; iterations are the
engine-loop turns actually simulated (one per step or stretch). 1 and 2: datasheet roofline.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model
from perfmodel import native
from simulator.cluster.simulate import SimConfig, simulate
from simulator.results.metrics import summarize
from simulator.workload import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._shared import AZURE_CONV as AZURE, shared_dir  # noqa: E402
BURSTGPT_RATE_RPS, BURSTINESS = 300.0, 0.5
CLI_ARGS = ("--policy", "tp")  # every other flag at the CLI's default
CLI_REPEATS = 3


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is KiB on Linux


def timed_run(label: str, workload, spec, hw, cfg: SimConfig, prof=None, quiet: bool = False) -> float:
    """Simulate, print the speed line and a sanity line (conservation checked); return wall seconds."""
    t0 = time.perf_counter()
    res = simulate(workload, spec, hw, cfg, prof)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    req, steps = res.requests.frame(), res.steps.frame()
    summ = summarize(req, steps, res.engines)  # raises if anything was lost
    post = time.perf_counter() - t1
    n, n_steps, iters = len(workload), int(steps["steps"].sum()), len(steps)
    if quiet:
        print(f"{label}: {1e6 * wall / n:.1f} us/request, median TTFT {summ['median_ttft_ms']:.1f} ms, "
              f"median TPOT {summ['median_tpot_ms']:.2f} ms")
        return wall
    tenth = max(1, n // 10)
    ttft = req["ttft_ms"].to_numpy()
    print(f"{label}: {n:,} requests in {wall:.2f} s wall = {n / wall:,.0f} simulated requests/s, "
          f"{n_steps:,} engine steps = {n_steps / wall:,.0f} steps/s ({iters:,} iterations, "
          f"{1e6 * wall / n:.1f} us/request)")
    print(f"    completed {summ['completed']:,}, rejected {summ['rejected']:,}, simulated {summ['duration']:,.0f} s, "
          f"median TTFT {summ['median_ttft_ms']:.1f} ms, median TPOT {summ['median_tpot_ms']:.2f} ms, "
          f"preemptions {summ['preemptions']:,}, mean KV use {summ.get('mean_kv_utilization', 0):.1%}; "
          f"frames + summary {post:.2f} s")
    if n >= 10_000:
        print(f"    p99 TTFT of the first / last tenth of arrivals: {np.nanpercentile(ttft[:tenth], 99):.1f} / "
              f"{np.nanpercentile(ttft[-tenth:], 99):.1f} ms")
    return wall


def azure() -> None:
    shared = shared_dir()
    if shared is None:
        print("Azure 2023: skipped (../shared/data absent)")
        return
    w = load_trace(shared / AZURE)
    spec, hw = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200")
    simulate(load_trace("synthetic:poisson?n=50"), spec, hw, SimConfig(policy="tp", gpus=8))  # warm-up
    for policy in ("tp", "dp"):
        timed_run(f"Azure 2023 conv, Llama-3.3-70B, 8 x H200, {policy.upper()}=8", w, spec, hw,
                  SimConfig(policy=policy, gpus=8))


def burstgpt_like(n: int):
    return load_trace(f"synthetic:gamma?rate={BURSTGPT_RATE_RPS:g}&burstiness={BURSTINESS:g}&n={n}"
                      f"&lengths=burstgpt.csv", seed=0)


def scaling(max_n: int) -> None:
    spec, hw = load_model("llama-3.1-8b", weights="fp8"), load_hardware("h100")
    cfg = SimConfig(policy="dp", gpus=8)
    print(f"BurstGPT-like (gamma, burstiness {BURSTINESS:g}, {BURSTGPT_RATE_RPS:g} req/s, lengths resampled "
          f"from traces/burstgpt.csv), Llama-3.1-8B, 8 x H100, DP=8:")
    per = {}
    n = 10_000
    while n <= max_n:
        w = burstgpt_like(n)
        wall = timed_run(f"  n = {n:,}", w, spec, hw, cfg)
        per[n] = wall / n
        n *= 10
    print("  cost per request: " + ", ".join(f"{k:,}: {1e6 * v:.1f} us" for k, v in per.items()))
    print(f"  peak memory (max RSS of this process): {peak_rss_gb():.2f} GB")
    for rate in (100, 200):  # the same 10k requests at lighter loads
        w = load_trace(f"synthetic:gamma?rate={rate}&burstiness={BURSTINESS:g}&n=10000&lengths=burstgpt.csv", seed=0)
        timed_run(f"  n = 10,000 at {rate} req/s", w, spec, hw, cfg, quiet=True)


def run_cli(trace: Path, out_dir: str) -> float:
    """Wall seconds of one `simulate --trace T --policy tp --out DIR` in a fresh interpreter."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "simulator.apps.cli", "--trace", str(trace), *CLI_ARGS, "--out", out_dir],
                       capture_output=True, text=True)  # the progress bar goes to the stderr pipe
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"simulate failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    return wall


def cli_phases(trace: Path, out_dir: Path) -> tuple[dict, dict, str]:
    """The CLI run's phases, timed in-process with the functions the CLI calls; (seconds, summary, profile)."""
    from tqdm import tqdm

    from simulator.apps.cli import build_parser, run_spec
    from simulator.results.files import write_run
    from simulator.run import hardware_and_profile, model_spec, run
    from simulator.workload.cli import workload_from_args

    sec = {}
    start = [sys.executable, "-c", "import simulator.apps.cli"]
    sec["interpreter start + imports"] = statistics.median(_wall(subprocess.run, start, check=True)[0]
                                                           for _ in range(CLI_REPEATS))
    args = build_parser().parse_args(["--trace", str(trace), *CLI_ARGS, "--out", str(out_dir)])
    sec["trace load"], w = _wall(workload_from_args, args)
    rs = run_spec(args.policy, args)
    t0 = time.perf_counter()
    hw, prof = hardware_and_profile(rs.hardware, rs.profile)
    model_spec(rs.model, rs.weights or ("fp8" if hw.has_fp8 else "bf16"), rs.kv_dtype)  # run()'s default
    prof_name = f"calibrated {prof.name}" if prof is not None else "datasheet"
    sec["model, hardware, profile"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with tqdm(total=len(w), delay=3, file=io.StringIO(), unit="req", desc=args.policy) as bar:
        r = run(w, rs, progress=bar.update)  # simulator.run, as the CLI calls it
    sec[f"simulate + frames + summary ({prof_name} profile, progress bar)"] = time.perf_counter() - t0
    summ = r.summary
    t0 = time.perf_counter()
    write_run(out_dir, summ, r.requests, r.steps, args.window_s)  # what the CLI writes with --out
    sec["writing outputs (2 parquet, csv, json)"] = time.perf_counter() - t0
    return sec, summ, prof_name


def _wall(fn, *a, **kw):
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t0, out


def cli_path() -> None:
    """Median wall time of the CLI run users make, then where its time goes."""
    shared = shared_dir()
    if shared is None:
        print("CLI path: skipped (../shared/data absent)")
        return
    trace = shared / AZURE
    with tempfile.TemporaryDirectory() as tmp:
        walls = [run_cli(trace, f"{tmp}/run{i}") for i in range(CLI_REPEATS)]
        cli_summ = json.loads(Path(f"{tmp}/run0/summary.json").read_text())
        sec, summ, prof_name = cli_phases(trace, Path(tmp) / "phases")
    print(f"CLI path (simulate --trace {trace.name} {' '.join(CLI_ARGS)} --out DIR; {prof_name} profile, "
          f"progress bar, parquet): median {statistics.median(walls):.2f} s of {len(walls)} runs "
          f"({', '.join(f'{x:.2f}' for x in sorted(walls))})")
    print(f"    phases of the same run, in-process (sum {sum(sec.values()):.2f} s):")
    width = max(map(len, sec))
    for name, s in sec.items():
        print(f"      {name:<{width}} {s:6.2f} s")
    same = {k: (cli_summ.get(k), summ.get(k)) for k in ("completed", "rejected", "median_ttft_ms", "median_tpot_ms")}
    if any(a != b for a, b in same.values()):
        print(f"    WARNING: the in-process run differs from the CLI's (CLI, in-process): {same}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-n", type=int, default=1_000_000, help="largest BurstGPT-like trace (10x steps from 10k)")
    p.add_argument("--profile", action="store_true", help="cProfile the Azure TP=8 run instead")
    p.add_argument("--cli-only", action="store_true", help="only the CLI path (subprocess runs, then phases)")
    p.add_argument("--table", action="store_true", help="issue 36's table: the 1M-request CLI at 300 req/s and at "
                   "0.5x, 2x, 4x the saturated rate, the Azure CLI, validation, beside a yardstick (benchmarks/"
                   "speed_table.py; ~15 min)")
    p.add_argument("--repeat", type=int, default=2, help="with --table: runs of each CLI row (the best is reported)")
    p.add_argument("--no-validate", action="store_true", help="with --table: skip the validation row (~3-4 min)")
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} CPUs; engine core "
          + native.core_label())
    if args.table:
        from benchmarks.speed_table import main as table

        table(args.repeat, with_validate=not args.no_validate)
        return
    if args.cli_only:
        cli_path()
        return
    if args.profile:
        import cProfile
        import pstats

        shared = shared_dir()
        w = load_trace(shared / AZURE)
        spec, hw = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200")
        cProfile.runctx("simulate(w, spec, hw, SimConfig(policy='tp', gpus=8))", globals(), locals(), "/tmp/sim_speed.prof")
        pstats.Stats("/tmp/sim_speed.prof").sort_stats("tottime").print_stats(20)
        return
    azure()
    cli_path()
    scaling(args.max_n)


if __name__ == "__main__":
    main()
