"""Summary of a run with the keys of vLLM's serving-benchmark result file, plus ours.

Conservation is checked here: requests in = completed + rejected, and tokens generated =
the output tokens of the completed requests; a violation raises (nothing is silently lost).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

PCTS = (("p90", 90), ("p99", 99))


class ConservationError(RuntimeError):
    """A request neither completed nor rejected, or token totals that do not add up."""


def _stats(prefix: str, values, out: dict) -> None:
    """mean_/median_/std_/p90_/p99_<prefix> in vLLM's naming; NaN-free input, None when empty
    (an all-rejected run has no latencies: null in summary.json, '-' in the CLI table)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        for key in ("mean", "median", "std") + tuple(name for name, _ in PCTS):
            out[f"{key}_{prefix}"] = None
        return
    out[f"mean_{prefix}"] = float(v.mean())
    out[f"median_{prefix}"] = float(np.median(v))
    out[f"std_{prefix}"] = float(v.std())
    for name, q in PCTS:
        out[f"{name}_{prefix}"] = float(np.percentile(v, q))


def check_conservation(req: pd.DataFrame) -> None:
    """Every request completed or rejected; generated tokens equal completed outputs."""
    # (masks and the columns read, not copies of the whole frame: issue 36's 1M-request runs)
    unfinished = req.loc[req["status"] == "unfinished", ["request_id"]]
    if len(unfinished):
        raise ConservationError(f"{len(unfinished)} request(s) neither completed nor rejected, e.g. "
                                f"request_id={unfinished['request_id'].iloc[0]}")
    comp = req.loc[req["status"] == "completed", ["generated_tokens", "output_tokens"]]
    if int(comp["generated_tokens"].sum()) != int(comp["output_tokens"].sum()):
        raise ConservationError(f"generated {int(comp['generated_tokens'].sum())} tokens but completed "
                                f"requests asked for {int(comp['output_tokens'].sum())}")


def itl_samples(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies as (step durations, weights = decoding sequences): a step that
    decodes n sequences gives each of them one gap of its duration. A fast-forwarded stretch of
    k steps counts as k steps of its mean duration (its steps differ only by the context growing
    k tokens, a fraction of a percent of a step for LLM-sized contexts)."""
    dec = steps.loc[steps["decode_seqs"] > 0, ["steps", "duration_s", "decode_seqs"]]
    k = dec["steps"].to_numpy().astype(float)
    return dec["duration_s"].to_numpy() / k, dec["decode_seqs"].to_numpy() * k


def _weighted_stats(prefix, values, weights, out):
    if len(values) == 0 or weights.sum() == 0:
        return _stats(prefix, [], out)
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cw = np.cumsum(w) / w.sum()
    mean = float((v * w).sum() / w.sum())
    out[f"mean_{prefix}"] = mean
    out[f"median_{prefix}"] = float(v[np.searchsorted(cw, 0.5)])
    out[f"std_{prefix}"] = float(np.sqrt(((v - mean) ** 2 * w).sum() / w.sum()))
    for name, q in PCTS:
        out[f"{name}_{prefix}"] = float(v[min(len(v) - 1, np.searchsorted(cw, q / 100))])


def summarize(req: pd.DataFrame, steps: pd.DataFrame, engines: list, slo_ttft_ms=None, slo_tpot_ms=None) -> dict:
    """vLLM benchmark keys (completed, total_input_tokens, ..., median_ttft_ms, ...) plus goodput,
    queue_ms, preemptions, rejected (with reasons), KV utilisation and time per mode."""
    check_conservation(req)
    comp = req.loc[req["status"] == "completed", ["finish_s", "input_tokens", "generated_tokens", "ttft_ms", "tpot_ms",
                                                  "e2el_ms", "queue_ms"]]
    t0 = float(req["arrival_s"].min()) if len(req) else 0.0
    # nothing completed: the trace's arrival span (vLLM's benchmark measures wall time the same way)
    end = float(comp["finish_s"].max()) if len(comp) else float(req["arrival_s"].max()) if len(req) else t0
    dur = max(end - t0, 1e-12)  # 1e-12 only for one request or a batch at one instant, never completed
    out = {
        "completed": int(len(comp)), "rejected": int((req["status"] == "rejected").sum()),
        "num_requests": int(len(req)),
        "total_input_tokens": int(comp["input_tokens"].sum()),
        "total_output_tokens": int(comp["generated_tokens"].sum()),
        "duration": dur,
    }
    out["request_throughput"] = out["completed"] / dur
    out["output_throughput"] = out["total_output_tokens"] / dur
    out["total_token_throughput"] = (out["total_input_tokens"] + out["total_output_tokens"]) / dur
    _stats("ttft_ms", comp["ttft_ms"], out)
    _stats("tpot_ms", comp["tpot_ms"], out)
    vals, wts = itl_samples(steps)
    _weighted_stats("itl_ms", 1e3 * vals, wts, out)
    _stats("e2el_ms", comp["e2el_ms"], out)
    _stats("queue_ms", comp["queue_ms"], out)
    good = np.ones(len(comp), dtype=bool)
    if slo_ttft_ms is not None:
        good &= comp["ttft_ms"].fillna(0).to_numpy() <= slo_ttft_ms
    if slo_tpot_ms is not None:
        good &= comp["tpot_ms"].fillna(0).to_numpy() <= slo_tpot_ms
    has_slo = slo_ttft_ms is not None or slo_tpot_ms is not None  # vLLM: null without --goodput
    out["goodput_requests"] = int(good.sum()) if has_slo else None
    out["request_goodput"] = float(good.sum()) / dur if has_slo else None
    out["preemptions"] = int(req["preemptions"].sum())
    reasons = req.loc[req["status"] == "rejected", "reject_reason"].value_counts()
    out["rejected_reasons"] = {str(k): int(v) for k, v in reasons.items()}
    cap = {e["index"]: e["kv_capacity_tokens"] for e in engines}
    if len(steps):
        step_time = steps["duration_s"].to_numpy()
        lut = np.zeros(max(cap) + 1)  # engine index -> its KV capacity (a lookup, not a list per step)
        lut[list(cap)] = list(cap.values())
        util = steps["kv_used_tokens"].to_numpy() / lut[steps["engine"].to_numpy()]
        out["mean_kv_utilization"] = float((util * step_time).sum() / max(step_time.sum(), 1e-12))
        out["max_kv_utilization"] = float(util.max())
        by_mode = steps.groupby("mode", observed=True)["duration_s"].sum()
        out["time_in_mode_s"] = {str(k): float(v) for k, v in by_mode.items()}
        out["num_steps"] = int(steps["steps"].sum())
        out["mode_switches"] = int(_switches(steps))
        out["switch_time_s"] = float(steps["switch_s"].sum())
    out["engines"] = len(engines)
    out["saturated"] = saturated(req, steps)
    # vLLM's prefix cache hit rate: tokens hit / prompt tokens looked up, over every admission
    # (re-admissions after preemption too); null when caching is off or no request carries blocks
    out["prefix_cache_hit_rate"] = None
    if "prefix_query_tokens" in req.columns:
        q = int(req["prefix_query_tokens"].sum())
        out["prefix_cache_hit_rate"] = float(req["prefix_hit_tokens"].sum()) / q if q else None
    return out


SERVED_SHORTFALL = 0.05  # served rate more than 5% below the offered rate: overloaded
UNSERVABLE = ("longer than", "context_length")  # reject reasons of requests too long at any load


def saturated(req: pd.DataFrame, steps: pd.DataFrame) -> bool:
    """Whether the offered load exceeded what the deployment served. True when either holds:
    * rates: offered = (n - 1) / (last arrival - first arrival), served = (completed - 1) /
      (last - first first token), and served < (1 - SERVED_SHORTFALL) x offered. Spans between
      the first and last event of each kind, so a steady latency cancels out; first tokens, not
      finishes, so a late request with a long output is not read as overload (a 60 s BurstGPT window
      on an idle deployment was flagged for its last answer's 15 s of decoding); a prefill-only
      request (no output) counts at its finish; rejected requests are not served, but
      those no load could serve (too long: reasons starting with UNSERVABLE) are not offered either.
    * queue: in the last tenth (in time) of the arrival window, some engine's waiting queue never
      empties and its least-squares trend is upward (a stable queue keeps emptying; only the
      arrival window counts: once arrivals stop every queue drains).
    A batch arriving at one instant (or fewer than two completions) has no offered rate and no
    arrival window: False (an offline benchmark, not an overload)."""
    t = req.loc[~req["reject_reason"].astype(str).str.startswith(UNSERVABLE), "arrival_s"].to_numpy()
    done = req.loc[req["status"] == "completed", ["first_token_s", "finish_s"]]
    fin = np.sort(done["first_token_s"].fillna(done["finish_s"]).to_numpy())  # served: first token
    span = float(t.max() - t.min()) if len(t) else 0.0
    if span <= 0:
        return False
    if len(fin) < 2 or fin[-1] <= fin[0]:
        return True  # arrivals over time, fewer than two served
    if (len(fin) - 1) / (fin[-1] - fin[0]) < (1 - SERVED_SHORTFALL) * (len(t) - 1) / span:
        return True
    lo, hi = float(t.max()) - span / 10, float(t.max())
    tail = steps[(steps["start_s"] >= lo) & (steps["start_s"] <= hi)] if len(steps) else steps
    for _, g in tail.groupby("engine"):
        w, x = g["waiting"].to_numpy(), g["start_s"].to_numpy()
        if len(w) >= 3 and w.min() > 0 and np.polyfit(x - x[0], w, 1)[0] > 0:
            return True
    return False


def _switches(steps: pd.DataFrame) -> int:
    """Mode changes between consecutive steps of the same engine."""
    codes, engine = steps["mode"].cat.codes.to_numpy(), steps["engine"].to_numpy()
    n = 0
    for e in np.unique(engine):  # (two columns, not a groupby of the frame: ~215 MB at 2M step rows)
        c = codes[engine == e]
        n += int((c[1:] != c[:-1]).sum())
    return n


def queued_area(req: pd.DataFrame, edges_s: np.ndarray) -> np.ndarray:
    """Request-seconds spent queued (issued -> first scheduled) within each [edges[i], edges[i+1]): the
    integral of the deployment's queue length, exact (the queue is a step function of the per-request
    times). Requests never scheduled queue until they were rejected (at issue) or until the run's end."""
    a = req["issued_s"].to_numpy(float)
    b = req["scheduled_s"].to_numpy(float)
    last = float(np.nanmax(np.concatenate([b, req["finish_s"].to_numpy(float), edges_s[-1:]])))
    b = np.where(np.isfinite(b), b, np.where(req["status"].to_numpy() == "rejected", a, last))
    ok = np.isfinite(a) & (b > a)
    if not ok.any():
        return np.zeros(len(edges_s) - 1)
    t = np.concatenate([a[ok], b[ok]])
    d = np.concatenate([np.ones(ok.sum()), -np.ones(ok.sum())])
    order = np.argsort(t, kind="stable")
    t, q = t[order], np.cumsum(d[order])  # queue length from t[i] to t[i + 1]
    area = np.concatenate([[0.0], np.cumsum(q[:-1] * np.diff(t))])  # integral up to each t[i]
    return np.diff(np.interp(edges_s, t, area))  # (piecewise linear between events: exact)


def time_series(req: pd.DataFrame, steps: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Per window: arrivals/s, completions, output tokens/s, median TTFT of requests arriving then,
    queue length (the deployment's mean number of requests issued and not yet started, from the
    per-request times: the same figure under every policy, whatever its engines record in `waiting`)
    and the share of time in each mode."""
    w = max(window_s, 1e-9)
    req = req.assign(win=(req["arrival_s"] // w).astype(int))
    g = req.groupby("win")
    ts = pd.DataFrame({"arrival_rate": g.size() / w, "median_ttft_ms": g["ttft_ms"].median()})
    comp = req[req["status"] == "completed"]
    fin = comp.groupby((comp["finish_s"] // w).astype(int))
    ts = ts.join(pd.DataFrame({"output_tokens_per_s": fin["generated_tokens"].sum() / w}), how="outer")
    if len(req):
        hi = np.nanmax(np.concatenate([req["scheduled_s"].to_numpy(float), req["issued_s"].to_numpy(float),
                                       [req["arrival_s"].max()]]))
        n_win = int(hi // w) + 1
        q = queued_area(req, np.arange(n_win + 1) * w) / w
        ts = ts.join(pd.Series(q, index=np.arange(n_win), name="queue_length"), how="outer")
    if len(steps):
        sw = steps.assign(win=(steps["start_s"] // w).astype(int))
        modes = sw.pivot_table(index="win", columns="mode", values="duration_s", aggfunc="sum",
                               observed=True, fill_value=0.0)
        ts = ts.join(modes.add_prefix("mode_s_"), how="outer")
    ts.index = ts.index.astype(float) * w
    ts.index.name = "t_s"
    return ts.fillna(0.0)
