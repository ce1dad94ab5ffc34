"""`perfmodel estimate|calibrate|validate|models|hardware`: the perf model from the command line.

Exit codes: 0 done; 2 bad input (one line `error: ...` on stderr); 130 interrupted (Ctrl-C:
`interrupted` on stderr, no traceback); 141 (128 + SIGPIPE, what cat or seq report) when the reader
of stdout went away, e.g. `perfmodel estimate | head -1`: nothing more is written, no traceback.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys

from .calibration.args import add_calibrate_args, add_validate_args
from .cliutil import DefaultsHelp, run_cli
from .framework import DEFAULT_FRAMEWORK, FRAMEWORKS
from .formats import FP8_SCALES, KV_CHOICES
from .hardware import hardware_names, load_hardware
from .knobs import SHIFT_THRESHOLD_TOKENS
from .layout import LayoutError
from .modelspec import WEIGHT_CHOICES, load_model, preset_names


def estimate_main(args, out=None) -> int:
    """`perfmodel estimate`: the rows of every strategy asked for (estimate_cli.py)."""
    # the closed forms (perfmodel.estimate, cost, seesaw, disagg: ~12 ms) load only for `estimate`,
    # not for --help, models, hardware, calibrate or validate
    from .estimate_cli import estimate_rows

    return estimate_rows(args, out)


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
    e.add_argument("--kv-dtype", default="bf16", choices=KV_CHOICES, help="KV cache dtype (docs/hardware.md)")
    e.add_argument("--fp8-scales", choices=FP8_SCALES, help="fp8 activation scales (default: the config's; "
                   "docs/calibration.md)")
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
    e.add_argument("--framework-version", help="where a default changed between versions (vLLM >= 0.14: async "
                   "scheduling, no exposed host time per step); outside the cited versions, a note")
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
    add_calibrate_args(sub.add_parser("calibrate", help="fit a calibrated profile from measurements",
                                      formatter_class=DefaultsHelp))
    add_validate_args(sub.add_parser("validate", help="predicted vs measured error per op", formatter_class=DefaultsHelp))
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
                     "bf16_tflops": hw.bf16_tflops, "fp8_tflops": hw.fp8_tflops, "fp4_tflops": hw.fp4_tflops,
                     "link": hw.link_type, "link_bw_gbs": hw.link_bw_gbs, "gpus_per_node": hw.gpus_per_node,
                     "hosts_per_node": hw.hosts_per_node, "profile": hw.profile or "-"})
    return rows


def write_table(rows: list[dict], fmt: str, out) -> None:
    """rows as an aligned text table (numbers right-aligned), CSV or JSON."""
    if fmt == "json":
        json.dump(rows, out, indent=2)
        out.write("\n")
        return
    cols = list(rows[0]) if rows else []
    if fmt == "csv":
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
        # the fits and their readers load pandas (~0.2 s): only calibrate / validate pay for them
        from .calibration import cli as cal

        return cal.calibrate_main(args) if args.cmd == "calibrate" else cal.validate_main(args)
    except (ValueError, LayoutError, FileNotFoundError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
