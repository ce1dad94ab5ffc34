"""`perfmodel estimate`: one row per strategy from the closed forms (perfmodel.estimate), and --explain's
per-term breakdown. Apart from perfmodel/cli.py so that its other commands and --help load no cost model."""
from __future__ import annotations

import json
import sys

from .batch import decode_batch, prefill_batch
from .calibration.profile import resolve_profile
from .cost import step_cost
from .deploy import check_strategy, cluster, deployment, instance_layout
from .estimate import DYNAMIC, estimate, frontend_s
from .framework import for_hardware, framework_preset, vllm_default_limits, with_knobs
from .hardware import load_hardware
from .layout import LayoutError
from .formats import check_kv_dtype
from .modelspec import default_weights, load_model
from .notes import checkpoint_format, profile_line, run_notes


ESTIMATE_KEYS = ("strategy", "layout", "ttft_ms", "tpot_ms", "throughput_tokens_per_s", "max_context_tokens",
                 "kv_capacity_tokens")


def _explain(spec, hw, prof, fw, args, out, strategies) -> None:
    """Per-term breakdown of the first prefill step and a mid-generation decode step."""
    src = getattr(prof, "describe", None)
    print(f"\nprofile: {getattr(prof, 'name', None) or 'none (datasheet roofline: ' + hw.name + ')'}", file=out)
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


def estimate_rows(args, out=None) -> int:
    """`perfmodel estimate` (perfmodel/cli.py wires it): one row per strategy, as a table, CSV or JSON."""
    out = out or sys.stdout
    hw = load_hardware(args.hardware)
    fw = for_hardware(with_knobs(framework_preset(args.framework, args.framework_version),
                                 args.gpu_memory_utilization, args.step_overhead_ms, args.tokenize_us_per_token), hw)
    weights = args.weights or default_weights(args.model, hw.has_fp8)  # as simulate (modelspec.default_weights)
    spec = load_model(args.model, weights=weights, kv=args.kv_dtype, fp8_scales=args.fp8_scales)
    check_kv_dtype(args.kv_dtype, hw, fw.name)
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
                                                                args.gpus, checkpoint_format(args.model),
                                                                args.framework, args.framework_version)]
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
        # pandas (~0.2 s) only for CSV rows: `perfmodel --help` and the table output never load it
        import pandas as pd

        df = pd.DataFrame(rows)
        for c in ("max_context_tokens", "kv_capacity_tokens"):  # integers, blank on a "does not fit" row
            if c in df:
                df[c] = df[c].astype("Int64")
        df.to_csv(out, index=False)
    else:
        scales = ", static fp8 scales" if spec.fp8_scales == "static" and weights == "fp8" else ""
        print(f"{spec.name} ({weights} weights{scales}, {args.kv_dtype} KV) on {args.gpus} x {hw.name}; "
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


def split_strategies(text: str) -> list[str]:
    """'dp,tp,sp' -> 3 names; layouts are comma lists themselves, so 'tp=2,pp=4;tp=8' splits on ';'."""
    sep = ";" if ";" in text or "=" in text else ","
    return [s.strip() for s in text.split(sep) if s.strip()]
