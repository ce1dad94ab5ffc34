"""Issue 16: the replay client against `kernels.serve --http` vs the in-process run of the same trace.

    python benchmarks/http_replay.py [--rounds 4] [--layers 16] [--nproc 1]

Each round runs the trace twice on the same reference loop: in process (`python -m kernels.serve
--trace T`) and served over HTTP (`kernels.serve --http PORT`, driven by `simulate replay --url`),
in alternating order (A B, B A, ...) so the shared 2-core machine's drift between runs does not
fall on one side. Prints per round the median TTFT / TPOT of both, then the pooled medians (every
request of every round) and their relative difference: issue 16's "TTFT/TPOT within 20% of the
in-process run", measured with the run-to-run noise averaged out (two in-process runs of this
trace minutes apart differ by up to ~25% here: one pair of runs cannot show a 20% bound).
Also: the HTTP path's own cost (client-side minus server-side TTFT of the same requests, from the
server's --out records; median < 5 ms). Exits 1 when a figure is outside its bound (for a human: no test
runs this script).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.dist import free_port  # noqa: E402
from kernels.serve.http import wait_healthy  # noqa: E402
from simulator.apps.replay.cli import main as replay_main  # noqa: E402

TRACE = "synthetic:gamma?rate=10&burstiness=0.5&n=30&input=48&output=16&seed=3"  # the test's trace
BOUND = 0.20  # issue 16
# the HTTP path's own cost on TTFT (client minus server, median): ~2 ms seen; tests/test_kernels_serve_http.py
# asserted < 5 ms and the medians within 20% / 50% of one in-process run until issue 38 moved them here
PATH_BOUND_MS = 5.0


def served(args: list, trace: str, d: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(client-side records, server-side records) of one HTTP run."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "kernels.serve", "--http", str(port), *args, "--out", str(d / "server")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_healthy(url, proc, timeout_s=120.0)
        rc = replay_main(["--url", url, "--trace", trace, "--out", str(d / "replayed")])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if rc != 0 or proc.returncode != 0:
        raise RuntimeError(f"replay rc {rc}, server rc {proc.returncode}: {err.decode()[-2000:]}")
    return pd.read_parquet(d / "replayed" / "requests.parquet"), pd.read_parquet(d / "server" / "requests.parquet")


def in_process(args: list, trace: str, d: Path) -> pd.DataFrame:
    subprocess.run([sys.executable, "-m", "kernels.serve", *args, "--trace", trace, "--out", str(d / "inproc")],
                   cwd=ROOT, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return pd.read_parquet(d / "inproc" / "requests.parquet")


def tpot_ms(r: pd.DataFrame) -> np.ndarray:
    r = r[r["generated_tokens"] > 1]
    return r["tpot_ms"].to_numpy()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--layers", type=int, default=16, help="tiny model layers (16: a step ~15-20 ms here)")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--strategy", default="tp")
    p.add_argument("--trace", default=TRACE)
    a = p.parse_args(argv)
    args = ["--strategy", a.strategy, "--nproc", str(a.nproc), "--model", "tiny", "--layers", str(a.layers)]
    pooled = {"inproc": [], "replayed": [], "server": []}
    print(f"{a.rounds} rounds of {a.trace} on {a.strategy} x {a.nproc} (tiny, {a.layers} layers)")
    print(f"{'round':>5} {'order':>14} | {'TTFT in-proc':>12} {'replayed':>9} {'server':>7} | "
          f"{'TPOT in-proc':>12} {'replayed':>9} {'server':>7} | HTTP path ms")
    with tempfile.TemporaryDirectory(prefix="http-replay-") as tmp:
        for i in range(a.rounds):
            d = Path(tmp) / f"r{i}"
            first_http = i % 2 == 1
            if first_http:
                rep, srv = served(args, a.trace, d)
            inp = in_process(args, a.trace, d)
            if not first_http:
                rep, srv = served(args, a.trace, d)
            if list(rep["output_tokens"]) != list(inp["generated_tokens"]):
                raise SystemExit(f"round {i}: per-request output tokens differ from the in-process run")
            runs = {"inproc": inp, "replayed": rep, "server": srv}
            for k, r in runs.items():
                pooled[k].append(r)
            med = {k: (np.median(r["ttft_ms"]), np.median(tpot_ms(r))) for k, r in runs.items()}
            path = np.median(np.sort(rep["ttft_ms"].to_numpy()) - np.sort(srv["ttft_ms"].to_numpy()))
            print(f"{i:>5} {'http, in-proc' if first_http else 'in-proc, http':>14} | {med['inproc'][0]:>12.1f} "
                  f"{med['replayed'][0]:>9.1f} {med['server'][0]:>7.1f} | {med['inproc'][1]:>12.1f} "
                  f"{med['replayed'][1]:>9.1f} {med['server'][1]:>7.1f} | {path:.2f}")
    allr = {k: pd.concat(v) for k, v in pooled.items()}
    out = []
    paths = [np.median(np.sort(r["ttft_ms"].to_numpy()) - np.sort(s["ttft_ms"].to_numpy()))
             for r, s in zip(pooled["replayed"], pooled["server"])]
    out.append(-1.0 < float(np.median(paths)) < PATH_BOUND_MS)
    print(f"HTTP path on TTFT: median over rounds {np.median(paths):.2f} ms (bound {PATH_BOUND_MS:g} ms)")
    for name, f in (("median TTFT ms", lambda r: np.median(r["ttft_ms"])), ("median TPOT ms", lambda r: np.median(tpot_ms(r)))):
        m, r = f(allr["inproc"]), f(allr["replayed"])
        err = (r - m) / m
        out.append(abs(err) <= BOUND)
        print(f"pooled {name}: in-process {m:.2f}, replayed over HTTP {r:.2f} ({err:+.1%}; bound {BOUND:.0%})")
    print("within the bounds" if all(out) else "OUTSIDE the bounds")
    return 0 if all(out) else 1  # for a human to read: no test runs this


if __name__ == "__main__":
    sys.exit(main())
