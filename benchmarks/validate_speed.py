"""How long `simulate validate` takes on the measured files (issue 37: both in <= 5 min with --jobs 2 on the
2-core dev machine, no row over 30 s).

1. Each file as a user runs it (`python -m simulator.apps.cli validate --measurements F --jobs 2 --worst 0`, a
   subprocess), its wall time, then the total.
2. With --rows: every row replayed one at a time in this process, timed, and the slowest listed (a row's own
   cost, without a second process sharing the machine).

    python benchmarks/validate_speed.py [--jobs 2] [--rows] [--files h100 h200]

Needs ../shared (the files are not in the repository); says so and exits 0 without it.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import REPO, shared_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rows", action="store_true", help="also time every row in-process and list the slowest")
    ap.add_argument("--files", nargs="+", default=["h100", "h200"])
    a = ap.parse_args()
    shared = shared_dir()
    if shared is None:
        print("skipped: ../shared (the measured files) is absent")
        return 0
    total = 0.0
    for name in a.files:
        f = shared / "data" / "e2e" / f"silicon_{name}_sxm.csv"
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "simulator.apps.cli", "validate", "--measurements", str(f),
                              "--jobs", str(a.jobs), "--worst", "0"], cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        total += wall
        head = out.stdout.splitlines()[0] if out.stdout else out.stderr.strip().splitlines()[-1]
        print(f"{name}: {wall:6.1f} s wall (--jobs {a.jobs}): {head}")
    print(f"all files: {total:.1f} s ({total / 60:.2f} min; target <= 5 min)")
    if a.rows:
        from simulator.apps.validate.replay import replay
        from simulator.apps.validate.rows import cases, read_measurements

        times = []
        for name in a.files:
            found, _ = cases(read_measurements(shared / "data" / "e2e" / f"silicon_{name}_sxm.csv"))
            for c in found:
                t0 = time.perf_counter()
                try:
                    replay(c)
                except ValueError:
                    pass
                times.append((time.perf_counter() - t0, c.id))
        times.sort(reverse=True)
        print(f"slowest rows of {len(times)} (one process; target <= 30 s each):")
        for t, rid in times[:5]:
            print(f"  {t:6.2f} s  {rid}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
