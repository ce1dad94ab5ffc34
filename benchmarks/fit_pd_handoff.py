"""Fit simulator.apps.validate.harness.SGLANG_PD_HANDOFF_S (transfer end -> first token, SGLang 0.5.8 PD under Dynamo)
on the H100 SGLang DeepSeek disagg rows and print the fit.

Fitted on the TTFT of the rows at C=1 (an idle deployment: no queue, no decode load), replayed under the max-tp
recipe, the first of those that ran there (simulator/apps/validate/recipes.py; the rows do not say which ran);
every other SGLang DeepSeek row is printed as held out.
Usage: python benchmarks/fit_pd_handoff.py [--measurements CSV] [--jobs N] [--ms 0 70 100 140 180]  (~2 min)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import fit_args, replay_sweep  # noqa: E402
from simulator.apps.validate import harness as H  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402


def main() -> None:
    a = fit_args(__doc__, "ms", [0, 70, 100, 140, 180], "milliseconds")
    found, _ = cases(read_measurements(a.measurements))
    rows = [c for c in found if c.backend == "sglang" and c.policy == "disagg" and H.dsr1_choices(c)]
    out = replay_sweep(rows, "SGLANG_PD_HANDOFF_S", [ms * 1e-3 for ms in a.ms], a.jobs)
    print(f"{len(rows)} SGLang DeepSeek disagg rows; fitted: C=1; held out: the rest")
    for ms, done in zip(a.ms, out):
        fit = [r.ttft_rel_err for r in done if r.case.concurrency == 1]
        held = [r.ttft_rel_err for r in done if r.case.concurrency != 1]
        print(f"{ms:5.0f} ms: fitted TTFT ({len(fit)} rows) median |err| {np.median(np.abs(fit)):.1%} "
              f"(bias {np.median(fit):+.1%}); held out ({len(held)}) {np.median(np.abs(held)):.1%} "
              f"(bias {np.median(held):+.1%})")
    print(f"simulator.apps.validate.harness.SGLANG_PD_HANDOFF_S = {H.SGLANG_PD_HANDOFF_S * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
