"""Sweep Framework.seq_overhead_s (time each sequence adds to a step, `--seq-overhead-us`) per framework and print
the fit; not a constant in force (the presets keep 0): the lead of docs/fidelity.md, measured.

Per framework: its aggregated aiperf rows (aiconfigurator's gap-analysis harness, H100 and H200: the rows whose
concurrency spans 4-512) are the fit rows, TPOT median |err| at each value; its other aggregated rows (InferenceX)
are printed held out at 0 and at the best value. Usage: python benchmarks/fit_seq_overhead.py [--jobs N]
[--us 0 15 30 45] (~4.5 min with --jobs 2). Needs ../shared.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import e2e_h100_csv  # noqa: E402
from simulator.apps.validate import harness as H  # noqa: E402
from simulator.apps.validate.pool import pool_map  # noqa: E402
from simulator.apps.validate.replay import replay  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402

FRAMEWORKS = ("vllm", "sglang", "trtllm")


def _one(item):
    us, case = item
    try:
        return replay(case, seq_overhead_us=us)
    except ValueError:  # (skipped by validate too)
        return None


def _tpot(done: list) -> tuple[float, float, int]:
    e = np.array([r.tpot_rel_err for r in done if r is not None])
    return float(np.median(np.abs(e))), float(np.median(e)), len(e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    h100 = e2e_h100_csv()
    ap.add_argument("--measurements", nargs="+", default=[str(h100), str(h100.with_name("silicon_h200_sxm.csv"))])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--us", type=float, nargs="+", default=[0.0, 15.0, 30.0, 45.0], help="values to try (us)")
    a = ap.parse_args()
    found = []
    for path in a.measurements:
        found += cases(read_measurements(path))[0]
    agg = [c for c in found if c.policy == "layout"]
    for fw in FRAMEWORKS:
        fit = [c for c in agg if c.backend == fw and H.source_of(c) == "aic"]
        held = [c for c in agg if c.backend == fw and H.source_of(c) != "aic"]
        if not fit:
            continue
        out = pool_map(_one, [(us, c) for us in a.us for c in fit], a.jobs)
        errs = [_tpot(out[k * len(fit):(k + 1) * len(fit)]) for k in range(len(a.us))]
        best = a.us[int(np.argmin([e[0] for e in errs]))]
        print(f"{fw}: {len(fit)} aiperf rows fitted, {len(held)} other aggregated rows held out")
        for us, (med, bias, n) in zip(a.us, errs):
            print(f"  {us:5.1f} us: fitted TPOT median |err| {med:.1%} (bias {bias:+.1%}, {n} rows)")
        if held:
            ho = pool_map(_one, [(us, c) for us in (0.0, best) for c in held], a.jobs)
            for k, us in enumerate((0.0, best)):
                med, bias, n = _tpot(ho[k * len(held):(k + 1) * len(held)])
                print(f"  held out at {us:5.1f} us: TPOT median |err| {med:.1%} (bias {bias:+.1%}, {n} rows)")
        print(f"  best {best:g} us")


if __name__ == "__main__":
    main()
