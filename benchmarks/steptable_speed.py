"""StepTable.time_s calls per second (issue #13): the simulator asks one step at a time.

A stream of (prefill tokens, prefill seqs, pairs, keys, decode seqs, decode keys) steps built from
the Azure 2023 conversation trace's prompt lengths (chunks <= 8192 tokens, vLLM's H200 budget;
mostly one prompt per step beside a few dozen decodes; as in the CLI's TP run, equal prompt
lengths leave ~1 step in 5 with a prefill chunk new to the table's cache) through StepTable.time_s
on Llama-3.3-70B fp8, TP=8, H200: datasheet roofline vs the default calibrated profile (h200_sxm).
A fresh table per pass, so every distinct chunk is evaluated once, as in a real run. Also: the
distinct chunks alone, decode_affine, and the run users make (`simulate --trace <azure> --policy
tp`) end to end. CPU time, best of a few passes (a shared machine inflates wall time). Correctness:
the table equals perfmodel.step_cost on the stream up to summation order (tests/test_steptable.py
holds the bit-level checks).

    python benchmarks/steptable_speed.py [--no-cli]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from perfmodel.batch import make_batch
from perfmodel.calibration.profile import default_profile
from perfmodel.cost import step_cost
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from perfmodel.steptable import StepTable

REPO = Path(__file__).resolve().parents[1]
AZURE = "data/traces/azure2023/AzureLLMInferenceTrace_conv.csv"
BUDGET, MAX_SEQS = 8192, 1024  # vLLM's defaults on H200 (perfmodel.framework.vllm_default_limits)
SEQS_PER_CHUNK = ((1, 0.91), (2, 0.075), (3, 0.012), (4, 0.003))  # prompts packed in one step


def trace_path() -> Path | None:
    """$PSIM_SHARED/data/..., else ../shared beside the repository (as benchmarks/sim_speed.py)."""
    for d in ([Path(os.environ["PSIM_SHARED"])] if os.environ.get("PSIM_SHARED") else []) + [REPO.parent / "shared"]:
        if (d / AZURE).is_file():
            return d / AZURE
    return None


def prompt_lengths(n: int, rng) -> np.ndarray:
    """Prompt lengths of the Azure conversation trace (log-normal stand-in when it is absent)."""
    path = trace_path()
    if path is not None:
        import pandas as pd

        return pd.read_csv(path, usecols=["ContextTokens"])["ContextTokens"].to_numpy()[:n]
    return np.clip(rng.lognormal(7.0, 1.0, n), 1, 30000).astype(int)


def step_stream(n_steps: int, seed: int = 0) -> list[tuple]:
    """Engine steps in StepTable.time_s's argument order: ~13% decode-only, the rest a prefill
    chunk of 1-4 prompts (<= BUDGET - decodes tokens, long prompts in several chunks, pairs and keys
    after the chunks before) beside 0-63 decodes."""
    rng = np.random.default_rng(seed)
    prompts = list(prompt_lengths(n_steps, rng))
    ps_vals, ps_p = zip(*SEQS_PER_CHUNK)
    out, done = [], 0  # done: tokens of prompts[0] prefilled by earlier chunks
    while len(out) < n_steps and prompts:
        if rng.random() < 0.13:
            dn = int(rng.integers(1, 64))
            out.append((0, 0, 0.0, 0.0, dn, float(dn * rng.integers(200, 4000))))
            continue
        room, pt, ps, pairs, pkv = BUDGET - 64, 0, 0, 0.0, 0.0
        for _ in range(int(rng.choice(ps_vals, p=ps_p))):
            if not prompts or room <= 0:
                break
            n = min(int(prompts[0]) - done, room)  # n new tokens after `done` cached ones
            pairs += n * done + n * (n + 1) / 2
            pkv += done + n
            pt, ps, room = pt + n, ps + 1, room - n
            done += n
            if done >= prompts[0]:
                prompts.pop(0)
                done = 0
        dn = int(rng.integers(0, 64))
        out.append((pt, ps, pairs, pkv, dn, float(dn * rng.integers(200, 4000))))
    return out[:n_steps]


def calls_per_s(make_table, calls: list[tuple], repeat: int = 5) -> float:
    """Best of `repeat` passes, each on a fresh table (its prefill cache empty); CPU time, which a
    busy shared machine inflates less than wall time."""
    best = float("inf")
    for _ in range(repeat):
        tab = make_table()
        t0 = time.process_time()
        for c in calls:
            tab.time_s(*c)
        best = min(best, time.process_time() - t0)
    return len(calls) / best


def check(tab: StepTable, spec, lay, hw, prof, calls: list[tuple]) -> float:
    """Largest relative gap between the table and step_cost on `calls` (the table's tolerance)."""
    want = step_cost(spec, lay, hw, make_batch(*np.array(calls, dtype=float).T), prof).total_s
    got = np.array([tab.time_s(*c) for c in calls])
    return float(np.max(np.abs(got - want) / want))


def user_run_s(workload, prof, repeat: int = 3) -> float:
    """Best CPU seconds of the simulation `simulate --trace <azure> --policy tp` runs (8 x H200,
    Llama-3.3-70B fp8; the CLI's trace parsing and file writing excluded)."""
    from simulator.cluster.simulate import SimConfig, simulate

    spec, hw = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200")
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        simulate(workload, spec, hw, SimConfig(policy="tp", gpus=8), prof)
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000, help="length of the step stream (the CLI run makes ~20k calls)")
    p.add_argument("--no-cli", action="store_true", help="skip the end-to-end simulate run")
    args = p.parse_args()
    spec, hw, lay = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200"), ParallelLayout(tp=8)
    calls = step_stream(args.steps)
    chunks = sorted({c[:4] for c in calls if c[0]})
    distinct = [c + (0, 0.0) for c in chunks]
    decodes = list(range(1, MAX_SEQS + 1))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {len(calls):,} steps, "
          f"{len(distinct):,} distinct prefill chunks (trace: {trace_path() or 'absent, log-normal lengths'})")
    for pname, prof in (("datasheet", None), ("calibrated", default_profile(hw))):
        def make_table():
            return StepTable(spec, lay, hw, prof, max_tokens=BUDGET + MAX_SEQS, max_seqs=MAX_SEQS)

        gap = check(make_table(), spec, lay, hw, prof, calls[:2000])
        assert gap < 1e-9, f"{pname}: StepTable differs from step_cost by {gap:.2e} (relative)"
        stream = calls_per_s(make_table, calls)
        pre = calls_per_s(make_table, distinct)
        tab = make_table()
        t0 = time.process_time()
        for n in decodes:
            tab.decode_affine(n)
        aff = len(decodes) / (time.process_time() - t0)
        print(f"{pname:10s} time_s: stream {stream:>9,.0f} calls/s, distinct prefill chunks {pre:>9,.0f} "
              f"calls/s; decode_affine {aff:>9,.0f} calls/s (max gap to step_cost {gap:.1e})")
    if not args.no_cli and trace_path() is not None:
        from simulator.workload import load_trace

        workload = load_trace(trace_path())
        for pname, prof in (("datasheet", None), ("calibrated", default_profile(hw))):
            print(f"{pname:10s} simulate --trace azure conv --policy tp: {user_run_s(workload, prof):.2f} CPU s")


if __name__ == "__main__":
    main()
