"""Launcher: run one strategy's prefill + decode script and print per-step times and bytes.

    python -m kernels.run --strategy shift --world-size 4 --model tiny --check
    torchrun --nproc-per-node 4 -m kernels.run --strategy tp --model tiny --check   # NCCL on GPUs

On CPU it spawns --world-size gloo workers; under torchrun each process is one rank. --check
also runs the single-device model on the same inputs and exits 1 when the largest absolute
logit difference exceeds --tolerance (or a sequence's logits are missing).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

from perfmodel.layout import LayoutError, ParallelLayout

from .checks import expected_bytes, make_spec, run_check
from .disagg import layouts as disagg_layouts
from .engines import STRATEGIES, default_layout

TOLERANCE = 2e-5  # fp32 logits of O(1): see docs/kernels.md for why


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m kernels.run", description=__doc__.splitlines()[0])
    p.add_argument("--strategy", required=True, choices=STRATEGIES)
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 2)))
    p.add_argument("--model", help="a perfmodel preset (default: tiny; tiny-moe for ep)")
    p.add_argument("--layout", help="e.g. sp=2,tp=2 (default: the strategy's layout on --world-size)")
    p.add_argument("--script", default=None, choices=["mixed", "even", "seesaw", "dp", "flying"],
                   help="request script (default: the strategy's)")
    # Script-scale defaults: the request scripts are 10-14 steps of at most 86 tokens, so the serving defaults
    # (perfmodel.knobs: Shift 256 tokens, SiDP 16 decisions) would never switch within them.
    p.add_argument("--threshold", type=int, default=8, help="Shift: run the base (SP) model above this many "
                   "tokens per step (serving default: perfmodel.knobs.SHIFT_THRESHOLD_TOKENS)")
    p.add_argument("--sidp-mode", default="auto", choices=["auto", "was", "cas"])
    p.add_argument("--b-star", type=float, default=2.4, help="SiDP: WaS at or above this batch per replica "
                   "(a test value between the mixed script's decode and prefill steps; for a deployment "
                   "perfmodel.sidp.b_star)")
    p.add_argument("--sidp-hysteresis", type=int, default=1, help="SiDP: switch after the other mode won this "
                   "many decisions running (serving default: perfmodel.knobs.SIDP_HYSTERESIS_DECISIONS)")
    p.add_argument("--prefill-tp", type=int, help="disagg: TP of the prefill ranks (default: world/2)")
    p.add_argument("--decode-tp", type=int, help="disagg: TP of the decode ranks (default: the rest)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="compare logits with the single-device model")
    p.add_argument("--tolerance", type=float, default=TOLERANCE)
    return p.parse_args(argv)


def check_kwargs(a) -> dict:
    """run_check keyword arguments for the parsed command line."""
    a.model = a.model or ("tiny-moe" if a.strategy == "ep" else "tiny")
    scripts = {"ep": "even", "seesaw": "seesaw", "dp": "dp", "flying": "flying"}
    kw = dict(strategy=a.strategy, model=a.model, script=a.script or scripts.get(a.strategy, "mixed"),
              seed=a.seed, check=a.check)
    if a.layout:
        kw["layout"] = ParallelLayout.parse(a.layout)
    if a.strategy == "shift":
        kw["threshold"] = a.threshold
    if a.strategy == "disagg":
        kw.update(prefill_tp=a.prefill_tp, decode_tp=a.decode_tp)
    if a.strategy == "sidp":
        kw.update(mode=a.sidp_mode, b_star=a.b_star, hysteresis=a.sidp_hysteresis)
    return kw


def _worker(rank, world_size, kw):
    return run_check(rank, world_size, **kw)


def report(results: list, a, kw) -> int:
    """Print the per-step table (times: slowest rank; bytes: busiest rank) and the verdict."""
    spec = make_spec(a.model)
    layout = kw.get("layout") or (default_layout(a.strategy, len(results)) if a.strategy != "disagg" else
                                  "prefill {} -> decode {}".format(*disagg_layouts(spec, len(results), a.prefill_tp, a.decode_tp)))
    print(f"strategy {a.strategy}  model {a.model}  world {len(results)}  layout {layout}  script {kw['script']}")
    if a.strategy == "shift":
        print(f"shift config tp={layout.sp * layout.tp} in SP_TP order {layout.shift_tp_order()}, "
              f"base config above {a.threshold} tokens per step")
    print("bytes: nccl-tests sizes per step on the busiest rank, measured / perf model (perfmodel.comm)")
    worst, missing = 0.0, []
    for i, st in enumerate(results[0]["steps"]):
        per_rank = [r["steps"][i] for r in results]
        meas, model = {}, {}
        for rank, s in enumerate(per_rank):
            for (op, _), b in s["bytes"].items():
                meas.setdefault(op, [0] * len(results))[rank] += b
            for (op, _), b in expected_bytes(spec, s["parts"], rank).items():
                model.setdefault(op, [0] * len(results))[rank] += b
        cols = "  ".join(f"{op}={max(v):.0f}" + (f"/{max(model[op]):.0f}" if op in model else "")
                         for op, v in sorted(meas.items()) if max(v) > 0) or "-"
        rows = set().union(*(s["rows"] for s in per_rank))
        missing += [(i, sid) for sid in st["seqs"] if sid not in rows]
        diff = max(s["max_diff"] for s in per_rank)
        worst = max(worst, diff) if not math.isnan(diff) else worst
        chk = f"  max|dlogit|={diff:.1e}" if a.check else ""
        print(f"step {i:2d}  {st['mode']:<10s} tokens {st['tokens']:3d}  seqs {len(st['seqs'])}  "
              f"{1e3 * max(s['time_s'] for s in per_rank):7.2f} ms{chk}  {cols}")
    if not a.check:
        return 0
    ok = worst <= a.tolerance and not missing
    print(f"max abs logit difference vs single-device model: {worst:.3e} (tolerance {a.tolerance:.0e})"
          + (f"; missing logits {missing}" if missing else "") + (" OK" if ok else " FAIL"))
    return 0 if ok else 1


def main(argv=None) -> int:
    a = parse(argv)
    try:
        kw = check_kwargs(a)
        spec = make_spec(a.model)
        if a.strategy == "disagg":  # two TP instances: prefill ranks, then decode ranks
            disagg_layouts(spec, a.world_size, a.prefill_tp, a.decode_tp)
        else:
            (kw.get("layout") or default_layout(a.strategy, a.world_size)).validate(spec, a.world_size)
    except (LayoutError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "RANK" in os.environ:  # under torchrun: this process is one rank (NCCL on GPUs)
        import torch.distributed as dist

        from .dist import init
        rank = int(os.environ["RANK"])
        init(rank, int(os.environ["WORLD_SIZE"]))
        res = run_check(rank, dist.get_world_size(), **kw)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, res)
        code = report(gathered, a, kw) if rank == 0 else 0
        dist.destroy_process_group()
        return code
    from .dist import spawn
    return report(spawn(_worker, a.world_size, kw), a, kw)


if __name__ == "__main__":
    sys.exit(main())
