"""`simulate validate`: replay measured serving runs and report the model's error.

    simulate validate --measurements ../shared/data/e2e/silicon_h100_sxm.csv [--format table|json]
                      [--plot PNG] [--out CSV] [--jobs N] [--worst K] [--match TEXT]
                      [--framework-from-row | --framework vllm|sglang|trtllm]
                      [--holdout model|backend|harness|system]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

from tqdm import tqdm

from perfmodel.layout import LayoutError
from simulator.results.files import atomic_path, check_writable_file
from simulator.workload import TraceError
from simulator.workload.cli import DefaultsHelpFormatter
from . import report
from .holdout import holdout, table
from .pool import pool_map
from .rows import Skip, cases, read_measurements
from .replay import replay


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate validate", formatter_class=DefaultsHelpFormatter, description="Replay every aggregated row of a measured "
                                "runs file (aiconfigurator's silicon CSV schema) as its benchmark ran, and report "
                                "the error of mean TTFT and TPOT by backend x model x system (docs/fidelity.md).")
    p.add_argument("--measurements", required=True, nargs="+", help="CSV(s) of measured runs, replayed and reported "
                   "together (e.g. ../shared/data/e2e/silicon_h100_sxm.csv ../shared/data/e2e/"
                   "silicon_h200_sxm.csv)")
    p.add_argument("--framework-from-row", action="store_true", default=True,
                   help="replay each row under its own framework's scheduler and defaults (the default)")
    p.add_argument("--framework", choices=("vllm", "sglang", "trtllm"),
                   help="replay every row under this framework instead (same benchmark protocol): how much of "
                        "the error the framework model explains")
    p.add_argument("--format", default="table", choices=("table", "json"), help="stdout format (json: only JSON "
                   "on stdout)")
    p.add_argument("--plot", help="write a predicted-vs-measured PNG here")
    p.add_argument("--out", help="write the per-row CSV (measured, simulated, errors) here")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="rows replayed in parallel (default: "
                   "the CPU count)")
    p.add_argument("--worst", type=int, default=5, help="rows with the largest TTFT error to list (table)")
    p.add_argument("--match", help="only rows whose id contains this text")
    p.add_argument("--holdout", choices=("model", "backend", "harness", "system"),
                   help="also refit every FITTED constant (fits.py) without each group of this key and report the "
                        "group's error when held out, beside the in-sample error (holdout.py)")
    return p


def _one(item):
    """Replay one (case, framework); a Skip when the model or layout cannot run (reason kept)."""
    case, framework = item
    try:
        return replay(case, framework=framework)
    except (LayoutError, ValueError) as e:
        return Skip(case.row, case.id, case.backend, case.model, f"{type(e).__name__}: {e}", case.group)


def run_rows(found, jobs: int, progress=None, framework: str | None = None) -> list:
    """Replayed or Skip per case, in order (processes when jobs > 1)."""
    return pool_map(_one, [(c, framework) for c in found], jobs, progress)


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        for flag, path in (("--out", args.out), ("--plot", args.plot)):
            if path:  # before any replay: a path that cannot be written is one line now, not after minutes
                check_writable_file(path, flag)
        found, skipped = [], []
        for path in args.measurements:
            got, skip = cases(read_measurements(path), path)
            found, skipped = found + got, skipped + skip
        if args.match:
            found = [c for c in found if args.match in c.id]
            skipped = [s for s in skipped if args.match in s.id]
        if args.match and not found and not skipped:
            raise ValueError(f"--match {args.match!r}: no row id of {' '.join(args.measurements)} contains it")
        if args.jobs < 1:
            raise ValueError(f"--jobs {args.jobs} must be >= 1")
    except (TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    with tqdm(total=len(found), file=sys.stderr, unit="row", desc="validate", delay=2) as bar:
        results = run_rows(found, args.jobs, bar.update, args.framework)
    done = [r for r in results if not isinstance(r, Skip)]
    skipped += [r for r in results if isinstance(r, Skip)]
    rows = report.summary(done, skipped)
    if args.out:
        with atomic_path(args.out) as tmp:  # complete or absent, never a cut-off CSV
            report.frame(done).to_csv(tmp, index=False)
    if args.plot:
        from .plot import scatter  # matplotlib (~0.2 s) only for --plot: validate/plot.py imports it at its top

        fig = scatter(report.frame(done))
        with atomic_path(args.plot) as tmp:
            fig.savefig(tmp, dpi=110, format=os.path.splitext(args.plot)[1].lstrip(".") or "png")
        print(f"plot: {args.plot}", file=sys.stderr)
    if args.format == "json":  # a group with no replayed row has no error: null, not NaN (not JSON)
        clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]
        print(json.dumps(clean, indent=2, allow_nan=False))
        return 0
    print(f"{' '.join(args.measurements)}: {len(done)} rows replayed, {len(skipped)} skipped")
    print(report.table(rows))
    # rows whose setup is not (fully) recorded: replayed under defaults / the first recipe
    for why, n in Counter(report.note_key(r.unknown) for r in done if r.unknown).most_common():
        print(f"setup note, {n} rows: {why}")
    for why, n in Counter(s.reason for s in skipped).most_common():
        print(f"skipped {n}: {why}")
    if args.holdout and done:
        with tqdm(file=sys.stderr, unit="replay", desc="holdout", delay=2) as bar:
            rows_h, total = holdout(done, args.holdout, args.jobs, bar.update)
        print(table(args.holdout, rows_h, total))
    if done and args.worst > 0:
        fr = report.frame(done)
        worst = fr.reindex(fr["ttft_rel_err"].abs().sort_values(ascending=False).index).head(args.worst)
        print("worst TTFT rows:")
        for _, r in worst.iterrows():
            print(f"  {r['id']}: measured {r['ttft_ms_measured']:.0f} ms, simulated {r['ttft_ms_simulated']:.0f} ms "
                  f"({100 * r['ttft_rel_err']:+.0f}%)")
    return 0
