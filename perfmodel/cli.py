"""`perfmodel estimate|calibrate|validate|models|hardware`: the perf model from the command line.

Exit codes: 0 done; 2 bad input (one line `error: ...` on stderr); 130 interrupted (Ctrl-C:
`interrupted` on stderr, no traceback); 141 (128 + SIGPIPE, what cat or seq report) when the reader
of stdout went away, e.g. `perfmodel estimate | head -1`: nothing more is written, no traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from .calibration.profile import resolve_profile
from .cliutil import run_cli
from .deploy import check_strategy, cluster
from .framework import DEFAULT_FRAMEWORK, FRAMEWORKS, for_hardware, framework_preset, with_knobs
from .hardware import hardware_names, load_hardware
from .knobs import SHIFT_THRESHOLD_TOKENS
from .layout import LayoutError
from .modelspec import WEIGHT_CHOICES, default_weights, load_model, preset_names
from .notes import checkpoint_format, profile_line, run_notes

ESTIMATE_KEYS = ("strategy", "layout", "ttft_ms", "tpot_ms", "throughput_tokens_per_s", "max_context_tokens",
                 "kv_capacity_tokens")


def _explain(spec, hw, prof, fw, args, out, strategies) -> None:
    """Per-term breakdown of the first prefill step and a mid-generation decode step."""
    from .batch import decode_batch, prefill_batch
    from .cost import step_cost
    from .deploy import deployment, instance_layout
    from .framework import vllm_default_limits

    src = getattr(prof, "describe", None)
    print(f"\nprofile: {getattr(prof, 'name', None) or 'none (datasheet roofline: ' + hw.name + ')'}", file=out)
    from .estimate import DYNAMIC, frontend_s

    front = frontend_s(fw, args.input)
    if front > 0:  # in every TTFT above, before the prefill steps
        print(f"front end (in TTFT): {1e3 * front:.3f} ms <- the server's tokenizer: {args.input} prompt tokens x "
              f"{1e6 * fw.tokenize_s_per_token:g} us (perfmodel/framework.py TOKENIZE_S_PER_TOKEN, measured by "
              f"benchmarks/measure_tokenizer.py)" + (f" + its {1e3 * fw.tokenize_batch_wait_s:g} ms micro-batch window"
                                                     if fw.tokenize_batch_wait_s > 0 else ""), file=out)

    for strategy in strategies:
        if strategy.lower() in DYNAMIC:
            print(f"{strategy}: no per-term breakdown (layout / mode changes per step; see its row's mode)", file=out)
            continue
        dep = deployment(strategy, spec, hw, args.gpus, fw, args.threshold)
        n = min(args.input, vllm_default_limits(hw).max_num_batched_tokens)
        for label, batch, tokens in (("prefill step", prefill_batch(n), n),
                                     ("decode step", decode_batch(1, args.input + args.output // 2), 1)):
            lay = instance_layout(dep.layout_for(tokens))
            terms = step_cost(spec, lay, hw, batch, prof, fw).breakdown()
            total = sum(terms.values())
            print(f"{strategy} [{lay}] {label}: {1e3 * total:.3f} ms", file=out)
            for k, v in terms.items():
                if v > 0:
                    how = src(k) if src else "datasheet roofline / Framework defaults"
                    if lay.world_size > hw.gpus_per_node and k in ("all_reduce", "all_gather", "all_to_all",
                                                                  "send_recv"):  # groups spanning nodes
                        how += "; inter-node legs: perfmodel/network.py, NIC datasheet (docs/multinode.md)"
                    print(f"  {k:16s} {1e3 * v:9.3f} ms  {100 * v / total:5.1f}%  <- {how}", file=out)


def estimate_main(args, out=None) -> int:
    from .estimate import estimate

    out = out or sys.stdout
    hw = load_hardware(args.hardware)
    fw = for_hardware(with_knobs(framework_preset(args.framework, args.framework_version),
                                 args.gpu_memory_utilization, args.step_overhead_ms, args.tokenize_us_per_token), hw)
    weights = args.weights or default_weights(args.model, hw.has_fp8)  # as simulate (modelspec.default_weights)
    spec = load_model(args.model, weights=weights, kv=args.kv_dtype)
    prof = resolve_profile(hw, args.profile)
    hw, args.gpus = cluster(hw, args.nodes, args.gpus_per_node, args.gpus)  # node size used; total GPUs
    strategies = split_strategies(args.strategies)
    for s in strategies:  # a typo is bad input (exit 2), not a "does not fit" row
        check_strategy(s)
    setup = {"weights": weights, "framework": args.framework, "framework_version": args.framework_version,
             "gpu_memory_utilization": fw.gpu_memory_utilization,
             "step_overhead_ms": round(1e3 * fw.step_overhead_s, 9),  # what every row was computed with
             "tokenize_us_per_token": round(1e6 * fw.tokenize_s_per_token, 9),
             "profile": prof.name if prof is not None else "none (datasheet)"}
    notes = [f"profile: {profile_line(prof, hw)}", *run_notes(prof, hw, spec, weights, args.weights is not None,
                                                                args.gpus, checkpoint_format(args.model))]
    rows, failed = [], []
    for s in strategies:
        try:
            rows.append({**estimate(s, spec, hw, args.gpus, args.input, args.output, prof=prof, fw=fw,
                                    threshold_tokens=args.threshold, max_model_len=args.max_model_len), **setup})
        except LayoutError as e:  # this strategy does not fit here: a row saying why, the others still shown
            failed.append(e)
            rows.append({"strategy": s, "error": f"does not fit: {e}", **setup})
    if len(failed) == len(rows):
        raise failed[0]  # nothing fits: bad input, one line, exit 2
    if args.format != "table":  # stdout stays machine-readable; the notes go to stderr
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
    if args.format == "json":
        json.dump(rows, out, indent=2)
        out.write("\n")
    elif args.format == "csv":
        import pandas as pd

        df = pd.DataFrame(rows)
        for c in ("max_context_tokens", "kv_capacity_tokens"):  # integers, blank on a "does not fit" row
            if c in df:
                df[c] = df[c].astype("Int64")
        df.to_csv(out, index=False)
    else:
        print(f"{spec.name} ({weights} weights, {args.kv_dtype} KV) on {args.gpus} x {hw.name}; "
              f"{args.input} in / {args.output} out; profile: {getattr(prof, 'name', None) or 'datasheet'}; "
              f"framework {args.framework}; gpu_memory_utilization {setup['gpu_memory_utilization']:g}, step overhead "
              f"{setup['step_overhead_ms']:g} ms, tokenization {setup['tokenize_us_per_token']:g} us/token", file=out)
        print("\n".join(("" if n.startswith("profile: ") else "warning: ") + n for n in notes), file=out)
        width = max(24, *(len(r.get("layout", "")) for r in rows))
        print(f"{'strategy':10s} {'layout':{width}s} {'TTFT ms':>9s} {'TPOT ms':>9s} {'tok/s (sat.)':>13s} "
              f"{'max context':>12s} {'KV tokens':>12s}", file=out)
        for r in rows:
            if "error" in r:
                print(f"{r['strategy']:10s} {r['error']}", file=out)
                continue
            print(f"{r['strategy']:10s} {r['layout']:{width}s} {r['ttft_ms']:9.1f} {r['tpot_ms']:9.2f} "
                  f"{r['throughput_tokens_per_s']:13,.0f} {r['max_context_tokens']:12,d} "
                  f"{r['kv_capacity_tokens']:12,d}", file=out)
        for r in rows:  # what each number of a layout-changing row is for
            if r.get("note"):
                print(f"{r['strategy']}: {r['mode']}\n  {r['note']}", file=out)
        if args.explain:
            _explain(spec, hw, prof, fw, args, out, [r["strategy"] for r in rows if "error" not in r])
    return 0


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Adds '(default: X)' to every option with a default that its help does not already state."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def _add_format(p, choices=("table", "csv", "json")) -> None:
    p.add_argument("--format", default="table", choices=choices, help="output format")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfmodel", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("estimate", help="TTFT, TPOT, saturated throughput and max context per strategy",
                       formatter_class=DefaultsHelp,
                       description="Closed-form TTFT, TPOT, saturated throughput and max context per strategy.")
    e.add_argument("--model", default="llama-3.3-70b", help=f"preset ({', '.join(preset_names())}), HF id or config.json")
    e.add_argument("--hardware", default="h200", help=f"preset ({', '.join(hardware_names())}) or TOML path")
    e.add_argument("--gpus", type=int, help="GPUs to deploy on in all, at most nodes x gpus-per-node "
                   "(default: 8); with --nodes or --gpus-per-node and no --gpus, every GPU of the cluster")
    e.add_argument("--nodes", type=int, default=1, help="nodes, joined by the preset's NICs (docs/multinode.md)")
    e.add_argument("--gpus-per-node", type=int, help="GPUs of each node (default: the preset's, at most that)")
    e.add_argument("--weights", choices=WEIGHT_CHOICES, help="weight dtype (default: the checkpoint's own format where its "
                   "config declares one, e.g. gpt-oss mxfp4, DeepSeek fp8, Kimi-K2.5 int4; else fp8 where the hardware has fp8, "
                   "else bf16)")
    e.add_argument("--kv-dtype", default="bf16", choices=("bf16", "fp8"), help="KV cache dtype")
    e.add_argument("--input", type=int, default=4096, help="input tokens per request")
    e.add_argument("--output", type=int, default=250, help="output tokens per request")
    e.add_argument("--max-model-len", type=int, help="longest request (default: the model's, as vLLM derives it; "
                   "more is refused, as vLLM does)")
    e.add_argument("--gpu-memory-utilization", type=float, help="fraction of each GPU's memory the engine may "
                   f"use, as vLLM's flag (default: {DEFAULT_FRAMEWORK.gpu_memory_utilization})")
    e.add_argument("--step-overhead-ms", type=float, help="fixed CPU time per engine step that the GPU waits "
                   f"on (default: {1e3 * DEFAULT_FRAMEWORK.step_overhead_s:g}, perfmodel/framework.py)")
    e.add_argument("--tokenize-us-per-token", type=float, help="the front end's tokenization per prompt token, "
                   f"in TTFT (default: {1e6 * DEFAULT_FRAMEWORK.tokenize_s_per_token:g}, measured: "
                   "benchmarks/measure_tokenizer.py; 0: none)")
    e.add_argument("--framework", default="vllm", choices=sorted(FRAMEWORKS),
                   help="serving framework whose memory rule and step overhead apply (docs/frameworks.md)")
    e.add_argument("--framework-version", help="where a default changed between versions (vLLM >= 0.18: async "
                   "scheduling, no exposed host time per step)")
    e.add_argument("--strategies", default="dp,tp,sp,shift",
                   help="comma list of dp,tp,pp,sp,shift,ep and the dynamic sidp,seesaw,flying,disagg (their rows say which "
                        "layout / mode each number is for); layouts like tp=2,pp=4 are separated by ';'. A strategy "
                        "that does not fit gets a row saying why; the command fails only when none fits")
    e.add_argument("--threshold", type=int, default=SHIFT_THRESHOLD_TOKENS,
                   help="Shift's token threshold in batched tokens per step (perfmodel/knobs.py SHIFT_THRESHOLD_TOKENS "
                        "says why)")
    e.add_argument("--profile", default=None, help="calibrated profile JSON or name; 'none' for the datasheet "
                   "roofline (default: the hardware's shipped profile, if any)")
    e.add_argument("--explain", action="store_true", help="per-term breakdown and where each term came from")
    _add_format(e)
    m = sub.add_parser("models", help="bundled model presets and their key numbers", formatter_class=DefaultsHelp,
                       description="Bundled model presets: parameters (total, active), layers, hidden size, "
                                   "heads / KV heads, experts, max context (vLLM's derived max_model_len).")
    _add_format(m)
    h = sub.add_parser("hardware", help="hardware presets and their key numbers", formatter_class=DefaultsHelp,
                       description="Hardware presets (datasheet): HBM, bandwidth, dense bf16 / fp8 TFLOP/s, "
                                   "GPU-GPU link bandwidth per direction, GPUs per node.")
    _add_format(h)
    try:
        from .calibration import cli as cal
        cal.add_calibrate_args(sub.add_parser("calibrate", help="fit a calibrated profile from measurements",
                                              formatter_class=DefaultsHelp))
        cal.add_validate_args(sub.add_parser("validate", help="predicted vs measured error per op",
                                             formatter_class=DefaultsHelp))
    except ImportError:
        pass
    return p


def model_rows() -> list[dict]:
    """Key numbers of every bundled model preset."""
    rows = []
    for name in preset_names():
        s = load_model(name)
        rows.append({"model": name, "params_b": float(f"{s.num_params / 1e9:.4g}"),
                     "active_params_b": float(f"{s.num_active_params / 1e9:.4g}"), "layers": s.num_layers,
                     "hidden": s.hidden_size, "heads": s.num_heads, "kv_heads": s.num_kv_heads,
                     "experts": s.num_experts, "experts_per_token": s.experts_per_token,
                     "max_context": s.max_model_len})
    return rows


def hardware_rows() -> list[dict]:
    """Datasheet key numbers of every hardware preset."""
    rows = []
    for name in hardware_names():
        hw = load_hardware(name)
        rows.append({"hardware": name, "hbm_gb": round(hw.hbm_bytes / 1e9, 1), "hbm_bw_gbs": hw.hbm_bw_gbs,
                     "bf16_tflops": hw.bf16_tflops, "fp8_tflops": hw.fp8_tflops, "link": hw.link_type,
                     "link_bw_gbs": hw.link_bw_gbs, "gpus_per_node": hw.gpus_per_node})
    return rows


def write_table(rows: list[dict], fmt: str, out) -> None:
    """rows as an aligned text table (numbers right-aligned), CSV or JSON."""
    if fmt == "json":
        json.dump(rows, out, indent=2)
        out.write("\n")
        return
    cols = list(rows[0]) if rows else []
    if fmt == "csv":
        import csv

        w = csv.DictWriter(out, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return
    def cell(v):
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)
    cells = [[cell(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    num = [all(isinstance(r[c], (int, float)) for r in rows) for c in cols]
    def line(vals):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, num)).rstrip()
    print(line(cols), file=out)
    for row in cells:
        print(line(row), file=out)


def split_strategies(text: str) -> list[str]:
    """'dp,tp,sp' -> 3 names; layouts are comma lists themselves, so 'tp=2,pp=4;tp=8' splits on ';'."""
    sep = ";" if ";" in text or "=" in text else ","
    return [s.strip() for s in text.split(sep) if s.strip()]


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "estimate":
            return estimate_main(args)
        if args.cmd == "models":
            write_table(model_rows(), args.format, sys.stdout)
            return 0
        if args.cmd == "hardware":
            write_table(hardware_rows(), args.format, sys.stdout)
            return 0
        from .calibration import cli as cal
        return cal.calibrate_main(args) if args.cmd == "calibrate" else cal.validate_main(args)
    except (ValueError, LayoutError, FileNotFoundError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
