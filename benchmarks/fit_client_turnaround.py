"""Fit simulator.apps.validate.harness.AIPERF_TURNAROUND_S (response end -> aiperf's next request from that client)
on the H100 aiperf rows and print the fit.

Fitted on the TTFT of the aiperf vLLM 0.12 rows (Qwen3-32B); held out: the aiperf TRT-LLM and SGLang rows
(same benchmark client, other engines). TPOT is printed beside: the turnaround moves how clustered the
closed loop runs, so both means move, and a fit that bought TTFT with TPOT would show.
Usage: python benchmarks/fit_client_turnaround.py [--measurements CSV] [--jobs N] [--ms 0 10 20 30 50]  (~6 min)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import fit_args, replay_sweep  # noqa: E402
from simulator.apps.validate import harness as H  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402


def _line(name: str, done: list) -> str:
    ttft = np.array([r.ttft_rel_err for r in done])
    tpot = np.array([r.tpot_rel_err for r in done])
    return (f"{name} ({len(done)} rows) TTFT median |err| {np.median(np.abs(ttft)):.1%} (bias {np.median(ttft):+.1%}),"
            f" TPOT {np.median(np.abs(tpot)):.1%} (bias {np.median(tpot):+.1%})")


def main() -> None:
    a = fit_args(__doc__, "ms", [0, 10, 20, 30, 50], "milliseconds")
    found, _ = cases(read_measurements(a.measurements))
    rows = [c for c in found if c.policy == "layout" and H.source_of(c) == "aic"]
    out = replay_sweep(rows, "AIPERF_TURNAROUND_S", [ms * 1e-3 for ms in a.ms], a.jobs)
    print(f"{len(rows)} aiperf aggregated rows; fitted: vLLM 0.12; held out: TRT-LLM and SGLang")
    for ms, done in zip(a.ms, out):
        fit = [r for r in done if r.case.backend == "vllm"]
        held = [r for r in done if r.case.backend != "vllm"]
        print(f"{ms:5.0f} ms: fitted {_line('vLLM', fit)}; held out {_line('TRT-LLM + SGLang', held)}")
    print(f"simulator.apps.validate.harness.AIPERF_TURNAROUND_S = {H.AIPERF_TURNAROUND_S * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
