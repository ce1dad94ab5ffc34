"""Where a sweep's runs execute: this process, a pool of processes, or a Ray cluster.

Each executor takes the pending tasks and yields one result row per task as runs finish (in any
order); every row is computed by the same `run_task`, so executors give identical tables.
"""
from __future__ import annotations

import functools
import json
import multiprocessing
import signal
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed

from simulator.engine.config import framework_engine
from simulator.run import RunSpec, run
from simulator.workload import load_trace, rate_scale as scale


@functools.lru_cache(maxsize=8)
def _workload(trace: str, rate_scale: float, seed):
    w = load_trace(trace) if seed is None else load_trace(trace, seed=int(seed))
    return w if rate_scale == 1.0 else scale(w, rate_scale)


def run_task(task: dict) -> dict:
    """One run of a sweep: its coordinates, run_id/run_index and the summary keys (dicts as JSON
    text), or its coordinates and `error` when the run cannot be done (bad layout, trace, ...)."""
    opts = task.get("options", {})
    row = {k: v for k, v in task.items() if k != "options"}
    try:
        wl = _workload(task["trace"], task["rate_scale"], opts.get("seed"))
        rs = RunSpec(policy=task["policy"], model=task["model"], hardware=task["hardware"], gpus=task["gpus"],
                     weights=task["weights"], kv_dtype=task["kv_dtype"], profile=opts.get("profile"),
                     layout=task["layout"] or None, policy_args=json.loads(task["policy_args"]),
                     engine=framework_engine(task.get("framework", "vllm"), **opts.get("engine", {})),
                     framework=task.get("framework", "vllm"), max_concurrency=task["max_concurrency"],
                     slo_ttft_ms=opts.get("slo_ttft_ms"), slo_tpot_ms=opts.get("slo_tpot_ms"),
                     gpu_memory_utilization=opts.get("gpu_memory_utilization"),
                     step_overhead_ms=opts.get("step_overhead_ms"), nodes=int(opts.get("nodes", 1)),
                     tokenize_us_per_token=opts.get("tokenize_us_per_token"),
                     gpus_per_node=opts.get("gpus_per_node"),
                     client_turnaround_ms=float(opts.get("client_turnaround_ms", 0.0)))
        summ = dict(run(wl, rs).summary)
        summ["modes"] = summ.pop("layout")  # the coordinates keep their own `layout` and `model`
        summ["model_name"] = summ.pop("model")
        summ.pop("date", None)  # when it ran: rows stay identical whichever executor ran them
        if summ.get("request_rate") == "inf":  # vLLM's "inf" string: a float column in the table
            summ["request_rate"] = float("inf")
        row.update({k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
                    for k, v in summ.items() if k not in row})
        row["error"] = ""
    except Exception as e:  # noqa: BLE001  (a sweep records a failed run and goes on)
        row["error"] = f"{type(e).__name__}: {e}".strip() or traceback.format_exc(limit=1)
    return row


def run_inline(tasks, workers, address=None, fn=None):
    """In this process, one run after another (workers=1; debugging). `fn`: what runs a task (every
    executor takes it; simulate recommend passes its own evaluate); None: run_task, looked up at call
    time (tests patch it)."""
    fn = fn or run_task
    for t in tasks:
        yield fn(t)


def run_local(tasks, workers, address=None, fn=None):
    """A pool of `workers` processes on this machine (spawned: safe beside threads and Ray)."""
    if workers <= 1 or len(tasks) <= 1:
        yield from run_inline(tasks, workers, fn=fn)
        return

    fn = fn or run_task
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx, initializer=ignore_sigint)
    try:
        for fut in as_completed([pool.submit(fn, t) for t in tasks]):
            yield fut.result()
    except KeyboardInterrupt:  # Ctrl-C: drop the queued runs (workers ignore SIGINT; the parent decides)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops the sweep (exit 130) without waiting for the queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_ray(tasks, workers, address=None, fn=None):
    """Ray tasks (one CPU each) on the cluster at `address` ('auto': a running one), or on a local
    Ray instance of `workers` CPUs started here; reuses a Ray already initialised by the caller."""
    try:
        import ray  # optional extra [ray]: imported only when a sweep asks for it, so the core install runs
    except ImportError:
        raise SystemExit("error: --executor ray needs Ray: pip install 'parallelism-sim[ray]'") from None
    started = not ray.is_initialized()
    if started:
        kw = {"address": address} if address else {"num_cpus": workers}
        ray.init(include_dashboard=False, log_to_driver=False, **kw)
    try:
        remote = ray.remote(num_cpus=1)(fn or run_task)
        pending = [remote.remote(t) for t in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


EXECUTORS = {"local": run_local, "ray": run_ray}
