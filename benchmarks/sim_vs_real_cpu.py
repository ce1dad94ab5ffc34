"""Simulator vs real execution on this CPU: one loop per strategy (issue 16 item 5).

    python benchmarks/sim_vs_real_cpu.py [--quick] [--strategies tp,dp,sp,shift] [--out DIR]
        [--profile PATH|none] [--model tiny --layers N --hidden-scale F] [--requests N]
    python benchmarks/sim_vs_real_cpu.py --device cuda --nproc 8 --model llama-3.1-8b   # an 8-GPU node

`--device cuda` runs the same loop on GPUs (NCCL ranks, one per GPU; bf16 by default; the hardware
preset from the GPU's name unless --hardware names it; microbench's default GPU dtypes).

Per strategy, at world size --nproc (2) on the same model, trace and scheduler settings:

  1. `microbench --device cpu --quick --dtypes fp32,bf16` (fp32: the dtype kernels.serve runs; without
     it the fp32 GEMMs fall back to the bf16 table, ~4x too fast on this CPU) -> `perfmodel calibrate
     --base cpu` -> DIR/profile/cpu.json (skipped when --profile is given, reused from DIR when there);
  2. `python -m kernels.serve` (measured; its steps.parquet carries the perf model's `predicted_s`
     with that profile) -> DIR/<strategy>/measured;
  3. `simulator.run.run` with RunSpec(hardware="cpu", profile=..., the strategy's policy/layout, the same
     model shapes, engine limits and router) -> DIR/<strategy>/simulated;
  4. `simulate compare` measured vs simulated -> DIR/<strategy>/compare.txt / compare.json;
  5. residuals: each step's measured time minus the prediction (duration_s, and tick_s: the whole loop
     turn, which is what the simulator's step stands for), fitted as a + b x tokens; the simulation is
     run again with step_overhead_ms = the framework's + median(tick_s - predicted_s) (an in-sample fit:
     what a `--step-overhead-ms` for this machine would be, not a validation of it)
     -> DIR/<strategy>/simulated_overhead and a second pair of error columns.

Prints one table (also DIR/table.txt, DIR/results.json). The model is `--model` (default tiny: a
step takes ~5-20 ms on 2 cores) cut down as kernels.serve cuts it; when cut, its config.json is
written to DIR/model/config.json and the simulator reads that path.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernels.serve.cli import DTYPE_NAMES, resolve_device  # noqa: E402

QUICK_N, FULL_N = 50, 200
TRACE = "synthetic:gamma?rate={rate}&burstiness=0.5&n={n}&input=64&output=16&seed={seed}"
# the simulator's policy and layout for each kernels.serve strategy at world size W
POLICY = {"tp": ("layout", "tp={w}"), "sp": ("layout", "sp={w}"), "dp": ("layout", "dp={w}"),
          "shift": ("shift", "sp={w}")}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK_N} requests (else {FULL_N}), quick microbench grid")
    p.add_argument("--strategies", default="tp,dp,sp,shift")
    p.add_argument("--out", default="out/sim_vs_real_cpu")
    p.add_argument("--profile", default=None,
                   help="perf-model profile (path, shipped name, or 'none' for the CPU datasheet); "
                        "default: DIR/profile/cpu.json, measured and fitted when missing")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: NCCL ranks, one GPU each")
    p.add_argument("--hardware", default=None, help="perf-model preset (default: cpu; on cuda the GPU's by name)")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                   help="the reference model's dtype (default: float32 on cpu, bfloat16 on cuda)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--hidden-scale", type=float, default=1.0)
    p.add_argument("--requests", type=int, default=None, help="override the request count")
    p.add_argument("--rate", type=float, default=5.0, help="mean arrival rate (req/s) of the gamma trace")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--kv-blocks", type=int, default=512)
    p.add_argument("--threshold", type=int, default=256, help="Shift threshold (tokens)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a strategy falls outside the sanity bounds (printed either way)")
    p.add_argument("--host-step-ms", type=float, default=None,
                   help="host-time model to check (with --host-layer-ms): simulate once more with the framework's "
                        "step overhead + this many ms per step ...")
    p.add_argument("--host-layer-ms", type=float, default=0.0,
                   help="... and this many ms per layer (as Framework.misc_kernel_floor_s x misc_kernels_per_layer)")
    return p.parse_args(argv)


# ---- 1. profile ------------------------------------------------------------------------------
def resolve(a) -> None:
    """Fill --hardware and --dtype for --device (kernels.serve's rule); ValueError when cuda is not there."""
    _, a.hardware = resolve_device(argparse.Namespace(device=a.device, nproc=a.nproc, hardware=a.hardware))
    a.dtype = a.dtype or ("bfloat16" if a.device == "cuda" else "float32")


def cpu_profile(a, out: Path, log) -> str:
    """The profile argument both sides use: --profile as given, else DIR/profile/<hardware>.json (made
    once: microbench on --device, then calibrate on the hardware preset)."""
    if a.profile:
        return a.profile
    pdir = out / "profile"
    prof = pdir / f"{a.hardware}.json"
    if prof.is_file():
        log(f"profile: reusing {prof}")
        return str(prof)
    pdir.mkdir(parents=True, exist_ok=True)
    csv = pdir / "microbench.csv"
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "microbench", "--suite", "all", "--device", a.device, "--nproc", str(a.nproc),
           "--model", a.model, "--no-progress", "--out", str(csv)] + (["--quick"] if a.quick else [])
    if a.device == "cpu":
        cmd += ["--dtypes", "fp32,bf16"]
    if csv.is_file():
        cmd.append("--resume")
    subprocess.run(cmd, cwd=ROOT, check=True)
    log(f"microbench: {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfmodel.calibration.cli", "calibrate", "--measurements", str(csv),
                    "--base", a.hardware, "--out", str(prof)], cwd=ROOT, check=True)
    log(f"calibrate: {time.perf_counter() - t:.1f} s")
    return str(prof)


def model_arg(a, out: Path) -> str:
    """What both sides name the model by: the preset when uncut, else a config.json of the cut shapes."""
    if not a.layers and a.hidden_scale == 1.0:
        return a.model
    from kernels.serve.cli import scaled_spec
    from perfmodel.modelspec import load_model, resolve_model_path

    spec = scaled_spec(a.model, a.layers, a.hidden_scale, a.dtype, a.nproc)
    cfg = json.loads(resolve_model_path(a.model).read_text())
    cfg.update(num_hidden_layers=spec.num_layers, hidden_size=spec.hidden_size, num_attention_heads=spec.num_heads,
               num_key_value_heads=spec.num_kv_heads, head_dim=spec.head_dim,
               intermediate_size=spec.intermediate_size, vocab_size=spec.vocab_size)
    path = out / "model" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=1) + "\n")
    got = load_model(str(path), weights=DTYPE_NAMES[a.dtype], kv=DTYPE_NAMES[a.dtype])
    for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
              "vocab_size"):
        if getattr(got, f) != getattr(spec, f):
            raise SystemExit(f"config.json for the cut model reads {f}={getattr(got, f)}, kernels.serve "
                             f"uses {getattr(spec, f)}")
    return str(path)


# ---- 2. measured -----------------------------------------------------------------------------
def measured(a, strategy: str, model: str, trace: str, profile: str, d: Path) -> float:
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "kernels.serve", "--strategy", strategy, "--nproc", str(a.nproc),
           "--model", model, "--trace", trace, "--max-num-batched-tokens", str(a.max_num_batched_tokens),
           "--max-num-seqs", str(a.max_num_seqs), "--kv-blocks", str(a.kv_blocks), "--threshold", str(a.threshold),
           "--device", a.device, "--dtype", a.dtype, "--hardware", a.hardware, "--profile", profile,
           "--seed", str(a.seed), "--timeout", str(a.timeout),
           "--out", str(d)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


# ---- 3. simulated ----------------------------------------------------------------------------
def host_framework(step_ms: float, layer_ms: float):
    """vLLM's Framework plus host time: `step_ms` more per step, `layer_ms` more per layer (the per-layer
    misc-kernel floor is the one per-layer host term a Framework has)."""
    import dataclasses

    from perfmodel.framework import framework_preset

    fw = framework_preset("vllm")
    return dataclasses.replace(fw, step_overhead_s=fw.step_overhead_s + step_ms / 1e3,
                               misc_kernel_floor_s=fw.misc_kernel_floor_s + layer_ms / 1e3 / fw.misc_kernels_per_layer)


def simulated(a, strategy: str, model: str, trace: str, profile: str, d: Path, step_overhead_ms=None,
              framework=None) -> float:
    from simulator.engine.config import EngineConfig
    from simulator.results.files import write_run
    from simulator.run import RunSpec, run
    from simulator.workload import load_trace

    t = time.perf_counter()
    policy, layout = POLICY[strategy]
    rs = RunSpec(policy=policy, layout=layout.format(w=a.nproc), model=model, hardware=a.hardware, gpus=a.nproc,
                 weights=DTYPE_NAMES[a.dtype], kv_dtype=DTYPE_NAMES[a.dtype], profile=profile,
                 policy_args={"threshold": a.threshold} if strategy == "shift" else (),
                 engine=EngineConfig(max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
                                     dp_lockstep="all"),  # the reference loop ticks its DP replicas together
                 router="least-tokens", step_overhead_ms=step_overhead_ms, framework="vllm")
    r = run(load_trace(trace), rs, framework=framework, workload_args={"trace": trace})
    write_run(d, r.summary, r.requests, r.steps)
    return time.perf_counter() - t


# ---- 4. compare ------------------------------------------------------------------------------
def compare(meas: Path, sim: Path, stem: Path) -> dict:
    from simulator.apps.comparison.cli import compare_runs, format_table
    from simulator.apps.comparison.inputs import load

    rep = compare_runs(load(meas), load(sim))
    stem.with_suffix(".txt").write_text(format_table(rep) + "\n")
    stem.with_suffix(".json").write_text(json.dumps(rep, indent=1) + "\n")
    return rep


# ---- 5. residuals ----------------------------------------------------------------------------
def residuals(meas_dir: Path) -> dict:
    """How measured step time departs from predicted_s: per step (duration_s) and per loop turn (tick_s)."""
    import pandas as pd

    st = pd.read_parquet(meas_dir / "steps.parquet")
    summ = json.loads((meas_dir / "summary.json").read_text())
    pred, dur, tick = (st[c].to_numpy(float) for c in ("predicted_s", "duration_s", "tick_s"))
    tokens = (st["prefill_tokens"] + st["decode_seqs"]).to_numpy(float)
    r_dur, r_tick = dur - pred, tick - pred
    b, a0 = np.polyfit(tokens, r_dur, 1) if len(set(tokens)) > 1 else (0.0, float(np.mean(r_dur)))
    ms = 1e3
    decode = (st["prefill_tokens"] == 0).to_numpy()
    return {
        "steps": int(len(st)),
        "median_step_ms": ms * float(np.median(dur)), "median_predicted_ms": ms * float(np.median(pred)),
        "median_tick_ms": ms * float(np.median(tick)),
        "frac_slower_than_predicted": float(np.mean(dur > pred)),
        "median_residual_ms": ms * float(np.median(r_dur)),
        "residual_iqr_ms": ms * float(np.subtract(*np.percentile(r_dur, [75, 25]))),
        "median_decode_residual_ms": ms * float(np.median(r_dur[decode])) if decode.any() else None,
        "median_prefill_residual_ms": ms * float(np.median(r_dur[~decode])) if (~decode).any() else None,
        "fit_intercept_ms": ms * float(a0), "fit_slope_us_per_token": 1e6 * float(b),
        "median_loop_gap_ms": ms * float(np.median(tick - dur)),
        "median_tick_residual_ms": ms * float(np.median(r_tick)),
        "framework_step_overhead_ms": float(summ.get("step_overhead_ms") or 0.0),
        "num_layers": int(summ["model_shape"]["num_layers"]),
    }


BOUND = 0.25  # issue 16's acceptance: median TTFT and TPOT predicted within 25% of measured
# Sanity bounds on the datasheet CPU profile (tests/test_sim_vs_real_short.py asserted them until issue 38
# moved every wall-clock bound out of the tests): simulated / measured median TPOT within [1/25, 2] (a unit
# slip, a broken join, a zero TPOT or a simulated step slower than the real one fall outside); with the
# fitted step overhead the median TPOT error within 50% (seen 2-12%); neither side always the slower one.
TPOT_RATIO = (1 / 25, 2.0)
TPOT_OVH_ERR = 0.5
FRAC_SLOWER = (0.02, 0.98)


def sanity(rows: list) -> list[str]:
    """Where each strategy falls outside the sanity bounds above ([] when every one is inside)."""
    out = []
    for r in rows:
        c, o, res = r["compare"], r.get("compare_overhead") or {}, r["residuals"]
        meas, sim = c["median_tpot_ms_measured"], c["median_tpot_ms_simulated"]
        ratio = sim / meas if meas and sim is not None else float("nan")
        if not TPOT_RATIO[0] < ratio < TPOT_RATIO[1]:
            out.append(f"{r['strategy']} TPOT simulated/measured {ratio:.3f}")
        e = o.get("median_tpot_ms_rel_err")
        if e is None or abs(e) >= TPOT_OVH_ERR:
            out.append(f"{r['strategy']} +ovh TPOT err {e}")
        f = res["frac_slower_than_predicted"]
        if not FRAC_SLOWER[0] < f < FRAC_SLOWER[1]:
            out.append(f"{r['strategy']} steps slower than predicted {f:.3f}")
    return out


def fmt_table(rows: list) -> str:
    head = ("strategy", "steps", "step meas", "step pred", "TTFT meas", "TTFT sim", "err", "TPOT meas",
            "TPOT sim", "err", "+ovh ms", "TTFT err", "TPOT err")
    w = (8, 6, 10, 10, 10, 9, 8, 10, 9, 8, 8, 9, 9)
    pct = lambda v: "-" if v is None else f"{100 * v:+.0f}%"  # noqa: E731
    num = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = ["  ".join(h.rjust(n) for h, n in zip(head, w))]
    for r in rows:
        c, o, res = r["compare"], r.get("compare_overhead") or {}, r["residuals"]
        cells = (r["strategy"], str(res["steps"]), num(res["median_step_ms"]), num(res["median_predicted_ms"]),
                 num(c["median_ttft_ms_measured"]), num(c["median_ttft_ms_simulated"]), pct(c["median_ttft_ms_rel_err"]),
                 num(c["median_tpot_ms_measured"]), num(c["median_tpot_ms_simulated"]), pct(c["median_tpot_ms_rel_err"]),
                 num(r.get("fitted_step_overhead_ms")), pct(o.get("median_ttft_ms_rel_err")),
                 pct(o.get("median_tpot_ms_rel_err")))
        lines.append("  ".join(x.rjust(n) for x, n in zip(cells, w)))
    lines.append("times in ms (medians); err = (simulated - measured) / measured; step pred = perf model's "
                 "predicted_s of the measured steps; +ovh: the simulation rerun with step_overhead_ms = framework's "
                 "+ median(tick_s - predicted_s) (in-sample fit)")
    errs = [(r["strategy"], k, r["compare"][f"median_{k}_ms_rel_err"]) for r in rows for k in ("ttft", "tpot")]
    out = [f"{s} {k.upper()} {100 * e:+.0f}%" for s, k, e in errs if e is None or abs(e) > BOUND]
    lines.append(f"issue 16 bound (median TTFT and TPOT within {100 * BOUND:.0f}% of measured): "
                 + ("every strategy within" if not out else "outside: " + ", ".join(out)))
    bad = sanity(rows)
    lines.append(f"sanity bounds (TPOT sim/meas in ({TPOT_RATIO[0]:.2f}, {TPOT_RATIO[1]:g}), +ovh TPOT err < "
                 f"{TPOT_OVH_ERR:.0%}, steps slower than predicted in {FRAC_SLOWER}): "
                 + ("every strategy within" if not bad else "OUTSIDE: " + "; ".join(bad)))
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse(argv)
    try:
        resolve(a)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    bad = [s for s in strategies if s not in POLICY]
    if bad:
        print(f"error: strategy {bad[0]!r}: one of {', '.join(POLICY)}", file=sys.stderr)
        return 2
    n = a.requests or (QUICK_N if a.quick else FULL_N)
    trace = TRACE.format(rate=a.rate, n=n, seed=a.seed)
    t_all = time.perf_counter()
    profile = cpu_profile(a, out, log)
    model = model_arg(a, out)
    rows = []
    for s in strategies:
        d = out / s
        d.mkdir(parents=True, exist_ok=True)
        tm = measured(a, s, model, trace, profile, d / "measured")
        ts = simulated(a, s, model, trace, profile, d / "simulated")
        rep = compare(d / "measured", d / "simulated", d / "compare")
        res = residuals(d / "measured")
        ovh = res["framework_step_overhead_ms"] + max(0.0, res["median_tick_residual_ms"])
        simulated(a, s, model, trace, profile, d / "simulated_overhead", step_overhead_ms=ovh)
        rep_o = compare(d / "measured", d / "simulated_overhead", d / "compare_overhead")
        row = {"strategy": s, "compare": rep, "compare_overhead": rep_o, "residuals": res,
               "fitted_step_overhead_ms": ovh, "measured_s": tm, "simulated_s": ts}
        if a.host_step_ms is not None:
            simulated(a, s, model, trace, profile, d / "simulated_host",
                      framework=host_framework(a.host_step_ms, a.host_layer_ms))
            row["compare_host"] = compare(d / "measured", d / "simulated_host", d / "compare_host")
        rows.append(row)
        log(f"{s}: measured run {tm:.1f} s, simulation {ts:.2f} s; median step {res['median_step_ms']:.2f} ms "
            f"vs predicted {res['median_predicted_ms']:.2f} ms")
    table = fmt_table(rows)
    if a.host_step_ms is not None:
        pct = lambda v: "-" if v is None else f"{100 * v:+.0f}%"  # noqa: E731
        table += (f"\nhost-time model (+{a.host_step_ms:g} ms/step, +{a.host_layer_ms:g} ms/layer): "
                  + "; ".join(f"{r['strategy']} TTFT {pct(r['compare_host']['median_ttft_ms_rel_err'])} "
                              f"TPOT {pct(r['compare_host']['median_tpot_ms_rel_err'])}" for r in rows))
    head = (f"trace {trace}, model {model}, {a.nproc} ranks on {a.device} ({a.hardware}, {a.dtype}), profile {profile}; "
            f"total {time.perf_counter() - t_all:.1f} s")
    print(head + "\n" + table)
    (out / "table.txt").write_text(head + "\n" + table + "\n")
    (out / "results.json").write_text(json.dumps({"trace": trace, "model": model, "profile": profile,
                                                  "nproc": a.nproc, "rows": rows}, indent=1, default=str) + "\n")
    return 1 if a.strict and sanity(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
