"""Write docs/fidelity_tables.md: the error tables of `simulate validate` on the measured H100 and H200 files, generated
(never hand-edited), with the setup notes and skip reasons per file and, with --holdout, the held-out tables.

    python benchmarks/fidelity_tables.py [--jobs 2] [--holdout model harness] [--out docs/fidelity_tables.md]

~2 min for both files with --jobs 2 on the 2-core dev machine (plus ~2 min per --holdout key). Needs ../shared.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import REPO, shared_dir  # noqa: E402
from simulator.apps.validate import report  # noqa: E402
from simulator.apps.validate.cli import run_rows  # noqa: E402
from simulator.apps.validate.holdout import holdout  # noqa: E402
from simulator.apps.validate.rows import Skip, cases, read_measurements  # noqa: E402

COLS = ("group", "rows", "skipped", "TTFT med", "p90", "bias", "TPOT med", "p90", "bias")


def _pct(v) -> str:
    return "-" if v is None or v != v else f"{100 * v:.1f}%"


def _table(rows: list[dict]) -> list[str]:
    out = ["| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    for r in rows:
        out.append(f"| {r['group']} | {r['rows']} | {r['skipped']} | {_pct(r['ttft_median_abs_rel_err'])} | "
                   f"{_pct(r['ttft_p90_abs_rel_err'])} | {_pct(r['ttft_median_rel_err'])} | "
                   f"{_pct(r['tpot_median_abs_rel_err'])} | {_pct(r['tpot_p90_abs_rel_err'])} | "
                   f"{_pct(r['tpot_median_rel_err'])} |")
    return out


def _holdout_table(key: str, rows: list[dict], total: dict) -> list[str]:
    out = [f"| held out ({key}) | rows | TTFT in-sample | held out | TPOT in-sample | held out | refit without it |",
           "|---|---|---|---|---|---|---|"]
    for r in rows + [total]:
        refit = ", ".join(f"{k} = {v:g}" for k, v in r["refit"].items()) or "-"
        out.append(f"| {r['group']} | {r['rows']} | {_pct(r['ttft_in'])} | {_pct(r['ttft_held'])} | "
                   f"{_pct(r['tpot_in'])} | {_pct(r['tpot_held'])} | {refit} |")
    out.append(f"\nheld-out / in-sample over all rows: TTFT {total['ttft_held'] / total['ttft_in']:.2f}x, "
               f"TPOT {total['tpot_held'] / total['tpot_in']:.2f}x")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--holdout", nargs="*", default=[], choices=("model", "backend", "harness", "system"))
    ap.add_argument("--out", default=str(REPO / "docs" / "fidelity_tables.md"))
    a = ap.parse_args()
    shared = shared_dir()
    if shared is None:
        print("skipped: ../shared (the measured files) is absent")
        return 0
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    lines = ["# Fidelity tables (generated)", "",
             f"Written by `python benchmarks/fidelity_tables.py{' --holdout ' + ' '.join(a.holdout) if a.holdout else ''}`"
             f" at commit {rev.strip() or '?'}; do not edit by hand. Median and p90 of |simulated / measured - 1| "
             "of mean TTFT and mean TPOT per row; bias = the median signed error. Method and history: "
             "docs/fidelity.md.", ""]
    every, dropped = [], []
    for name in ("h100", "h200"):
        f = shared / "data" / "e2e" / f"silicon_{name}_sxm.csv"
        t0 = time.perf_counter()
        found, skipped = cases(read_measurements(f), str(f))
        results = run_rows(found, a.jobs)
        done = [r for r in results if not isinstance(r, Skip)]
        skipped += [r for r in results if isinstance(r, Skip)]
        wall = time.perf_counter() - t0
        lines += [f"## {name.upper()}: `simulate validate --measurements ../shared/data/e2e/{f.name} --jobs {a.jobs}`",
                  "", f"{len(done)} rows replayed, {len(skipped)} skipped, {wall:.0f} s here.", ""]
        lines += _table(report.summary(done, skipped)) + [""]
        notes = Counter(report.note_key(r.unknown) for r in done if r.unknown)
        if notes:
            lines += ["Setup notes (rows whose setup is not fully recorded, or whose columns disagree with their "
                      "launch script: what the replay does):", ""]
            lines += [f"- {n} rows: {why}" for why, n in notes.most_common()] + [""]
        reasons = Counter(s.reason for s in skipped)
        if reasons:
            lines += ["Skipped:", ""] + [f"- {n}: {why[:160]}" for why, n in reasons.most_common()] + [""]
        every += done
        dropped += skipped
        print(f"{name}: {len(done)} replayed, {len(skipped)} skipped ({wall:.0f} s)")
    lines += ["## H100 + H200 together", "", f"{len(every)} rows replayed, {len(dropped)} skipped.", ""]
    lines += _table(report.summary(every, dropped)[:3]) + [""]
    if a.holdout:
        lines += ["## Held out (H100 + H200 together)", "",
                  "Every FITTED constant (simulator/apps/validate/fits.py) refitted by its sweep on the rows outside "
                  "one group, the group predicted with the refit (`simulate validate --measurements H100 H200 "
                  "--holdout KEY`).", ""]
    for key in a.holdout:
        rows, total = holdout(every, key, a.jobs)
        lines += _holdout_table(key, rows, total) + [""]
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
