"""A replayed (or imported) measured run as the simulator's result files: requests.parquet in the
simulator's schema (docs/outputs.md), an empty steps.parquet (a client sees no engine steps), and a
summary.json with the keys `simulator.results.metrics.summarize` gives plus vLLM's result-file keys
and per-request lists, so `simulate compare` and anything reading a run directory reads it.

Replay-only request columns: `trace_input_tokens` (the trace's prompt length; `input_tokens` is the
server's `usage.prompt_tokens` when it reports one), `requested_output_tokens` (the trace's output
length, sent as max_tokens; `output_tokens` is what was generated, so TPOT divides by the real count),
`token_arrivals` (streamed chunks carrying tokens). A prefill-only row (trace output 0, sent with
max_tokens 1: client.payload) is recorded as the simulator records one: completed with 0 output
tokens, no first token (TTFT and TPOT NaN), finished when its one token came (the end of its prefill).
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from simulator.results.metrics import summarize
from simulator.results.records import STEP_COLUMNS
from simulator.run_record import detail_lists, max_in_flight, peak_second


def empty_steps() -> pd.DataFrame:
    df = pd.DataFrame({c: np.zeros(0) for c in STEP_COLUMNS})
    df["engine"] = df["engine"].astype(np.int64)
    df["steps"] = df["steps"].astype(np.int64)
    df["mode"] = pd.Categorical([])
    return df


def replay_frame(trace: pd.DataFrame, t0: float, outcomes, arrival_s) -> tuple[pd.DataFrame, list]:
    """(requests frame, per-request inter-token gaps in s) from the client's outcomes, in trace order."""
    n = len(outcomes)
    ok = np.array([o.ok for o in outcomes], dtype=bool)
    prefill_only = trace["output_tokens"].to_numpy(np.int64) == 0
    gen = np.array([o.generated if o.ok and not p else 0 for o, p in zip(outcomes, prefill_only)], dtype=np.int64)
    server_in = [o.prompt_tokens for o in outcomes]
    trace_in = trace["input_tokens"].to_numpy(np.int64)
    issued = np.array([o.issued - t0 for o in outcomes], dtype=float)
    first = np.where(ok & ~prefill_only, np.array([o.first_token - t0 for o in outcomes], dtype=float), np.nan)
    finish = np.where(ok, np.array([o.finish - t0 for o in outcomes], dtype=float), np.nan)
    df = pd.DataFrame({
        "request_id": trace["request_id"].to_numpy(), "arrival_s": np.asarray(arrival_s, dtype=float),
        "issued_s": issued, "scheduled_s": np.full(n, np.nan), "first_token_s": first, "finish_s": finish,
        "input_tokens": np.array([s if s is not None else t for s, t in zip(server_in, trace_in)], dtype=np.int64),
        "output_tokens": gen, "generated_tokens": gen,
        "priority": trace["priority"].to_numpy(np.int64) if "priority" in trace.columns else np.zeros(n, np.int64),
        "engine": np.full(n, -1, dtype=np.int64), "preemptions": np.zeros(n, dtype=np.int64),
        "status": np.where(ok, "completed", "rejected"),
        "reject_reason": np.array([o.error or ("" if o.ok else "no tokens") for o in outcomes], dtype=object),
        "trace_input_tokens": trace_in,
        "requested_output_tokens": trace["output_tokens"].to_numpy(np.int64),
        "token_arrivals": np.array([len(o.token_times) for o in outcomes], dtype=np.int64),
    })
    with_times(df)
    gaps = [list(np.diff(o.token_times)) if o.ok and not p else [] for o, p in zip(outcomes, prefill_only)]
    return df, [[float(g) for g in x] for x in gaps]


def with_times(df: pd.DataFrame) -> pd.DataFrame:
    """queue_ms, ttft_ms, e2el_ms, tpot_ms as RequestRecords.frame computes them (queue: unknown)."""
    out = df["output_tokens"].to_numpy()
    df["queue_ms"] = np.nan
    df["ttft_ms"] = 1e3 * (df["first_token_s"] - df["issued_s"])
    df["e2el_ms"] = 1e3 * (df["finish_s"] - df["issued_s"])
    with np.errstate(invalid="ignore", divide="ignore"):
        df["tpot_ms"] = np.where(out > 1, 1e3 * (df["finish_s"] - df["first_token_s"]) / np.maximum(out - 1, 1), np.nan)
    return df


def itl_stats(itls: list, ok, out: dict) -> None:
    """mean_/median_/std_/p90_/p99_itl_ms over every measured gap of the completed requests."""
    v = 1e3 * np.array([g for k, x in zip(ok, itls) if k for g in x], dtype=float)
    keys = ("mean", "median", "std", "p90", "p99")
    if not len(v):
        out.update({f"{k}_itl_ms": None for k in keys})
        return
    vals = (v.mean(), np.median(v), v.std(), np.percentile(v, 90), np.percentile(v, 99))
    out.update({f"{k}_itl_ms": float(x) for k, x in zip(keys, vals)})


def measured_summary(req: pd.DataFrame, itls: list, *, model: str | None, max_concurrency: int | None,
                     backend: str | None, config: dict) -> dict:
    """summarize's keys (measured), the measured ITL statistics, vLLM's result-file keys with the
    per-request lists (itls included) and `config` (how the run was made)."""
    summ = summarize(req, empty_steps(), [])
    ok = (req["status"] == "completed").to_numpy()
    itl_stats(itls, ok, summ)
    peak_tokens, peak_conc = peak_second(req)
    summ.update({
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": backend, "backend": backend,
        "label": None, "model_id": model, "tokenizer_id": None, "num_prompts": int(len(req)),
        "request_rate": "inf", "burstiness": None, "max_concurrency": max_concurrency or None,
        "failed": int((~ok).sum()), "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_conc,
        "rtfx": None, "generated_texts": None,
    })
    summ.update(detail_lists(req))
    summ["itls"] = itls
    summ["max_in_flight_requests"] = max_in_flight(req)
    summ["config"] = config
    return summ
