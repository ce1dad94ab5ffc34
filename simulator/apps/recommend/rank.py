"""Simulate candidates (in bound order, pruning as results come in) and rank them.

Objective: SLO goodput per GPU = requests meeting both SLOs (TTFT <= X and TPOT <= Y) / the trace's
duration (its arrival span, the same for every candidate) / GPUs. A candidate `met` the SLOs when at
least `pct`% of the trace's requests meet both. Ranking: met first, then goodput, then lower p90 TTFT.
"""
from __future__ import annotations

import functools
import math
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import numpy as np

from simulator.apps.recommend.prune import prune_reason, result_key
from simulator.run import RunSpec, run
from simulator.apps.sweep.executors import ignore_sigint, run_ray
from simulator.workload import load_trace


@functools.lru_cache(maxsize=4)
def _workload(trace: str):
    return load_trace(trace)


def evaluate(task: dict) -> dict:
    """One candidate simulated (simulator.run.run, the one run path): the figures ranking needs."""
    c, pct = task["candidate"], task["pct"]
    out = {"label": c["label"]}
    try:
        wl = task["workload"] if task.get("workload") is not None else _workload(task["trace"])
        rs = RunSpec(policy=c["policy"], layout=c["layout"], policy_args=tuple(sorted(c["policy_args"].items())),
                     model=task["model"], hardware=task["hardware"], gpus=task["gpus"], nodes=task.get("nodes", 1),
                     gpus_per_node=task.get("gpus_per_node"), weights=task["weights"],
                     profile=task["profile"], framework=task["framework"],
                     slo_ttft_ms=task["slo_ttft_ms"], slo_tpot_ms=task["slo_tpot_ms"])
        r = run(wl, rs)
    except Exception as e:  # noqa: BLE001  (a refused candidate is reported, the search goes on)
        out["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
        return out
    s = r.summary
    comp = r.requests[r.requests["status"] == "completed"]

    def pctl(col):
        v = comp[col].dropna().to_numpy()
        return float(np.percentile(v, pct)) if len(v) else None

    out.update(good=int(s["goodput_requests"] or 0), num_requests=int(s["num_requests"]),
               completed=int(s["completed"]), duration_s=float(s["duration"]),
               p90_ttft_ms=s.get("p90_ttft_ms"), p90_tpot_ms=s.get("p90_tpot_ms"),
               ttft_pct_ms=pctl("ttft_ms"), tpot_pct_ms=pctl("tpot_ms"),
               tokens_per_s=float(s["total_token_throughput"]), deployment=s["layout"],
               saturated=bool(s.get("saturated")), notes=list(s.get("notes") or []))
    return out


def finish_row(row: dict, span_s: float, gpus: int, pct: float, gpu_hour_usd: float | None,
               slo_ttft_ms: float, slo_tpot_ms: float) -> dict:
    """Objective and the figures beside it, from an evaluate() row."""
    if "error" in row:
        return row
    n = max(row["num_requests"], 1)
    row["attainment"] = row["good"] / n
    row["met"] = row["good"] >= pct / 100.0 * n
    row["goodput_per_gpu"] = row["good"] / span_s / gpus
    row["throughput_per_gpu"] = row["tokens_per_s"] / gpus
    row["usd_per_mtok"] = (gpu_hour_usd * gpus / 3600.0 / row["tokens_per_s"] * 1e6
                           if gpu_hour_usd and row["tokens_per_s"] > 0 else None)
    row["ttft_miss_ms"] = max(0.0, (row["ttft_pct_ms"] if row["ttft_pct_ms"] is not None else math.inf) - slo_ttft_ms)
    row["tpot_miss_ms"] = max(0.0, (row["tpot_pct_ms"] or 0.0) - slo_tpot_ms)
    return row


def key(row: dict) -> tuple:
    return result_key(row["met"], row["good"], row["p90_ttft_ms"])


def rank(rows: list[dict]) -> list[dict]:
    """Best first; failed runs left out."""
    return sorted((r for r in rows if "error" not in r), key=lambda r: (tuple(-x for x in key(r)), r["label"]))


def search(cands, bounds, task_base: dict, workers: int, finish, prune: bool = True, log=None,
           executor: str = "local"):
    """Simulate candidates highest bound first, `workers` at a time, skipping those whose bound
    cannot beat the best result so far. Returns (rows, pruned {label: reason}). `executor` 'ray':
    waves of `workers` candidates through simulator.apps.sweep.executors.run_ray (one Ray started here for
    all waves, or the caller's), pruning between waves; 'local': a process pool fed one candidate
    each time one finishes, so pruning sees every result as it comes."""
    order = sorted(cands, key=lambda c: (tuple(-x for x in bounds[c.label].key), c.label))
    rows, pruned, best = [], {}, None
    queue = [(c, dict(task_base, candidate=c.as_dict())) for c in order]

    def take(row):
        nonlocal best
        row = finish(row)
        rows.append(row)
        if "error" not in row and (best is None or key(row) > best):
            best = key(row)
        if log:
            log(f"simulated {row['label']}: " + (row["error"] if "error" in row else
                f"good {row['good']}/{row['num_requests']}, p90 TTFT {row['p90_ttft_ms'] or float('nan'):.0f} ms"))

    def skip(c) -> bool:
        why = prune_reason(bounds[c.label], best) if prune else None
        if why:
            pruned[c.label] = why
        return why is not None

    if executor == "ray":
        _ray_waves(queue, workers, skip, take)
    elif workers <= 1 or len(queue) <= 1:
        for c, t in queue:
            if not skip(c):
                take(evaluate(t))
    else:
        _local_pool(queue, workers, skip, take)
    return rows, pruned


def _ray_waves(queue, workers, skip, take) -> None:
    import ray  # optional extra [ray]: only `--executor ray` imports it (run_ray checked it is installed)

    started = not ray.is_initialized()
    if started:  # run_ray would start and stop a Ray per call; one for every wave
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        while queue:
            wave = []
            while queue and len(wave) < workers:
                c, t = queue.pop(0)
                if not skip(c):
                    wave.append(t)
            for row in run_ray(wave, workers, fn=evaluate):
                take(row)
    finally:
        if started:
            ray.shutdown()


def _local_pool(queue, workers, skip, take) -> None:
    """The sweep's local executor (spawned processes that leave Ctrl-C to the parent), fed one task
    each time one finishes: simulator.apps.sweep.executors.run_local submits a whole list at once, which
    would leave nothing to prune."""
    pool = ProcessPoolExecutor(max_workers=min(workers, len(queue)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=ignore_sigint)
    try:
        running = set()
        while queue or running:
            while queue and len(running) < workers:
                c, t = queue.pop(0)
                if not skip(c):
                    running.add(pool.submit(evaluate, t))
            if running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    take(f.result())
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
