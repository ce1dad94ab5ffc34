"""`simulate recommend`: the best parallelism for a trace under latency SLOs.

    simulate recommend --trace T --model M --hardware H --gpus N [--nodes K] [--gpus-per-node G]
        [--framework F] --slo-ttft-ms X --slo-tpot-ms Y [--slo-percentile 90]
        [--candidates static,dynamic,disagg] [--gpu-hour-usd P] [--top 10] [--workers N]
        [--executor local|ray] [--out DIR] [--plot PNG] [--format table|json]

Every static layout that fits (instances inside a node or on whole nodes), the dynamic policies
(Shift at three thresholds, Flying, Seesaw and SiDP on one node) and disaggregated prefill/decode
splits are bounded in closed form; the ones that can still win are simulated on the trace (the
`simulate` run path) and ranked by SLO goodput per GPU. Exit 0 (also when no candidate meets the SLOs:
`met: false`, the closest ones listed), 2 bad input or a model that fits nothing (one `error:` line).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

from perfmodel.layout import LayoutError
from perfmodel.modelspec import WEIGHT_CHOICES
from simulator.engine.config import FRAMEWORK_ENGINE
from simulator.apps.recommend.candidates import KINDS
from simulator.apps.recommend.core import NoFit, recommend
from simulator.results.files import OutputPathError, check_writable_dir, check_writable_file
from simulator.workload import TraceError
from simulator.workload.cli import DefaultsHelpFormatter, add_trace_args, workload_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate recommend", description=__doc__.split("\n\n")[2],
                                formatter_class=DefaultsHelpFormatter)
    add_trace_args(p, default_trace=None)
    p.add_argument("--model", default="llama-3.3-70b", help="preset, HF id or config.json")
    p.add_argument("--hardware", default="h200", help="hardware preset")
    p.add_argument("--gpus", type=int, help="GPUs in all (default: 8 on one node; every GPU of --nodes x "
                   "--gpus-per-node when either is given)")
    p.add_argument("--nodes", type=int, default=1, help="nodes, joined by the preset's NICs (docs/multinode.md)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs of each node (default: the preset's)")
    p.add_argument("--weights", choices=WEIGHT_CHOICES,
                   help="default: the checkpoint's own format where its config declares one (gpt-oss mxfp4, "
                        "DeepSeek fp8, Kimi-K2.5 int4), else fp8 where the hardware has fp8, else bf16")
    p.add_argument("--profile", help="calibrated profile (default: the hardware's; 'none' = datasheet)")
    p.add_argument("--framework", default="vllm", choices=sorted(FRAMEWORK_ENGINE),
                   help="the framework simulated and whose command is printed: only candidates it can serve are "
                        "searched (Shift and SP: vLLM + ArcticInference only; simulator/apps/recommend/support.py)")
    p.add_argument("--research", action="store_true",
                   help="also search the research policies (Flying, Seesaw, SiDP), which no framework serves: "
                        "a research winner is marked 'research: no <framework> command'")
    p.add_argument("--slo-ttft-ms", type=float, required=True, help="TTFT SLO per request (ms)")
    p.add_argument("--slo-tpot-ms", type=float, required=True, help="TPOT SLO per request (ms)")
    p.add_argument("--slo-percentile", type=float, default=90.0,
                   help="the SLOs are met when this %% of requests meet both")  # %%: argparse formats help
    p.add_argument("--candidates", default=",".join(KINDS), help="comma list of static, dynamic, disagg")
    p.add_argument("--gpu-hour-usd", type=float, help="price of one GPU hour, for cost per million tokens")
    p.add_argument("--top", type=int, default=10, help="rows of the ranked table")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="simulations in parallel")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where simulations run: processes here, or Ray (simulator.apps.sweep.executors)")
    p.add_argument("--no-prune", action="store_true", help="simulate every candidate (exhaustive)")
    p.add_argument("--out", help="directory for recommend.json and ranking.csv")
    p.add_argument("--plot", help="PNG: p90 TTFT vs goodput per GPU, one marker per candidate")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("-v", "--verbose", action="store_true", help="log each candidate dropped, pruned, simulated")
    return p


def _fmt(v, f="{:.1f}"):
    return "-" if v is None else f.format(v)


def table(res: dict, top: int) -> str:
    head = (f"{'#':>2} {'candidate':30} {'met':>3} {'good/GPU/s':>10} {'attain':>6} {'p90 TTFT':>9} "
            f"{'p90 TPOT':>8} {'tok/s/GPU':>9} {'$/Mtok':>7}")
    lines = [head]
    for i, r in enumerate(res["ranking"][:top], 1):
        lines.append(f"{i:>2} {r['label'][:30]:30} {'yes' if r['met'] else 'no':>3} {r['goodput_per_gpu']:>10.3f} "
                     f"{r['attainment']:>6.1%} {_fmt(r['p90_ttft_ms']):>9} {_fmt(r['p90_tpot_ms'], '{:.2f}'):>8} "
                     f"{r['throughput_per_gpu']:>9,.0f} {_fmt(r['usd_per_mtok'], '{:.3f}'):>7}")
    return "\n".join(lines)


def report(res: dict, top: int) -> str:
    c, s = res["counts"], res["slo"]
    out = [table(res, top), "",
           f"candidates: {c['generated']} generated, {c['dropped']} dropped, {c['pruned']} pruned "
           f"({', '.join(f'{k} {v}' for k, v in sorted(c['pruned_by_reason'].items())) or 'none'}), "
           f"{c['simulated']} simulated in {res['wall_s']:.1f} s"]
    w = res["winner"]
    if res["met"]:
        out.append(f"recommended: {w['label']} ({w['deployment']}): {w['attainment']:.1%} of requests within "
                   f"TTFT {s['ttft_ms']:g} ms and TPOT {s['tpot_ms']:g} ms")
    else:
        out.append(f"no candidate meets TTFT <= {s['ttft_ms']:g} ms and TPOT <= {s['tpot_ms']:g} ms for "
                   f"{s['percentile']:g}% of requests; closest (p{s['percentile']:g} over the SLO):")
        for r in res["closest"]:
            out.append(f"  {r['label']}: TTFT +{r['ttft_miss_ms']:.1f} ms, TPOT +{r['tpot_miss_ms']:.2f} ms "
                       f"({r['attainment']:.1%} within both)")
    if res["commands"]:
        out += command_lines(res["commands"], res["setup"]["framework"])
    return "\n".join(out)


def command_lines(cm: dict, framework: str) -> list[str]:
    """The simulated framework's command first, then the others' for the same deployment (not simulated:
    another scheduler), or why a framework has none."""
    none = cm.get("unservable") or {}
    lines = []
    for fw in [framework] + [f for f in ("vllm", "sglang", "trtllm") if f != framework]:
        if not cm.get(fw):
            lines.append(f"  {fw}{' (simulated)' if fw == framework else ''}: {none.get(fw, 'no command')}")
            continue
        lines.append(f"  {fw} ({'simulated' if fw == framework else 'same deployment, not simulated'}): {cm[fw]}")
    if cm["note"]:
        lines.append(f"  note: {cm['note']}")
    return lines


def _write_out(res: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "recommend.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (dict, list))} for r in res["ranking"]]) \
        .to_csv(out / "ranking.csv", index=False)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    kinds = tuple(k.strip() for k in args.candidates.split(",") if k.strip())
    err = lambda m: (print(f"error: {m}", file=sys.stderr), 2)[1]  # noqa: E731
    if not kinds or set(kinds) - set(KINDS):
        return err(f"--candidates {args.candidates!r}: a comma list of {', '.join(KINDS)}")
    if args.slo_ttft_ms <= 0 or args.slo_tpot_ms <= 0 or not 0 < args.slo_percentile <= 100:
        return err("--slo-ttft-ms and --slo-tpot-ms must be > 0, --slo-percentile in (0, 100]")
    if args.top < 1 or args.workers < 1:
        return err("--top and --workers must be >= 1")
    try:
        if args.out:
            check_writable_dir(args.out)
        if args.plot:
            check_writable_file(args.plot)
        wl = workload_from_args(args)
        log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
        res = recommend(wl, model=args.model, hardware=args.hardware, gpus=args.gpus, nodes=args.nodes,
                        gpus_per_node=args.gpus_per_node, executor=args.executor, slo_ttft_ms=args.slo_ttft_ms,
                        slo_tpot_ms=args.slo_tpot_ms, framework=args.framework, weights=args.weights,
                        profile=args.profile, slo_percentile=args.slo_percentile, kinds=kinds,
                        gpu_hour_usd=args.gpu_hour_usd, workers=args.workers, prune=not args.no_prune, log=log,
                        research=args.research)
    except (NoFit, LayoutError, TraceError, OutputPathError, ValueError, FileNotFoundError, KeyError) as e:
        return err(str(e).splitlines()[0] if str(e) else type(e).__name__)
    if not res["ranking"]:
        return err("every candidate failed to simulate: " + "; ".join(d["reason"] for d in res["dropped"])[:300])
    if args.out:
        _write_out(res, Path(args.out))
    if args.plot:
        # matplotlib (~0.2 s) only when a plot is asked for: recommend/plot.py imports it at its top
        from simulator.apps.recommend.plot import pareto_plot

        pareto_plot(res, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(res, indent=1, default=str))
    else:
        print(report(res, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
