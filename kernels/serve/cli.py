"""python -m kernels.serve: serve a trace on the reference implementations and write the run's files.

    python -m kernels.serve --strategy tp --nproc 2 --model tiny \\
        --trace 'synthetic:gamma?rate=5&burstiness=0.5&n=50&input=64&output=16' --out out/serve-tp

Writes requests.parquet, steps.parquet, timeseries.csv and summary.json with the simulator's columns
and keys (simulator/results); steps.parquet adds predicted_s (the perf model's time of the same step
on --hardware, default the CPU preset) and tick_s (the wall time of the loop's turn around the step).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

from perfmodel.calibration.profile import resolve_profile
from perfmodel.framework import for_hardware, framework_preset, with_knobs
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError
from perfmodel.modelspec import load_model
from perfmodel.steptable import StepTable
from simulator.engine.limits import engine_limits
from simulator.engine.config import EngineConfig
from simulator.results.files import OutputPathError, check_writable_dir, write_run
from simulator.results.metrics import summarize
from simulator.run_record import max_in_flight, vllm_keys, workload_recipe

from .loop import ServeConfig, serve
from .workers import SERVE_STRATEGIES, mode_layouts, num_engines, serve_layout

DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16"}


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m kernels.serve", description=__doc__.splitlines()[0])
    p.add_argument("--strategy", default="tp", choices=SERVE_STRATEGIES)
    p.add_argument("--nproc", type=int, default=2, help="ranks (gloo workers on CPU; one GPU each with cuda)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="cpu: gloo ranks on CPU tensors; cuda: NCCL, rank r on cuda:r; auto: cuda when present")
    p.add_argument("--model", default="tiny", help="a perfmodel preset, HF id or config.json (random weights)")
    p.add_argument("--layers", type=int, help="keep this many layers of --model")
    p.add_argument("--hidden-scale", type=float, default=1.0,
                   help="scale hidden size, heads, FFN width and vocabulary by this factor (head_dim kept)")
    p.add_argument("--trace", default="synthetic:gamma?rate=5&burstiness=0.5&n=50&input=64&output=16",
                   help="a trace file, bundled name or synthetic spec (simulator.workload.load_trace)")
    p.add_argument("--max-concurrency", type=int, default=0, help="closed loop: at most C in flight (0: open loop)")
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--kv-blocks", type=int, default=512, help="KV blocks (16 tokens) per engine")
    p.add_argument("--threshold", type=int, default=256, help="Shift: base model above this many tokens")
    p.add_argument("--router", default="least-tokens", help="DP: the simulator's router")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPE_NAMES))
    p.add_argument("--hardware", default=None,
                   help="perf-model hardware preset for predicted_s (default: cpu; on cuda, the GPU's preset by name)")
    p.add_argument("--profile", default=None, help="perf-model profile (default: the hardware's; 'none')")
    p.add_argument("--step-overhead-ms", type=float, default=None, help="perf model's per-step overhead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=None,
                   help="kill the world after this many seconds (default 600; with --http: never)")
    p.add_argument("--http", type=int, metavar="PORT",
                   help="serve OpenAI-compatible /v1/completions on PORT instead of a trace (kernels/serve/http.py)")
    p.add_argument("--host", default="127.0.0.1", help="--http: the address to bind")
    p.add_argument("--served-model-name", help="--http: the model id /v1/models lists (default: --model)")
    p.add_argument("--out", help="directory for the run's files")
    return p.parse_args(argv)


def scaled_spec(model: str, layers: int | None = None, hidden_scale: float = 1.0, dtype: str = "float32",
                world_size: int = 1):
    """A preset's shapes cut down: `layers` layers, hidden/heads/FFN/vocab x hidden_scale (heads a
    multiple of the KV heads, both of them at least the world size so TP/SP shard them)."""
    w = DTYPE_NAMES[dtype]
    spec = load_model(model, weights=w, kv=w)
    ch = {}
    if layers:
        ch["num_layers"] = layers
        if spec.num_moe_layers:
            ch["num_moe_layers"] = min(spec.num_moe_layers, layers)
        if spec.num_sliding_layers:
            ch["num_sliding_layers"] = min(spec.num_sliding_layers, layers)
    f = hidden_scale
    if f != 1.0:
        kv = max(world_size, round(spec.num_kv_heads * f))
        group = max(1, spec.num_heads // spec.num_kv_heads)
        heads = kv * group
        r64 = lambda x: max(64, int(round(x * f / 64)) * 64)  # noqa: E731
        ch.update(num_heads=heads, num_kv_heads=kv, hidden_size=heads * spec.head_dim,
                  intermediate_size=r64(spec.intermediate_size), vocab_size=r64(spec.vocab_size))
        if spec.dense_intermediate_size:
            ch["dense_intermediate_size"] = r64(spec.dense_intermediate_size)
        if spec.shared_expert_size:
            ch["shared_expert_size"] = r64(spec.shared_expert_size)
    if ch:
        spec = dataclasses.replace(spec, name=f"{spec.name}(scaled)", **ch)
    return spec


def predicted_times(spec, strategy, world_size, steps, hw, prof, fw, max_tokens, max_seqs) -> np.ndarray:
    """The perf model's seconds for each step row (its aggregates, on its mode's instance layout)."""
    tables = {m: StepTable(spec, lay, hw, prof, fw, max_tokens=max_tokens, max_seqs=max_seqs)
              for m, lay in mode_layouts(strategy, world_size).items()}
    cols = ["prefill_tokens", "prefill_seqs", "prefill_pairs", "prefill_kv_tokens", "decode_seqs",
            "decode_kv_tokens"]
    out = np.empty(len(steps))
    for i, (mode, *agg) in enumerate(steps[["mode"] + cols].itertuples(index=False)):
        pt, ps, pairs, pkv, dn, dkv = agg
        out[i] = tables[str(mode)].time_s(int(pt), int(ps), float(pairs), float(pkv), int(dn), float(dkv))
    return out


GPU_PRESETS = (("H200", "h200_sxm"), ("H100", "h100_sxm"), ("H20", "h20"), ("B200", "b200"), ("A100", "a100_80gb"),
               ("L4", "l4"), ("A10", "a10"))  # torch.cuda.get_device_name substring -> hardware preset, first
# match wins (H200 before H20, A100 before A10: the shorter names are substrings of the longer)


def resolve_device(a) -> tuple[str, str]:
    """(torch.distributed backend, hardware preset) for --device / --hardware; ValueError if cuda is
    asked for where there is none, or for more ranks than GPUs, or for a GPU no preset names."""
    import torch

    dev = a.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        return "gloo", a.hardware or "cpu"
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    n = torch.cuda.device_count()
    if a.nproc > n:
        raise ValueError(f"--nproc {a.nproc}: {n} GPU(s) here (one rank per GPU)")
    if a.hardware:
        return "nccl", a.hardware
    name = torch.cuda.get_device_name(0)
    hw = next((h for key, h in GPU_PRESETS if key in name), None)
    if hw is None:
        raise ValueError(f"--hardware: no preset for {name!r}; name one (perfmodel/hardware/*.toml)")
    return "nccl", hw


def run_serve(a, launch=None):
    """Serve as the parsed command line says; (summary, requests frame, steps frame). `launch`
    (kernels/serve/http.py): its .workload and .fn(rank, world, cfg, *.args) instead of the trace's."""
    from simulator.workload import load_trace

    from ..dist import spawn

    backend, hardware = resolve_device(a)
    spec = scaled_spec(a.model, a.layers, a.hidden_scale, a.dtype, a.nproc)
    serve_layout(a.strategy, a.nproc).validate(spec, a.nproc)
    wl = load_trace(a.trace) if launch is None else launch.workload
    ec = EngineConfig(max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs)
    lim = engine_limits(ec, a.max_num_batched_tokens, a.max_num_seqs, 1)
    cfg = ServeConfig(a.strategy, spec, wl, lim, a.kv_blocks, a.max_concurrency, a.router, a.seed, a.dtype,
                      a.threshold)
    if launch is None:
        recs, steps_rec, extra = spawn(serve, a.nproc, cfg, timeout_s=a.timeout or 600.0, backend=backend)[0]
    else:
        recs, steps_rec, extra = spawn(launch.fn, a.nproc, cfg, *launch.args, timeout_s=launch.timeout_s,
                                       backend=backend)[0]
        if not len(recs):
            return None
        wl = type(wl).served(recs, wl.source)  # the requests it received
    req, steps = recs.frame(), steps_rec.frame()
    hw = load_hardware(hardware)
    prof = resolve_profile(hw, a.profile)
    fw = for_hardware(with_knobs(framework_preset("vllm"), None, a.step_overhead_ms), hw)  # no graphs on a CPU
    steps["predicted_s"] = predicted_times(spec, a.strategy, a.nproc, steps, hw, prof, fw,
                                           a.max_num_batched_tokens + a.max_num_seqs, a.max_num_seqs)
    steps["tick_s"] = np.asarray(extra["tick_s"], dtype=float)
    n_eng = num_engines(a.strategy, a.nproc)
    per = a.nproc // n_eng
    engines = [{"index": i, "modes": {m: str(lay) for m, lay in mode_layouts(a.strategy, a.nproc).items()},
                "gpus": list(range(i * per, (i + 1) * per)), "kv_capacity_tokens": a.kv_blocks * lim.block_size}
               for i in range(n_eng)]
    summ = summarize(req, steps, engines)
    meas, pred = steps["duration_s"].to_numpy(), steps["predicted_s"].to_numpy()
    summ.update(
        source="kernels.serve (measured)", policy=a.strategy, layout=str(serve_layout(a.strategy, a.nproc)),
        world_size=a.nproc, device="cuda" if backend == "nccl" else "cpu", model=spec.name, model_shape={k: getattr(spec, k) for k in (
            "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size")},
        dtype=a.dtype, hardware=hw.name, profile=getattr(prof, "name", None) or "datasheet",
        step_overhead_ms=1e3 * fw.step_overhead_s, trace=getattr(wl, "source", a.trace),
        max_concurrency=a.max_concurrency, max_num_batched_tokens=a.max_num_batched_tokens,
        max_num_seqs=a.max_num_seqs, kv_capacity_tokens=a.kv_blocks * lim.block_size * n_eng,
        median_step_ms=float(np.median(meas)) * 1e3 if len(meas) else None,
        median_predicted_step_ms=float(np.median(pred)) * 1e3 if len(pred) else None,
        median_step_ratio=float(np.median(meas / np.maximum(pred, 1e-12))) if len(meas) else None,
        median_tick_ms=float(np.median(steps["tick_s"])) * 1e3 if len(steps) else None,
        gpus=a.nproc, weights=DTYPE_NAMES[a.dtype], kv_dtype=DTYPE_NAMES[a.dtype], framework="vllm",
        max_model_len=spec.max_model_len, max_request_tokens=a.kv_blocks * lim.block_size, notes=[],
        gpu_memory_utilization=None, async_scheduling=False,  # (the loop schedules each tick after the last)
        config={"command": "python -m kernels.serve", **vars(a)},
    )
    # vLLM's result-file keys the simulator adds too (they read only model and max_concurrency)
    rs = argparse.Namespace(model=a.model, max_concurrency=a.max_concurrency)
    summ.update(vllm_keys(req, rs, workload_recipe(wl, {"trace": a.trace if launch is None else wl.source})))
    summ["max_in_flight_requests"] = max_in_flight(req)
    return summ, req, steps


def main(argv=None) -> int:
    a = parse(argv)
    if a.nproc > (os.cpu_count() or 1):
        print(f"note: {a.nproc} ranks on {os.cpu_count()} CPU cores: ranks share cores, times are inflated",
              file=sys.stderr)
    try:
        if a.out:
            check_writable_dir(a.out)
        if a.http is None:
            res = run_serve(a)
        else:
            from .http import http_launch

            with http_launch(a) as launch:
                res = run_serve(a, launch)
        if res is None:
            print("served no request: no files written")
            return 0
        summ, req, steps = res
    except (LayoutError, ValueError, OutputPathError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.out:
        write_run(a.out, summ, req, steps)
    s = summ
    ms = lambda k, unit="ms": "-" if s.get(k) is None else f"{s[k]:.2f} {unit}".rstrip()  # noqa: E731
    print(f"{s['policy']} on {s['world_size']} ranks ({s['layout']}), model {s['model']}: "
          f"{s['completed']}/{s['num_requests']} completed ({s['rejected']} rejected) in {s['duration']:.2f} s, "
          f"{s.get('num_steps', 0)} steps")
    print(f"step time: measured median {ms('median_step_ms')}, perf model ({s['hardware']}, {s['profile']}) "
          f"median {ms('median_predicted_step_ms')}, median ratio {ms('median_step_ratio', '')}; "
          f"loop turn median {ms('median_tick_ms')}")
    print(f"TTFT median {ms('median_ttft_ms')}, TPOT median {ms('median_tpot_ms')}, "
          f"output {s['output_throughput']:.1f} tok/s" + (f"; files in {a.out}" if a.out else ""))
    return 0
