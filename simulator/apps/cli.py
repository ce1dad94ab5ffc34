"""`simulate`: replay a trace through engines driven by a parallelism policy.

    simulate --trace burstgpt.csv --policy shift [--layout tp=2,pp=4] [--model M] [--hardware H]
             [--gpus N] [--nodes N --gpus-per-node G] [--weights bf16|fp8] [--kv-dtype bf16|fp8|nvfp4] [--max-concurrency C]
             [--client-turnaround-ms Z]
             [--max-model-len L] [--gpu-memory-utilization U] [--step-overhead-ms MS]
             [--slo-ttft-ms X --slo-tpot-ms Y] [--out DIR [--overwrite]] [--seed S] [--rate-scale k]
             [--time-window a:b] [--plot] [--compare tp,dp,layout:tp=2,pp=4,shift:threshold=128]
             [--describe] [--format table|json]
    simulate policies [--format json]      each policy and its knobs (simulator/policies/catalog.py)
    simulate sweep ... / simulate validate ...

Exit codes (every subcommand): 0 done; 1 a sweep with failed runs (listed on stderr); 2 bad input or
an output path that cannot be written (one `error:` line, checked before any work); 130 interrupted
(Ctrl-C: one `interrupted` line, no traceback; result files are renamed into place only when
complete); 141 (128 + SIGPIPE, what `cat` reports, so `set -o pipefail` sees it, as `perfmodel` and
`microbench` do) when stdout's reader went away (`simulate ... --format json | head -1`): no traceback,
nothing more written. With `--format json`, stdout holds only the JSON; notes, warnings and `plot:` lines go
to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:  # Ctrl-C while these load (~2 s on a cold start): the same one line and exit code as later, no traceback
    from tqdm import tqdm

    from perfmodel.deploy import cluster
    from perfmodel.hardware import hardware_names, load_hardware
    from perfmodel.knobs import KV_BLOCK_TOKENS, SHIFT_THRESHOLD_TOKENS
    from perfmodel.layout import LayoutError
    from perfmodel.formats import FP8_SCALES, KV_CHOICES
    from perfmodel.modelspec import WEIGHT_CHOICES, preset_names

    from simulator.cluster.router import ROUTERS
    from simulator.engine.config import LOCKSTEPS, SCHEDULE_ORDERS, framework_engine
    from simulator.results.files import (OutputPathError, atomic_path, check_fresh_out, check_writable_dir,
                                         check_writable_file, clear_earlier_run, record_run_files, write_run)
    from simulator.results.metrics import ConservationError
    from simulator.policies import POLICIES
    from simulator.apps.cli_framework import add_framework_flags, framework_engine_fields, framework_fields
    from simulator.apps.cli_items import (CompareItem, check_flags, compare_items, compare_policy_args, item_label,
                                          policy_args_of)
    from simulator.policies.catalog import catalog, format_catalog
    from simulator import rerun
    from simulator.apps.recommend.cli import main as recommend_main
    from simulator.results.invariants import check_run
    from simulator.run import RunSpec, run
    from simulator.apps.sweep.grid import sweep_main
    from simulator.workload import TraceError
    from simulator.workload.cli import DefaultsHelpFormatter, add_trace_args, describe, workload_from_args
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None

SHOW = (("completed", "{:d}"), ("rejected", "{:d}"), ("duration", "{:.1f} s"),
        ("request_throughput", "{:.2f} req/s"), ("total_token_throughput", "{:,.0f} tok/s"),
        ("output_throughput", "{:,.0f} tok/s"), ("median_ttft_ms", "{:.1f}"), ("p99_ttft_ms", "{:.1f}"),
        ("median_tpot_ms", "{:.2f}"), ("p99_tpot_ms", "{:.2f}"), ("median_itl_ms", "{:.2f}"),
        ("median_e2el_ms", "{:.1f}"), ("median_queue_ms", "{:.1f}"), ("request_goodput", "{:.2f} req/s"),
        ("preemptions", "{:d}"), ("mean_kv_utilization", "{:.1%}"), ("mode_switches", "{:d}"),
        ("prefix_cache_hit_rate", "{:.1%}"))


EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE (as perfmodel and microbench)
EXAMPLE = "simulate --trace burstgpt.csv --policy shift --out out/ --plot"
EPILOG = f"""examples:
  {EXAMPLE}
  simulate --compare tp,dp,layout:tp=2,pp=4,shift:threshold=128 --trace bursty_onoff.csv
  simulate --trace burstgpt.csv --describe --format json

subcommands:
  simulate policies [--format json]                       each policy and its knobs (--policy-arg)
  simulate sweep --grid GRID.toml --out results.parquet   a grid of runs (simulator/apps/sweep/grid.py)
  simulate validate --measurements FILE                   replay measured serving runs (docs/fidelity.md)
  simulate rerun DIR                                      rerun a run from its summary.json, compare (docs/outputs.md)
  simulate replay --url URL --trace T --out DIR           replay a trace against an OpenAI-compatible server
  simulate compare MEASURED SIMULATED                     error per metric and per request of two runs
  simulate recommend --trace T --slo-ttft-ms X --slo-tpot-ms Y   best layout/policy under SLOs (docs/recommend.md)

exit codes: 0 done, 1 sweep runs failed or a rerun differs, 2 bad input or unwritable output, 130 interrupted,
141 stdout closed by its reader (| head), quietly"""


def package_version() -> str:
    """The installed parallelism-sim version, or 'unknown' (a source tree that was never installed)."""
    try:
        return version("parallelism-sim")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate", description="Replay a request trace through simulated "
                                "LLM engines under a parallelism policy (times from perfmodel).",
                                epilog=EPILOG, formatter_class=DefaultsHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    add_trace_args(p)
    p.add_argument("--describe", action="store_true", help="summarize the trace (with --plot: histograms) and exit")
    p.add_argument("--policy", help=f"one of {', '.join(sorted(POLICIES))}; not with --compare, which names "
                   "its own (`simulate policies` lists them with their knobs) (default: shift)")
    p.add_argument("--layout", help="with --policy layout: the layout, e.g. tp=2,pp=4 or sp=4,tp=2 (DP fills the "
                   "GPUs); shift reads it as its base, sidp as its tp; other policies refuse it")
    p.add_argument("--policy-arg", action="append", default=[], metavar="KEY=VALUE",
                   help=f"policy knob, e.g. threshold={SHIFT_THRESHOLD_TOKENS} (repeatable); with --compare it goes "
                   "to the policies that take it")
    p.add_argument("--compare", help="comma list of policies to run on the same trace, side by side; a layout or "
                   "knobs go with their policy after ':': tp,dp,layout:tp=2,pp=4,shift:threshold=128 "
                   "(--layout is for one policy)")
    p.add_argument("--model", default="llama-3.3-70b", help=f"preset ({', '.join(preset_names())}), HF id or config.json")
    p.add_argument("--hardware", default="h200", help=f"preset ({', '.join(hardware_names())})")
    p.add_argument("--gpus", type=int, help="GPUs the deployment uses in all, at most nodes x gpus-per-node "
                   "(default: 8); with --nodes or --gpus-per-node and no --gpus, every GPU of the cluster")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the cluster, joined by the preset's NICs; ranks "
                   "are placed node-major (docs/multinode.md)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs of each node (default: the preset's, at most that)")
    p.add_argument("--weights", choices=WEIGHT_CHOICES,
                   help="default: the checkpoint's own format where its config declares one (gpt-oss mxfp4, "
                        "DeepSeek fp8, Kimi-K2.5 int4), else fp8 where the hardware has fp8, else bf16")
    p.add_argument("--fp8-scales", choices=FP8_SCALES, help="how an fp8 checkpoint scales activations (default: "
                   "its config's: ModelOpt FP8 static, else dynamic); static skips TRT-LLM's compute-scale pass")
    p.add_argument("--mtp", type=int, default=0, help="speculative decoding in an aggregated engine: draft tokens a "
                   "step (TRT-LLM MTP num_nextn_predict_layers, SGLang EAGLE steps); 0: off (disagg: --policy-arg "
                   "decode_mtp)")
    p.add_argument("--mtp-acceptance", type=float, help="acceptance of each draft token whose predecessors were "
                   "accepted (default: perfmodel/specdec.py MTP_ACCEPTANCE, fitted)")
    p.add_argument("--mamba-ssm-dtype", dest="ssm_dtype", choices=("float32", "bfloat16", "float16"),
                   help="recurrent-state dtype of hybrid linear-attention models, as SGLang's flag (default: the "
                        "config's mamba_ssm_dtype; docs/linear_attention.md)")
    p.add_argument("--kv-dtype", default="bf16", choices=KV_CHOICES, help="KV cache data type (nvfp4: 9/16 byte "
                   "an element; which frameworks serve it on which GPUs: docs/hardware.md)")
    p.add_argument("--profile", help="calibrated profile (default: the hardware's; 'none' = datasheet)")
    p.add_argument("--router", default="least-tokens", choices=ROUTERS, help="how requests are spread over engines")
    p.add_argument("--max-concurrency", type=int, default=0, help="closed loop: at most C requests in flight "
                   "(0 = open loop, arrivals as in the trace)")
    p.add_argument("--client-turnaround-ms", type=float, default=0.0,
                   help="closed loop: ms from a response's end to the client sending its next request (its own "
                        "loop, not in TTFT; default 0; aiperf's fitted value: docs/fidelity.md)")
    p.add_argument("--max-num-batched-tokens", type=int, help="token budget per step (default: vLLM's by GPU)")
    p.add_argument("--max-num-seqs", type=int, help="running sequences at most (default: vLLM's by GPU)")
    add_framework_flags(p)  # --framework ... --hbm-gb (cli_framework.py)
    p.add_argument("--no-chunked-prefill", action="store_true", help="prefill whole prompts in one step "
                   "(default: chunked, as vLLM v1)")
    p.add_argument("--block-size", type=int, help=f"KV block in tokens (default: the framework's; vLLM "
                   f"{KV_BLOCK_TOKENS})")
    p.add_argument("--schedule-order", choices=SCHEDULE_ORDERS, help="default: the framework's (vLLM decode-first)")
    p.add_argument("--max-waiting", type=int, default=0, help="admission cap (0 = unlimited)")
    p.add_argument("--priority-scheduling", action="store_true", help="serve waiting requests by priority "
                   "(default: FCFS)")
    p.add_argument("--no-fast-forward", action="store_true", help="step by step (same per-request results)")
    p.add_argument("--check", action="store_true", help="check every run's invariants (simulator/results/invariants.py: "
                   "each request completed or rejected once, KV within capacity, first tokens at step ends, queues "
                   "visible, work done); summary.json gets `invariants`; exit 1 on a violation (a simulator bug)")
    p.add_argument("--dp-lockstep", default=None, choices=LOCKSTEPS,
                   help="DP engines that step together: ep = the attention-DP ranks of one expert-parallel MoE "
                        "(default), all = every DP engine (the reference loop kernels.serve), off")
    p.add_argument("--reserve-full-prompt", action="store_true",
                   help="admit a request only if its whole prompt fits the free KV (later vLLM's "
                        "--scheduler-reserve-full-isl); default: its first chunk (vLLM 0.9)")
    p.add_argument("--no-prefix-caching", action="store_true", help="turn off automatic prefix caching (on by "
                   "default, as vLLM v1; it acts on traces with block hashes, e.g. Mooncake's hash_ids)")
    p.add_argument("--max-model-len", type=int, help="longest request (prompt + output) served; longer ones "
                   "are rejected (reason context_length). Default: the model's (max_position_embeddings with RoPE "
                   "scaling, as vLLM derives it); more than that is refused, as vLLM does")
    p.add_argument("--slo-ttft-ms", type=float, help="TTFT SLO for goodput (default: none, goodput null)")
    p.add_argument("--slo-tpot-ms", type=float, help="TPOT SLO for goodput (default: none, goodput null)")
    p.add_argument("--window-s", type=float, default=10.0, help="time-series window (s)")
    p.add_argument("--out", help="write requests.parquet, steps.parquet, timeseries.csv, summary.json here "
                   "(default: nothing written)")
    p.add_argument("--overwrite", action="store_true", help="--out may hold an earlier run: its files (listed in "
                   "the folder's .simulate-files) are deleted first; without it such a folder is refused")
    p.add_argument("--plot", nargs="?", const="timeline.png", help="write a timeline PNG (into --out if given; "
                   "bare --plot: timeline.png); `--plot cdf` (or a file name ending in cdf, e.g. ttft_cdf.png): "
                   "TTFT and TPOT CDFs per policy")
    p.add_argument("--format", default="table", choices=("table", "json"), help="stdout format (json: only JSON "
                   "on stdout)")
    return p


def run_spec(policy: str, args, layout: str | None = None, policy_args: tuple | None = None) -> RunSpec:
    """The RunSpec the command line describes for one policy (`layout`, `policy_args`: a --compare item's;
    policy_args None: --policy-arg's)."""
    eng = framework_engine(args.framework, max_num_batched_tokens=args.max_num_batched_tokens,
                       max_num_seqs=args.max_num_seqs,
                       enable_chunked_prefill=False if args.no_chunked_prefill else None, block_size=args.block_size,
                       schedule_order=args.schedule_order, max_waiting=args.max_waiting,
                       priority_scheduling=args.priority_scheduling, fast_forward=not args.no_fast_forward,
                       dp_lockstep=args.dp_lockstep,
                       reserve_full_prompt=args.reserve_full_prompt, max_model_len=args.max_model_len,
                       enable_prefix_caching=False if args.no_prefix_caching else None,
                       **framework_engine_fields(args))
    pargs = policy_args_of(args.policy_arg) if policy_args is None else tuple(policy_args)
    if args.gpus is None:  # every GPU of the cluster --nodes / --gpus-per-node name (8 on one node)
        args.gpus = cluster(load_hardware(args.hardware), args.nodes, args.gpus_per_node)[1]
    return RunSpec(policy=policy, model=args.model, hardware=args.hardware, gpus=args.gpus, weights=args.weights,
                   kv_dtype=args.kv_dtype, fp8_scales=args.fp8_scales, ssm_dtype=args.ssm_dtype, mtp=args.mtp,
                   mtp_acceptance=args.mtp_acceptance, profile=args.profile, layout=layout or args.layout,
                   policy_args=pargs, engine=eng, router=args.router,
                   max_concurrency=args.max_concurrency, client_turnaround_ms=args.client_turnaround_ms,
                   slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                   nodes=args.nodes, gpus_per_node=args.gpus_per_node, **framework_fields(args))


def run_one(spec: RunSpec, args, workload) -> tuple[dict, object, object]:
    """Simulate one RunSpec (simulator.run, with a progress bar); (summary, requests, steps)."""
    with tqdm(total=len(workload), delay=3, file=sys.stderr, unit="req", desc=spec.policy) as bar:
        r = run(workload, spec, progress=bar.update, workload_args=args)
    if getattr(args, "check", False):
        r.summary["invariants"] = check_run(r.result) or "ok"
    return r.summary, r.requests, r.steps


def _print_table(summaries: list[dict], labels: list[str], out) -> None:
    head = ["metric"] + labels
    rows = [["layout"] + [s["layout"] for s in summaries]]
    for key, fmt in SHOW:
        if all(key in s for s in summaries):
            rows.append([key] + ["-" if s[key] is None else fmt.format(s[key]) for s in summaries])
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))),
              file=out)


def _usage_short() -> str:
    return (f"usage: simulate --trace FILE|NAME|SPEC [--policy POLICY] [options]\n"
            f"  e.g. {EXAMPLE}\n"
            "  simulate --help for every option and its default; simulate policies for the policies")


def policies_main(argv) -> int:
    """`simulate policies [--format json]`: each policy, what it is, and its knobs (simulator/policies/catalog.py)."""
    p = argparse.ArgumentParser(prog="simulate policies", formatter_class=DefaultsHelpFormatter,
                                description="List the policies (--policy, --compare) and the knobs each takes "
                                "(--policy-arg KEY=VALUE, or policy:KEY=VALUE in --compare).")
    p.add_argument("--format", default="table", choices=("table", "json"), help="stdout format")
    args = p.parse_args(argv)
    rows = catalog()
    print(json.dumps(rows, indent=2) if args.format == "json" else format_catalog(rows))
    return 0


# what --plot may write: matplotlib's FigureCanvasBase.filetypes (3.7+; tests/test_cli_robust.py holds it a subset),
# written out here so that a run without a plot does not import matplotlib (~0.2 s)
PLOT_FORMATS = ("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff", "webp")


def _check_outputs(args) -> None:
    """Refuse --out / --plot paths that cannot be written, before any work (OutputPathError)."""
    if args.out and args.describe:  # (2026-12-03 QA: --out was ignored without a word)
        raise OutputPathError("--out: --describe writes no run files (it prints the trace's summary; --plot FILE "
                              "saves its histograms)")
    if args.out:
        check_writable_dir(args.out, "--out")
        check_fresh_out(args.out, args.overwrite)
    if args.plot:
        suffix = Path(args.plot).suffix.lower()
        if suffix and suffix[1:] not in PLOT_FORMATS:  # (matplotlib's own error named no flag)
            raise OutputPathError(f"--plot {args.plot}: no image format {suffix!r}: one of {', '.join(PLOT_FORMATS)} "
                                  f"(or the kinds cdf, timeline)")
        check_writable_file(args.plot if args.describe else Path(args.out or ".") / args.plot, "--plot")


def simulate_main(argv) -> int:
    """`simulate [options]`: one policy or several (--compare) on one trace."""
    if not argv:  # a bare `simulate` is a question, not a request for the full default job
        print(_usage_short(), file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.plot in ("cdf", "timeline"):  # `--plot cdf`: the kind, written as cdf.png
        args.plot += ".png"
    try:
        check_flags(args)
        args.policy = args.policy or "shift"
        _check_outputs(args)
        workload = workload_from_args(args)
        if args.describe:
            describe(workload, args.plot, as_json=args.format == "json")
            return 0
        if args.compare and args.layout:  # --layout would replace every compared policy's own layout
            hint = [f"layout:{args.layout}" if t.strip() == "layout" else t.strip() for t in args.compare.split(",")]
            hint += [] if f"layout:{args.layout}" in hint else [f"layout:{args.layout}"]
            raise ValueError(f"--layout with --compare: give the layout per policy inside --compare, "
                             f"e.g. --compare {','.join(hint)}")
        given = policy_args_of(args.policy_arg)
        if args.compare:
            items = compare_items(args.compare)
            pargs = compare_policy_args(items, given)
            labels = [item_label(it.policy, it.layout, it.args) for it in items]
        else:
            items, pargs, labels = [CompareItem(args.policy, None, ())], [given], [args.policy]
        specs = [run_spec(it.policy, args, it.layout, pa) for it, pa in zip(items, pargs)]  # all checked, then run
        results = [run_one(rs, args, workload) for rs in specs]
        summaries = [r[0] for r in results]
        for note in dict.fromkeys(n for s in summaries for n in s["notes"]):  # a policy's by-design choices
            print(f"note: {note}", file=sys.stderr)
        prefill_only = int((workload.requests["output_tokens"] == 0).sum())
        if prefill_only:  # BurstGPT's failed rows (0 response tokens), or a trace that asks for none
            print(f"note: {prefill_only} request(s) with 0 output tokens run as prefill-only", file=sys.stderr)
        for label, s in zip(labels, summaries):
            if s["saturated"]:
                print(f"warning: {label} is saturated (served rate > 5% below the offered rate, or a queue "
                      "still growing as arrivals end): its latencies grow with the trace's length", file=sys.stderr)
        if args.format == "json":
            print(json.dumps(summaries if args.compare else summaries[0], indent=2))
        else:
            first = summaries[0]
            print(f"{workload.source}: {len(workload)} requests on {args.gpus} x {first['hardware']}, {first['model']} "
                  f"({first['weights']}); profile: {first['profile']}")
            _print_table(summaries, labels, sys.stdout)
        written = []
        if args.out:
            clear_earlier_run(args.out)  # (checked up front: only with --overwrite is there one to clear)
            for label, (summ, req, steps) in zip(labels, results):
                d = Path(args.out) / label.replace(":", "-").replace(",", "_") if args.compare else Path(args.out)
                written += write_run(d, summ, req, steps, args.window_s)
        if args.plot:
            # matplotlib (~0.2 s) only when a plot is asked for: results/plots.py imports it at its top
            from simulator.results.plots import cdf_figure, run_title, timeline_figure

            path = Path(args.out or ".") / args.plot
            runs = [(label, r, st) for label, (_, r, st) in zip(labels, results)]
            title = run_title(summaries[0], args.trace)
            fig = cdf_figure(runs, title=title) if path.stem.endswith("cdf") else \
                timeline_figure(runs, args.window_s, title=title)
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")
            # json: stdout is the JSON alone; the table is for people, the line sits with it
            print(f"plot: {path}", file=sys.stderr if args.format == "json" else sys.stdout)
            written.append(path)
        if args.out:
            record_run_files(args.out, written)
        broken = [(label, v) for label, s in zip(labels, summaries) if s.get("invariants", "ok") != "ok"
                  for v in s["invariants"]]
        for label, v in broken:  # after the files are written: they are what a bug report needs
            print(f"error: invariant violated ({label}): {v}", file=sys.stderr)
        return 1 if broken else 0
    except (TraceError, LayoutError, ValueError, ConservationError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _stdout_gone() -> None:
    """stdout's reader went away (`| head`): send what is left to /dev/null, so the flush at exit is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a descriptor (tests' capture)
        sys.stdout = os.fdopen(devnull, "w")  # noqa: SIM115
        return
    os.close(devnull)


def main(argv=None) -> int:
    """`simulate` and its subcommands; exit codes in the module docstring (130: Ctrl-C; closed stdout: 141)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["sweep"]:  # `simulate sweep --grid GRID.toml --out results.parquet ...`
            rc = sweep_main(argv[1:])
        elif argv[:1] == ["validate"]:  # `simulate validate --measurements FILE ...` (docs/fidelity.md)
            # validate, compare and replay load ~10 ms of modules each that no other subcommand needs (its
            # readers, the comparison's inputs, the replay client's): imported where they are asked for
            from simulator.apps.validate.cli import main as validate_main

            rc = validate_main(argv[1:])
        elif argv[:1] == ["policies"]:
            rc = policies_main(argv[1:])
        elif argv[:1] == ["compare"]:  # `simulate compare MEASURED SIMULATED`: per-request and per-metric error
            from simulator.apps.comparison.cli import main as compare_main  # (lazy: see validate above)

            rc = compare_main(argv[1:])
        elif argv[:1] == ["replay"]:  # `simulate replay --url URL --trace T --out DIR`: a real server
            from simulator.apps.replay.cli import main as replay_main  # (lazy: see validate above)

            rc = replay_main(argv[1:])
        elif argv[:1] == ["recommend"]:  # `simulate recommend --trace T --slo-ttft-ms X --slo-tpot-ms Y ...`
            rc = recommend_main(argv[1:])
        elif argv[:1] == ["rerun"]:  # `simulate rerun DIR`: reproduce a run from its summary.json config
            rc = rerun.main(argv[1:])
        else:
            rc = simulate_main(argv)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return rc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
