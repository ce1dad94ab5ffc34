"""Fit simulator.apps.validate.harness.DEEPEP_NORMAL_CALL_S (DeepEP normal-mode cost per inter-node MoE all_to_all)
on the H100 TRT-LLM DeepSeek disagg rows and print the fit.

Fitted on the TPOT of the rows whose concurrency only a plain (no MTP) recipe with DEP16 decode workers ran
(simulator/apps/validate/recipes.py); the rows of MTP recipes on DEP16 are printed as held out.
Usage: python benchmarks/fit_deepep_call.py [--measurements CSV] [--jobs N] [--us 0 100 150 200 250]  (~1 min)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import fit_args, replay_sweep  # noqa: E402
from simulator.apps.validate import harness as H  # noqa: E402
from simulator.apps.validate.recipes import TRTLLM_DSR1_H100  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402


def main() -> None:
    a = fit_args(__doc__, "us", [0, 100, 150, 200, 250], "microseconds per call")
    found, _ = cases(read_measurements(a.measurements))
    dep, fit_ids = [], set()
    for c in found:
        recs = TRTLLM_DSR1_H100.get((c.isl, c.osl, c.concurrency)) if c.backend == "trtllm" else None
        if c.policy != "disagg" or not recs or len(recs) > 1:  # (two recipes: which one ran is not known)
            continue
        only = recs[0]
        if only.gen_attention_dp:
            dep.append(c)
            if only.mtp == 0:
                fit_ids.add(c.id)
    out = replay_sweep(dep, "DEEPEP_NORMAL_CALL_S", [us * 1e-6 for us in a.us], a.jobs)
    print(f"{len(fit_ids)} fitted rows (plain DEP16 recipes), {len(dep) - len(fit_ids)} held out (MTP on DEP16)")
    for us, done in zip(a.us, out):
        fit = [r.tpot_rel_err for r in done if r.case.id in fit_ids]
        held = [r.tpot_rel_err for r in done if r.case.id not in fit_ids]
        print(f"{us:5.0f} us: fitted TPOT median |err| {np.median(np.abs(fit)):.1%} (bias {np.median(fit):+.1%}); "
              f"held out {np.median(np.abs(held)):.1%} (bias {np.median(held):+.1%})")
    print(f"simulator.apps.validate.harness.DEEPEP_NORMAL_CALL_S = {H.DEEPEP_NORMAL_CALL_S * 1e6:.0f} us")


if __name__ == "__main__":
    main()
