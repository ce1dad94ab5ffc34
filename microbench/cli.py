"""`microbench`: measure GEMM, attention, collectives and copies, and the framework kernels of fused MoE and MLA
decode; write measurement CSV rows that `perfmodel calibrate` reads, an environment JSON beside them, and the
moe / mla rows as aiconfigurator-style kernel tables beside them (moe_perf_<fw>_<version>.csv, ...).

  microbench --suite all --device cpu --nproc 2 --quick --out cpu.csv
  microbench --suite gemm,memcpy --out h100.csv                      # one GPU
  microbench --nproc 8 --out node.csv                                # spawns 8 workers itself
  torchrun --nproc-per-node 8 -m microbench --out node.csv           # or under torchrun (multi-node too)

Exit code 0 on success (failed cases are error rows, not failures), 2 on bad input (an --out that
cannot be written included, checked before any measurement), 1 if a worker died, 130 on Ctrl-C
(`interrupted`, workers stopped), 141 if the reader of stdout went away. The CSV is written a row at
a time (what --resume continues from); the environment JSON atomically.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time

SUITES = ("gemm", "attention", "collectives", "memcpy", "moe", "mla")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _ints(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4,8")
    return vals


def _bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in UNITS else ""
    try:
        return int(float(t[: len(t) - len(unit)]) * UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 64M or 1G") from None


def _cache(text: str) -> int:
    n = _bytes(text)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the cache must be a positive size, like 32M")
    return n


def _sweep(text: str) -> dict:
    import json
    from pathlib import Path

    try:
        raw = Path(text).read_text() if not text.lstrip().startswith("{") else text
        obj = json.loads(raw)
    except (OSError, json.JSONDecodeError) as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object or file ({e})") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: want a JSON object of sweep keys")
    from .shapes import SWEEPS

    bad = sorted(set(obj) - set(SWEEPS[("cpu", True)]))
    if bad:
        raise argparse.ArgumentTypeError(f"unknown key {bad[0]!r} (see microbench/shapes.py SWEEPS)")
    return obj


def _suites(text: str) -> tuple[str, ...]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if "all" in names:
        return SUITES
    bad = [s for s in names if s not in SUITES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown suite {bad[0] if bad else text!r}: choose from all, "
                                         f"{', '.join(SUITES)}")
    return tuple(s for s in SUITES if s in names)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="microbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", dest="suites", type=_suites, default=SUITES,
                   help="all, or a comma list of gemm, attention, collectives, memcpy, moe (vLLM's fused MoE), "
                        "mla (MLA decode: vLLM's FlashMLA, FlashMLA or FlashInfer) (default all)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available")
    p.add_argument("--nproc", type=int, default=None,
                   help="workers to spawn (default: GPUs on CUDA, 2 on CPU); ignored under torchrun")
    p.add_argument("--out", default="microbench.csv", help="measurement CSV (env record: <stem>.env.json; "
                   "default microbench.csv)")
    p.add_argument("--resume", action="store_true", help="append to --out, skipping cases measured without error")
    p.add_argument("--quick", action="store_true", help="small sweep, few repeats (CI; < 3 min on 2 CPU cores)")
    p.add_argument("--model", default=None, help="model for GEMM/attention/pattern shapes (default: tiny on "
                   "CPU, llama-3.1-8b on CUDA; any perfmodel preset or config.json)")
    p.add_argument("--sweep", type=_sweep, default=None, metavar="JSON",
                   help="override sweep parameters (microbench/shapes.py SWEEPS keys) with a JSON object or "
                        "file, e.g. '{\"grid_m\": [1, 64], \"msg\": [1024, 1048576, 4]}'")
    p.add_argument("--tp", type=_ints, default=None, help="TP degrees the model will run (shape generation)")
    p.add_argument("--dtypes", type=lambda s: tuple(x.strip() for x in s.split(",") if x.strip()), default=None,
                   help="GEMM dtypes (default: bf16 on CPU; bf16,fp8 quick / bf16,fp16,fp8 full on CUDA, and nvfp4 "
                        "on compute capability 10.x)")
    p.add_argument("--repeats", type=int, default=None, help="timed samples per case (default per sweep)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default per sweep)")
    p.add_argument("--max-bytes", type=_bytes, default=None, help="largest message / copy, e.g. 64M")
    p.add_argument("--cuda-graph", action="store_true", help="time CUDA-graph replays (CUDA only)")
    p.add_argument("--hardware", default=None, help="perfmodel preset for predicted_us (default: from device)")
    p.add_argument("--profile", default=None, help="calibrated profile for predicted_us (default: the preset's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per rank (CPU default: cores/ranks)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="collective timeout (a hang becomes an error)")
    p.add_argument("--max-case-gb", type=float, default=4.0, help="memory budget of one case's inputs")
    p.add_argument("--cache-bytes", type=_cache, default=None,
                   help="last-level cache the rotating inputs must exceed twice, e.g. 32M (default: the GPU's L2, or "
                        "the CPU's largest cache as sysfs reports it; a VM may report its host's whole L3)")
    p.add_argument("--no-isolate", dest="isolate", action="store_false",
                   help="CPU: no scheduling measures (workers at nice -10, collectives' timed samples under "
                        "SCHED_RR, SCHED_IDLE spinners keeping vCPUs awake; where permitted; docs/microbench.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _spawned(rank: int, world: int, port: int, args) -> None:
    from .runner import worker

    try:
        worker(rank, world, port, args)
    except KeyboardInterrupt:  # Ctrl-C reaches every worker too: the launcher reports it, once
        sys.exit(130)


def _summary(args, wall_s: float, since: float = float("inf")) -> str:
    import csv
    from pathlib import Path

    from perfmodel.calibration.kernel_tables import table_of

    from .writer import env_path

    def count(path) -> tuple[int, int]:
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except FileNotFoundError:
            rows = []
        return len(rows), sum(1 for r in rows if r.get("error"))

    n, err = count(args.out)
    text = f"microbench: {n} rows ({err} errors) in {args.out}"
    for t in sorted(Path(args.out).parent.glob("*.csv")):  # kernel tables this run wrote (moe / mla suites)
        if table_of(t) and t.stat().st_mtime >= since:
            text += ", {} rows ({} errors) in {}".format(*count(t), t)
    return f"{text}, environment in {env_path(args.out)}; {wall_s:.1f} s"


def main(argv=None) -> int:
    from perfmodel.cliutil import run_cli

    return run_cli(_main, argv)


def _main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)  # bad flags: argparse prints one line and exits 2
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.nproc is not None and args.nproc < 1:
        print(f"error: --nproc {args.nproc} must be >= 1", file=sys.stderr)
        return 2
    from .shapes import GEMM_DTYPES

    bad = [d for d in args.dtypes or () if d not in GEMM_DTYPES]
    if bad:
        print(f"error: --dtypes {bad[0]!r} unknown: choose from {', '.join(GEMM_DTYPES)}", file=sys.stderr)
        return 2
    try:  # names that the workers would otherwise trip over
        if args.model:
            from perfmodel.modelspec import load_model

            load_model(args.model)
        if args.hardware:
            from perfmodel.hardware import load_hardware

            load_hardware(args.hardware)
        if args.profile:
            from perfmodel.calibration.profile import load_profile

            load_profile(args.profile)
        if "RANK" not in os.environ or os.environ.get("RANK") == "0":  # rank 0 writes --out
            from perfmodel.cliutil import check_writable

            check_writable(args.out)
    except ValueError as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if args.device != "cpu":  # CPU runs never need torch in this (launcher) process
        import torch

        args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if args.device == "cuda" and not torch.cuda.is_available():
            print("error: --device cuda but torch sees no CUDA device (use --device cpu)", file=sys.stderr)
            return 2
    if args.nproc is None:
        args.nproc = int(os.environ.get("WORLD_SIZE", 0)) or (_gpus() if args.device == "cuda" else 2)
    t0, since = time.perf_counter(), time.time() - 1.0  # (file times: a second's slack)
    try:
        if torchrun:
            from .runner import worker

            worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None, args)
            if int(os.environ["RANK"]) != 0:
                return 0
        elif args.nproc == 1:
            from .runner import worker

            worker(0, 1, _free_port(), args)
        else:
            import multiprocessing as mp  # torch.multiprocessing's spawn without importing torch here

            _start(mp, args)
    except Exception as e:  # noqa: BLE001 - a worker died (its traceback was printed by the worker)
        print(f"error: microbench worker failed: {e}", file=sys.stderr)
        return 1
    print(_summary(args, time.perf_counter() - t0, since))
    return 0


def _start(mp, args) -> None:
    """Spawn args.nproc workers on this machine (fresh interpreters) and wait; when one fails the
    others are stopped (they would wait for it until the collective timeout) and this raises."""
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_spawned, args=(r, args.nproc, port, args)) for r in range(args.nproc)]
    try:
        for p in procs:
            p.start()
        alive = list(procs)
        while alive:
            wait([p.sentinel for p in alive])
            failed = [p for p in alive if p.exitcode not in (None, 0)]
            if failed:
                _stop(procs)
                raise RuntimeError(f"rank {procs.index(failed[0])} exited with code {failed[0].exitcode}")
            alive = [p for p in alive if p.exitcode is None]
    except KeyboardInterrupt:  # Ctrl-C reached the workers too: let them end, stop what is left, report
        deadline = time.monotonic() + 3.0
        for p in procs:
            if p.pid is not None:
                p.join(max(0.0, deadline - time.monotonic()))
        _stop(procs)
        raise


def _stop(procs, grace_s: float = 5.0) -> None:
    """Terminate the started workers that are still running and wait for them (kill after grace_s)."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            p.terminate()
    for p in procs:
        if p.pid is not None:
            p.join(grace_s)
            if p.exitcode is None:
                p.kill()
                p.join()


if __name__ == "__main__":
    sys.exit(main())
