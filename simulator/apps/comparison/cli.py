"""`simulate compare`: how far a simulated run is from a measured one.

    simulate compare MEASURED SIMULATED [--format table|json] [--plot PNG]

MEASURED and SIMULATED: a run directory (`simulate --out`, `simulate replay --out`) or its summary.json,
or a vLLM `bench serve --save-result --save-detailed` JSON file (simulator/apps/comparison/inputs.py).

Summary metrics are computed the same way on both sides from the per-request frames (completed
requests): mean / median / p90 / p99 of TTFT, TPOT and end-to-end latency (ms); ITL from the
per-request inter-token gaps where the input has them (a vLLM file, a replayed run), else the summary's
`*_itl_ms`; throughput (`total_token_throughput`, `output_throughput`, `request_throughput`, `duration`)
from the summary, computed from the frame where the summary lacks it. Each metric gives
`<metric>_measured`, `<metric>_simulated` and `<metric>_rel_err` = (simulated - measured) / measured
(0 when both are 0, null when either is unknown or measured is 0 alone).

Per request: the two frames are joined by `request_id` when both are run directories with the same
ids, else by position (a vLLM file has no ids); `per_request` gives the median / p90 absolute and the
mean signed relative error of TTFT, TPOT and e2el over requests completed on both sides, and how many
joined requests disagree on their prompt length (a sign of a wrong join or another tokenizer).
Per step: when a steps.parquet carries `predicted_s` beside the measured `duration_s`, `steps` gives
the error of the prediction (overall and per mode).

The two sides must be runs of one model on one trace (simulator/apps/comparison/provenance.py: the model and
the trace's sha256 each summary.json records): otherwise compare refuses (exit 2) unless --force, which
turns the refusal into a `warning:` line; a side that does not record them is named in a warning.

Exit codes: 0 done; 2 bad input (one `error:` line naming the file), another model or trace on the two
sides (without --force), or an unwritable --plot path.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from simulator.results.files import OutputPathError, check_writable_file
from simulator.workload.cli import DefaultsHelpFormatter
from .inputs import InputError, Loaded, finite, load
from .provenance import check

STATS = (("mean", None), ("median", 50), ("p90", 90), ("p99", 99))
LATENCIES = ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")
THROUGHPUT = ("total_token_throughput", "output_throughput", "request_throughput", "duration")
# the metrics the table shows first (and the issue names); every metric is in --format json
HEADLINE = ("median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "mean_e2el_ms",
            "total_token_throughput")
METRICS = HEADLINE + tuple(k for k in (*(f"{s}_{m}" for m in LATENCIES for s, _ in STATS), *THROUGHPUT)
                           if k not in HEADLINE)


def _stats(values, prefix: str, out: dict) -> None:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    for name, q in STATS:
        key = f"{name}_{prefix}"
        out[key] = None if not len(v) else float(v.mean()) if q is None else float(np.percentile(v, q))


def metrics(side: Loaded) -> dict:
    """Every METRICS value of one side (None where it cannot be known)."""
    req = side.requests
    ok = (req["status"] == "completed").to_numpy()
    comp = req[ok]
    out: dict = {}
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        _stats(comp[col], col, out)
    if side.itls is not None:
        gaps = [1e3 * float(g) for k, x in zip(ok, side.itls) if k for g in (x or [])]
        _stats(gaps, "itl_ms", out)
    else:
        for name, _ in STATS:
            out[f"{name}_itl_ms"] = finite(side.summary.get(f"{name}_itl_ms"))
    span = None
    if len(comp):
        span = float(comp["finish_s"].max() - req["arrival_s"].min())
    tokens = float(comp["input_tokens"].sum() + comp["output_tokens"].sum())
    computed = {"duration": span,
                "total_token_throughput": tokens / span if span else None,
                "output_throughput": float(comp["output_tokens"].sum()) / span if span else None,
                "request_throughput": len(comp) / span if span else None}
    for key in THROUGHPUT:
        v = finite(side.summary.get(key))
        out[key] = v if v is not None else computed[key]
    out["completed"] = int(ok.sum())
    out["num_requests"] = int(len(req))
    return out


def rel_err(measured, simulated):
    if measured is None or simulated is None:
        return None
    if measured == 0:
        return 0.0 if simulated == 0 else None
    return (simulated - measured) / measured


def join(m: Loaded, s: Loaded) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The two request frames aligned row by row, and how they were joined."""
    a, b = m.requests, s.requests
    if m.kind == s.kind == "run" and "request_id" in a.columns and "request_id" in b.columns:
        ia, ib = a["request_id"], b["request_id"]
        if ia.is_unique and ib.is_unique and set(ia) == set(ib):
            b = b.set_index("request_id").loc[ia.to_numpy()].reset_index()
            return a.reset_index(drop=True), b, "request_id"
    n = min(len(a), len(b))
    how = "position" if len(a) == len(b) else f"position (first {n}: {len(a)} measured, {len(b)} simulated requests)"
    return a.iloc[:n].reset_index(drop=True), b.iloc[:n].reset_index(drop=True), how


def per_request(m: Loaded, s: Loaded) -> dict:
    a, b, how = join(m, s)
    both = ((a["status"] == "completed") & (b["status"] == "completed")).to_numpy()
    out = {"joined_by": how, "joined": int(len(a)), "completed_both": int(both.sum()),
           "input_tokens_differ": int((a["input_tokens"].to_numpy() != b["input_tokens"].to_numpy()).sum())}
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        x, y = a.loc[both, col].to_numpy(float), b.loc[both, col].to_numpy(float)
        keep = np.isfinite(x) & np.isfinite(y) & (x != 0)
        r = (y[keep] - x[keep]) / x[keep]
        base = col[:-3]
        out[f"{base}_rel_err_median_abs"] = float(np.median(np.abs(r))) if len(r) else None
        out[f"{base}_rel_err_p90_abs"] = float(np.percentile(np.abs(r), 90)) if len(r) else None
        out[f"{base}_rel_err_mean"] = float(r.mean()) if len(r) else None
        out[f"{base}_pairs"] = int(len(r))
    return out


def step_errors(sides) -> dict | None:
    """Error of `predicted_s` against the measured `duration_s` in the first steps.parquet that has both."""
    for side in sides:
        st = side.steps
        if st is None or "predicted_s" not in st.columns or "duration_s" not in st.columns:
            continue
        pred, meas = st["predicted_s"].to_numpy(float), st["duration_s"].to_numpy(float)
        keep = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
        r = (pred[keep] - meas[keep]) / meas[keep]
        out = {"source": str(side.path), "steps": int(keep.sum()),
               "rel_err_mean": float(r.mean()) if len(r) else None,
               "rel_err_median_abs": float(np.median(np.abs(r))) if len(r) else None,
               "rel_err_p90_abs": float(np.percentile(np.abs(r), 90)) if len(r) else None, "by_mode": {}}
        if "mode" in st.columns and len(r):
            modes = st.loc[keep, "mode"].astype(str).to_numpy()
            for mode in dict.fromkeys(modes):
                rm = r[modes == mode]
                out["by_mode"][mode] = {"steps": int(len(rm)), "rel_err_mean": float(rm.mean()),
                                        "rel_err_median_abs": float(np.median(np.abs(rm)))}
        return out
    return None


def compare_runs(m: Loaded, s: Loaded) -> dict:
    """The JSON report: paths, every metric's measured / simulated / rel_err, per_request, steps."""
    mm, sm = metrics(m), metrics(s)
    out = {"measured": str(m.path), "simulated": str(s.path), "measured_kind": m.kind, "simulated_kind": s.kind,
           "completed_measured": mm["completed"], "completed_simulated": sm["completed"],
           "num_requests_measured": mm["num_requests"], "num_requests_simulated": sm["num_requests"]}
    for key in METRICS:
        out[f"{key}_measured"], out[f"{key}_simulated"] = mm[key], sm[key]
        out[f"{key}_rel_err"] = rel_err(mm[key], sm[key])
    out["per_request"] = per_request(m, s)
    out["steps"] = step_errors((m, s))
    return out


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def format_table(rep: dict) -> str:
    lines = [f"measured:  {rep['measured']} ({rep['measured_kind']}, {rep['completed_measured']} of "
             f"{rep['num_requests_measured']} completed)",
             f"simulated: {rep['simulated']} ({rep['simulated_kind']}, {rep['completed_simulated']} of "
             f"{rep['num_requests_simulated']} completed)", "",
             f"{'metric':<24}{'measured':>12}{'simulated':>12}{'rel_err':>10}"]
    for key in METRICS:
        if rep[f"{key}_measured"] is None and rep[f"{key}_simulated"] is None:
            continue
        lines.append(f"{key:<24}{_num(rep[f'{key}_measured']):>12}{_num(rep[f'{key}_simulated']):>12}"
                     f"{_pct(rep[f'{key}_rel_err']):>10}")
    pr = rep["per_request"]
    lines += ["", f"per request (joined by {pr['joined_by']}, {pr['completed_both']} completed on both sides"
              + (f", {pr['input_tokens_differ']} with another prompt length" if pr["input_tokens_differ"] else "")
              + "): relative error median |.| / p90 |.| / mean"]
    for base in ("ttft", "tpot", "e2el"):
        lines.append(f"  {base:<6}{_pct(pr[f'{base}_rel_err_median_abs']):>9}{_pct(pr[f'{base}_rel_err_p90_abs']):>9}"
                     f"{_pct(pr[f'{base}_rel_err_mean']):>9}   ({pr[f'{base}_pairs']} requests)")
    st = rep["steps"]
    if st:
        lines += ["", f"per step, predicted_s vs duration_s ({st['source']}, {st['steps']} steps): median |err| "
                      f"{_pct(st['rel_err_median_abs'])}, p90 |err| {_pct(st['rel_err_p90_abs'])}, "
                      f"mean {_pct(st['rel_err_mean'])}"]
        for mode, e in st["by_mode"].items():
            lines.append(f"  {mode:<10}{e['steps']:>8} steps  median |err| {_pct(e['rel_err_median_abs'])}, "
                         f"mean {_pct(e['rel_err_mean'])}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate compare", formatter_class=DefaultsHelpFormatter,
                                description="Error of a simulated run against a measured one, per metric and per "
                                            "request (simulator/apps/comparison/cli.py says how each is computed).")
    p.add_argument("measured", help="run directory, its summary.json, or a vLLM bench serve --save-result "
                                    "--save-detailed JSON file")
    p.add_argument("simulated", help="the same kinds of input")
    p.add_argument("--format", default="table", choices=("table", "json"), help="stdout format (json: only JSON)")
    p.add_argument("--plot", help="write the TTFT/TPOT CDF overlay (PNG) here")
    p.add_argument("--force", action="store_true",
                   help="compare even when the two sides ran another model or trace (a warning instead of exit 2)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        if args.plot:
            check_writable_file(args.plot, "--plot")
        m, s = load(args.measured), load(args.simulated)
        bad, warn = check(m, s)
        if bad and not args.force:
            raise InputError(f"{'; '.join(bad)}: not runs of one setup (--force compares them anyway)")
        rep = compare_runs(m, s)
        rep["mismatch"], rep["warnings"] = bad, warn
        for w in bad + warn:
            print(f"warning: {w}", file=sys.stderr)
    except (InputError, OutputPathError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(rep, indent=2))
    else:
        print(format_table(rep))
    if args.plot:
        # matplotlib only when a plot is asked for (comparison/plot.py imports it at its top)
        from .plot import write_plot

        write_plot(args.plot, m, s)
        print(f"plot: {args.plot}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
