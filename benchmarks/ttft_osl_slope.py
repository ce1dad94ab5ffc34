"""Does a run's measured TTFT grow with its output length? Per group of the measured files (backend, model, GPU,
aggregated rows), within each cell of equal layout, ISL and concurrency C run at three or more OSLs, the slope of
measured TTFT on OSL x TPOT / C (a request's life over C: the mean time between two completions of the closed
loop). 0: TTFT does not depend on how long the others run; 1: every request waits one inter-completion interval
before its first token, as if it could only start when another request ends.

    python benchmarks/ttft_osl_slope.py [--measurements FILE ...]

Reads measured columns only (no simulation); needs ../shared (docs/fidelity.md, "Open residuals").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._shared import shared_dir  # noqa: E402

FILES = ("silicon_h100_sxm.csv", "silicon_h200_sxm.csv")


def slopes(df: pd.DataFrame) -> pd.DataFrame:
    """One row per group with cells: cell count and the slopes' quartiles."""
    d = df[df["mode"] == "agg"].copy()
    d["life_over_c"] = d["osl"] * d["silicon_tpot_ms"] / d["silicon_concurrency"]
    d["layout"] = [f"{t}/{e}/{a}" for t, e, a in zip(d["tp_size"], d["moe_ep_size"], d["attention_dp_size"])]
    out = []
    for (backend, model, system), g in d.groupby(["backend", "model_path", "system"]):
        cells = [np.polyfit(c["life_over_c"], c["silicon_ttft_ms"], 1)[0]
                 for _, c in g.groupby(["layout", "isl", "silicon_concurrency"]) if c["osl"].nunique() >= 3]
        if cells:
            q = np.percentile(cells, [25, 50, 75])
            out.append(dict(backend=backend, model=model, system=system, cells=len(cells), q25=q[0], median=q[1],
                            q75=q[2]))
    return pd.DataFrame(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measurements", nargs="*", help="silicon CSVs (default: ../shared/data/e2e's two)")
    args = p.parse_args()
    files = args.measurements
    if not files:
        shared = shared_dir()
        if shared is None:
            raise SystemExit("../shared/data absent: give --measurements")
        files = [shared / "data" / "e2e" / f for f in FILES]
    df = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    print(slopes(df).to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
