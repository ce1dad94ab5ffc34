"""Speed of `simulate recommend` on the Azure 2023 conversation trace: Llama-3.3-70B on 8 x H200,
TTFT <= 2000 ms and TPOT <= 100 ms for 90% of requests. Prints candidates generated, dropped, pruned
(by reason), simulated, the winner and the wall time. `--exhaustive`: also simulate every candidate
and check that the pruned search picked the same winner and that no bound was below a simulated result.

    python benchmarks/recommend_speed.py [--trace FILE] [--workers N] [--nodes K] [--candidates LIST]
        [--executor local|ray] [--exhaustive]

Default candidates: static, dynamic and disagg (simulate recommend's default).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import azure_conv_trace  # noqa: E402


def main() -> int:
    from simulator.apps.recommend.core import recommend
    from simulator.apps.recommend.rank import key
    from simulator.workload import load_trace

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(azure_conv_trace()))
    p.add_argument("--model", default="llama-3.3-70b")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--gpus", type=int, help="GPUs in all (default: 8 on one node, every GPU of --nodes)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--candidates", default="static,dynamic,disagg")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--exhaustive", action="store_true")
    a = p.parse_args()
    if not Path(a.trace).exists() and not a.trace.startswith("synthetic:"):
        print(f"trace {a.trace} not found: skipped")
        return 0
    t0 = time.perf_counter()
    wl = load_trace(a.trace)
    kw = dict(model=a.model, hardware=a.hardware, gpus=a.gpus, nodes=a.nodes, slo_ttft_ms=a.slo_ttft_ms,
              slo_tpot_ms=a.slo_tpot_ms, workers=a.workers, executor=a.executor,
              kinds=tuple(k for k in a.candidates.split(",") if k))
    res = recommend(wl, **kw)
    wall = time.perf_counter() - t0
    c, w = res["counts"], res["winner"]
    print(f"trace: {a.trace} ({len(wl)} requests over {res['setup']['trace_span_s']:.0f} s), {a.model} on "
          f"{res['setup']['gpus']} x {a.hardware} ({a.nodes} node{'s' if a.nodes > 1 else ''}), "
          f"SLO TTFT {a.slo_ttft_ms:g} ms / TPOT {a.slo_tpot_ms:g} ms (p90), "
          f"{a.workers} workers ({a.executor}), {os.cpu_count()} CPUs")
    print(f"generated {c['generated']}, dropped {c['dropped']}, pruned {c['pruned']} {c['pruned_by_reason']}, "
          f"simulated {c['simulated']}")
    kinds = {}
    for r in res["ranking"]:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(f"simulated by kind: {kinds}")
    print(f"winner: {w['label']} (met {res['met']}, goodput/GPU {w['goodput_per_gpu']:.3f} req/s, "
          f"p90 TTFT {w['p90_ttft_ms']:.1f} ms)")
    print(f"wall time: {wall:.1f} s (recommend {res['wall_s']:.1f} s)")
    if a.exhaustive:
        t1 = time.perf_counter()
        full = recommend(wl, prune=False, **kw)
        fw = full["winner"]
        print(f"exhaustive: {full['counts']['simulated']} simulated in {time.perf_counter() - t1:.1f} s, winner "
              f"{fw['label']} ({'same' if key(fw) == key(w) else 'DIFFERENT'})")
        bad = [r["label"] for r in full["ranking"] if r["good"] > r["bound_good"] + 1e-9]
        print(f"bounds below the simulated goodput: {bad or 'none'}")
        return int(key(fw) != key(w) or bool(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
