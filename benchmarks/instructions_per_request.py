"""Machine instructions per simulated request (issue 36), counted under valgrind rather than timed: the marginal
count between a run of n1 and one of n2 requests (imports, set-up and the profile load cancel), for the issue's
deployment (DP=8 Llama-3.1-8B on 8 x H100 SXM, calibrated profile, BurstGPT-like gamma arrivals). On a shared host
whose wall times move 30% between runs the count moves by well under 1%, so two commits compare closely: give each
its source tree (a `git worktree`; the default is this one). Each tree is byte-compiled first: a tree without
__pycache__ (PYTHONDONTWRITEBYTECODE, a fresh worktree) compiles every import in every run, and that start-up did
not cancel (2026-12-02: one commit counted 252.3k and 257.0k at 2k / 6k). Needs valgrind on PATH; each run is ~50x
slower than native, so keep n small. 2026-12-02, 2k and 6k requests: 300 req/s 279.8k -> 257.3k instructions per
request (1.09x fewer) with the bit-identical cuts of that day (docs/simulator.md, Speed), 108 req/s 392.8k ->
356.0k; then 242.0k -> 242.4k at 2k / 10k for the attention-DP balance's split of Engine.begin_step; later that day
(2k / 6k) 262.0k -> 237.3k at 300 req/s and 351.3k -> 319.7k at 108 for stretches cut without simpy's interrupt and
an open loop fed to the tokenizer without an event per arrival (docs/simulator.md, "Events, not lines"); 2026-12-03
(the compiled build, OPENBLAS_NUM_THREADS=1 in the child: repeats agree to 0.001%) 164.9k -> 145.9k at 108 req/s,
125.8k -> 113.7k at 300, 95.9k -> 86.3k at 861 (docs/simulator.md, "Fewer generic calls").

    python benchmarks/instructions_per_request.py [--rate 300] [--n 2000 6000] [--tree DIR ...]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = ("import sys\nfrom simulator.run import RunSpec, run\nfrom simulator.workload import load_trace\n"
       "rate, n = float(sys.argv[1]), int(sys.argv[2])\n"
       "w = load_trace(f'synthetic:gamma?rate={rate:g}&burstiness=0.5&n={n}&lengths=burstgpt.csv', seed=0)\n"
       "run(w, RunSpec(policy='dp', model='llama-3.1-8b', hardware='h100_sxm', gpus=8))\n")


def instructions(tree: Path, rate: float, n: int) -> int:
    """Instructions (callgrind's Ir) of one process replaying n requests with the simulator of `tree`."""
    # (OPENBLAS_NUM_THREADS=1: numpy's OpenBLAS starts idle worker threads whose polling callgrind counts too, a few
    # million instructions that vary run to run; with them two runs of one compiled tree moved ~5%, without 0.001%)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          RUN, str(rate), str(n)], env=env, cwd=tree, capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=300.0, help="arrivals per second (vLLM's saturation: ~215)")
    p.add_argument("--n", type=int, nargs=2, default=(2000, 6000), metavar=("N1", "N2"), help="the two run sizes")
    p.add_argument("--tree", type=Path, nargs="+", default=[REPO], help="source trees to count (default: this one)")
    a = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH (apt install valgrind)")
    n1, n2 = a.n
    for tree in a.tree:  # byte-compiled first: a tree without __pycache__ (PYTHONDONTWRITEBYTECODE, a fresh
        # worktree) compiles every import in each run, and that start-up does not cancel exactly (2026-12-02: 2% noise)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "simulator", "perfmodel"], cwd=tree,
                       capture_output=True, check=True)
        i1, i2 = instructions(tree, a.rate, n1), instructions(tree, a.rate, n2)
        print(f"{tree}: {a.rate:g} req/s: {(i2 - i1) / (n2 - n1) / 1e3:,.1f}k instructions per request "
              f"({i1:,} at {n1:,} requests, {i2:,} at {n2:,})")


if __name__ == "__main__":
    main()
