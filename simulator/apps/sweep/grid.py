"""`simulate sweep`: the product of a grid of runs, one result row per run, resumable.

    simulate sweep --grid GRID.toml --out results.parquet [--executor local|ray] [--workers N]
                   [--ray-address auto] [--retry-errors]

GRID.toml: a [grid] table (or several [[grid]] tables, concatenated) whose keys are axes; a
scalar is a one-value axis. Axes: policies, layouts, traces, rate_scales, models, hardware, gpus,
weights (default, as simulate: the checkpoint's format, else fp8 where the hardware has fp8, else bf16), kv_dtypes,
max_concurrency, frameworks (vllm, sglang, trtllm: each one's scheduler and memory rule; default vllm). [grid.policy_args] maps a policy to a list of argument tables (one run each;
default one run with none). [options]: profile ("none" = datasheet, default the hardware's
profile), slo_ttft_ms, slo_tpot_ms, seed, engine (EngineConfig fields), and the knobs `simulate`
takes as flags: max_model_len, gpu_memory_utilization, step_overhead_ms, tokenize_us_per_token,
client_turnaround_ms (default: the model's limit, 0.9, 1 ms, the framework's measured tokenizer, 0;
`engine = {max_model_len = N}` says the same as max_model_len = N;
client_turnaround_ms needs every run closed-loop, max_concurrency > 0).

    [grid]
    policies = ["tp", "dp", "shift"]
    traces = ["synthetic:poisson?n=40&rate=4&input=512&output=32"]
    rate_scales = [0.5, 1, 2, 4]
    models = ["llama-3.1-8b"]
    hardware = ["h100"]
    gpus = 2
    [grid.policy_args]
    shift = [{threshold = 128}, {threshold = 512}]

A run is identified by the hash of its coordinates (`run_id`); rows already in --out are skipped,
so an interrupted sweep picks up where it stopped. Every row carries the summary keys of
`simulate` (dicts as JSON text) plus the coordinates; a run that fails has its `error` filled.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from perfmodel.framework import check_knobs
from perfmodel.hardware import load_hardware
from perfmodel.modelspec import default_weights as model_default_weights
from simulator.results.files import check_writable_file
from simulator.run import check_client_turnaround
from simulator.apps.sweep.executors import EXECUTORS

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

AXES = {  # grid key -> coordinate name
    "policies": "policy", "layouts": "layout", "traces": "trace", "rate_scales": "rate_scale",
    "models": "model", "hardware": "hardware", "gpus": "gpus", "weights": "weights",
    "kv_dtypes": "kv_dtype", "max_concurrency": "max_concurrency", "frameworks": "framework",
}
DEFAULTS = {"layout": "", "rate_scale": 1.0, "model": "llama-3.3-70b", "hardware": "h200", "gpus": 8,
            "weights": None, "kv_dtype": "bf16", "max_concurrency": 0, "framework": "vllm"}  # weights None: as simulate, by hardware
OPTIONS = ("profile", "slo_ttft_ms", "slo_tpot_ms", "seed", "engine", "max_model_len", "gpu_memory_utilization",
           "step_overhead_ms", "nodes", "gpus_per_node", "client_turnaround_ms", "tokenize_us_per_token")  # nodes: the gpus axis is then the total (docs/multinode.md)
COORDS = ("policy", "policy_args", "layout", "trace", "rate_scale", "model", "hardware", "gpus",
          "weights", "kv_dtype", "max_concurrency", "framework")


TURN = "client_turnaround_ms ="  # how the [options] key is named in its errors


class GridError(ValueError):
    """A grid file that cannot be expanded: the message names the key at fault."""


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def expand_grid(grid: dict) -> list[dict]:
    """Tasks (dicts of coordinates and options) of a parsed grid file, in a stable order."""
    options = grid.get("options", {})
    bad = set(options) - set(OPTIONS)
    if bad:
        raise GridError(f"[options]: unknown key(s) {', '.join(sorted(bad))}; allowed {', '.join(OPTIONS)}")
    options = _knob_options(options)
    tables = grid.get("grid")
    if tables is None:
        raise GridError("no [grid] table (axes: " + ", ".join(AXES) + ")")
    tasks, seen = [], set()
    for table in _as_list(tables):
        table = dict(table)
        pargs = table.pop("policy_args", {})
        bad = set(table) - set(AXES)
        if bad:
            raise GridError(f"[grid]: unknown axis {', '.join(sorted(bad))}; axes are {', '.join(AXES)}")
        for k in ("policies", "traces"):
            if not table.get(k):
                raise GridError(f"[grid]: axis {k!r} is required")
        names = list(AXES)
        values = [_as_list(table[k] if k in table else DEFAULTS[AXES[k]]) for k in names]
        for combo in itertools.product(*values):
            coords = {AXES[k]: v for k, v in zip(names, combo)}
            for args in _as_list(pargs.get(coords["policy"], [{}])):
                task = {"policy_args": json.dumps(dict(sorted(args.items()))), **coords}
                task["layout"] = task["layout"] or ""
                task["weights"] = task["weights"] or default_weights(task["model"], task["hardware"])
                task["rate_scale"] = float(task["rate_scale"])
                task["gpus"], task["max_concurrency"] = int(task["gpus"]), int(task["max_concurrency"])
                try:
                    check_client_turnaround(options.get("client_turnaround_ms", 0.0), task["max_concurrency"], TURN)
                except ValueError as e:
                    raise GridError(f"[options]: {e}") from None
                task = {k: task[k] for k in COORDS}
                rid = run_id(task, options)
                if rid in seen:
                    continue
                seen.add(rid)
                tasks.append({**task, "run_id": rid, "run_index": len(tasks), "options": options})
    return tasks


def default_weights(model: str, hardware: str) -> str:
    """simulate's default (perfmodel.modelspec.default_weights): the checkpoint's own format, else fp8 where
    the hardware has fp8 tensor cores, else bf16 (an unknown hardware keeps fp8 here and fails as a run,
    with its error in the row)."""
    try:
        has_fp8 = load_hardware(hardware).has_fp8
    except (ValueError, FileNotFoundError):
        has_fp8 = True
    return model_default_weights(model, has_fp8)


def _knob_options(options: dict) -> dict:
    """[options] with max_model_len moved into engine (one spelling, one run_id) and the knobs checked."""
    options = dict(options)
    try:
        check_knobs(options.get("gpu_memory_utilization"), options.get("step_overhead_ms"),
                    options.get("tokenize_us_per_token"))
        check_client_turnaround(options.get("client_turnaround_ms", 0.0), 1, TURN)
    except ValueError as e:
        raise GridError(f"[options]: {e}") from None
    if "max_model_len" in options:
        n, engine = options.pop("max_model_len"), dict(options.get("engine", {}))
        if engine.get("max_model_len", n) != n:
            raise GridError(f"[options]: max_model_len = {n} and engine.max_model_len = {engine['max_model_len']}: "
                            "give one")
        options["engine"] = {**engine, "max_model_len": n}
    return options


def run_id(coords: dict, options: dict) -> str:
    """Stable 16-hex id of a run's coordinates and options (its identity across reruns)."""
    keys = [k for k in COORDS if not (k == "framework" and coords.get(k, "vllm") == "vllm")]  # ids of
    # runs from before the framework axis stay the same (their framework was vLLM's)
    text = json.dumps({**{k: coords[k] for k in keys}, "options": options}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def load_grid(path: str | Path) -> list[dict]:
    """Parse a GRID.toml and expand it."""
    try:
        with open(path, "rb") as f:
            return expand_grid(tomllib.load(f))
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{path}: {e}") from None


def read_results(path: Path) -> pd.DataFrame:
    """Rows already written (empty frame if none)."""
    return pd.read_parquet(path) if path.is_file() else pd.DataFrame()


def write_results(path: Path, rows: list[dict], old: pd.DataFrame) -> pd.DataFrame:
    """Old rows plus new ones, ordered by run_index, written atomically (tmp file + rename)."""
    df = pd.concat([old, pd.DataFrame(rows)], ignore_index=True) if rows else old
    if len(df):
        df = df.drop_duplicates("run_id", keep="last").sort_values(["run_index", "run_id"], kind="stable")
        df = df.reset_index(drop=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return df


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate sweep",
                                description="Run the product of a grid of simulations (policies x arguments x "
                                "layouts x traces x rates x models x hardware).",
                                epilog="exit codes: 0 every run of the grid done, 1 some runs failed (listed on "
                                "stderr, their rows carry `error`; --retry-errors reruns them), 2 bad grid or "
                                "unwritable --out, 130 interrupted (finished runs are kept in --out)")
    p.add_argument("--grid", required=True, help="GRID.toml (format: simulator/apps/sweep/grid.py)")
    p.add_argument("--out", required=True, help="results.parquet: one row per run; finished runs are skipped")
    p.add_argument("--executor", default="local", choices=("local", "ray"),
                   help="where runs execute: local processes or a Ray cluster (default: local)")
    p.add_argument("--workers", type=int, default=0, help="parallel runs (0: the CPU count; 1 = in process)")
    p.add_argument("--ray-address", help="Ray cluster address (e.g. auto); default: start a local Ray")
    p.add_argument("--retry-errors", action="store_true", help="rerun runs whose row has an error (default: "
                   "skip every run already in --out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on stderr)")
    return p


def run_sweep(tasks: list[dict], out: Path, executor: str = "local", workers: int = 0,
              ray_address: str | None = None, retry_errors: bool = False, progress: bool = True) -> pd.DataFrame:
    """Run the tasks not yet in `out`, saving as runs finish; the full results table."""
    old = read_results(out)
    done = set(old["run_id"]) if len(old) else set()
    if retry_errors and "error" in old:
        done -= set(old.loc[old["error"].fillna("") != "", "run_id"])
    todo = [t for t in tasks if t["run_id"] not in done]
    rows, last = [], time.monotonic()
    with tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="run", desc="sweep",
              disable=not progress, file=sys.stderr) as bar:
        for row in EXECUTORS[executor](todo, workers or os.cpu_count() or 1, ray_address):
            rows.append(row)
            bar.update(1)
            if time.monotonic() - last > 5:  # save now and then: an interrupted sweep loses little
                old, rows, last = write_results(out, rows, old), [], time.monotonic()
    return write_results(out, rows, old)


def _coords_text(row) -> str:
    """A failed run's coordinates, the ones that say something (policy_args '{}' and an empty layout left out)."""
    parts = []
    for k in COORDS:
        v = row.get(k)
        if v is None or v == "" or (k == "policy_args" and v == "{}") or v != v:
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def sweep_main(argv=None) -> int:
    """`simulate sweep`: 0 when every run of the grid ran, 1 when some failed (each listed on stderr), 2 on a
    bad grid or an --out that cannot be written (checked before any run)."""
    args = build_parser().parse_args(argv)
    try:
        check_writable_file(args.out, "--out")
        tasks = load_grid(args.grid)
    except (GridError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    df = run_sweep(tasks, out, args.executor, args.workers, args.ray_address, args.retry_errors,
                   not args.no_progress)
    errors = int((df["error"].fillna("") != "").sum()) if "error" in df else 0
    print(f"{out}: {len(df)} rows ({len(tasks)} runs in the grid, {errors} with errors)")
    mine = {t["run_id"] for t in tasks}
    failed = df[df["run_id"].isin(mine) & (df["error"].fillna("") != "")] if "error" in df and len(df) else df.iloc[:0]
    for _, row in failed.iterrows():
        print(f"failed: run {row['run_index']} ({_coords_text(row)}): {row['error']}", file=sys.stderr)
    if len(failed):
        print(f"error: {len(failed)} of {len(tasks)} runs failed (rows kept in {out} with `error`; "
              "--retry-errors reruns them)", file=sys.stderr)
        return 1
    return 0
