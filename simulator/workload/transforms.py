"""Pure Workload -> Workload transformations: time window, rate scaling, sampling, context clipping."""
from __future__ import annotations

import math

import numpy as np

from .errors import TraceError
from .workload import Workload, rebase


def _noted(w: Workload, df, note: str, **changes) -> Workload:
    return w.replace(requests=rebase(df), notes=w.notes + (note,), **changes)


def parse_window(text: str) -> dict:
    """'3600:7200' -> {"start_s": 3600.0, "end_s": 7200.0} (time_window's keywords); either side may be
    empty ('3600:' or ':600': None)."""
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return {"start_s": float(start) if start.strip() else None, "end_s": float(end) if end.strip() else None}
    except ValueError:
        raise TraceError(text, "expected START:END in seconds, e.g. 3600:7200",
                         field="--time-window") from None


def time_window(w: Workload, start_s: float | None = None, end_s: float | None = None) -> Workload:
    """Requests arriving in [start_s, end_s) of the trace's clock, rebased so the first is at 0 s."""
    t = w.requests["arrival_s"].to_numpy()
    lo = -math.inf if start_s is None else start_s
    hi = math.inf if end_s is None else end_s
    if hi <= lo:
        raise TraceError(w.source, f"empty time window {lo:g}:{hi:g} (end must be after start)",
                         field="--time-window")
    keep = (t >= lo) & (t < hi)
    if not keep.any():
        raise TraceError(w.source, f"time window {lo:g}:{hi:g} s selects no requests (trace "
                         f"spans 0-{t[-1]:g} s)", field="--time-window")
    span = f"{'' if start_s is None else f'{start_s:g}'}:{'' if end_s is None else f'{end_s:g}'}"
    note = f"time window {span} s kept {int(keep.sum())} of {len(t)} requests"
    return _noted(w, w.requests[keep], note)


def rate_scale(w: Workload, factor: float) -> Workload:
    """Multiply the arrival rate by `factor` (inter-arrival times divided by it); lengths unchanged."""
    if not (math.isfinite(factor) and factor > 0):
        raise TraceError(w.source, f"rate scale must be a positive number, got {factor}",
                         field="--rate-scale")
    df = w.requests.assign(arrival_s=w.requests["arrival_s"] / factor)
    return _noted(w, df, f"arrival rate scaled x{factor:g}")


def parse_sample(text: str) -> dict:
    """'1000' -> {'n': 1000}; '0.1' -> {'fraction': 0.1} (a number below 1 is a fraction)."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if v <= 0 or not math.isfinite(v) or (v >= 1 and v != int(v)):
        raise TraceError(text, "expected a request count (e.g. 1000) or a fraction in (0, 1)",
                         field="--sample")
    return {"fraction": v} if v < 1 else {"n": int(v)}


def sample(w: Workload, n: int | None = None, fraction: float | None = None,
           seed: int = 0) -> Workload:
    """A uniform random subset of requests (without replacement, time order kept), seeded."""
    total = len(w)
    k = n if n is not None else max(1, round(total * (fraction or 0.0)))
    if not 1 <= k <= total:
        raise TraceError(w.source, f"cannot sample {k} of {total} requests", field="--sample")
    idx = np.sort(np.random.default_rng(seed).choice(total, size=k, replace=False))
    return _noted(w, w.requests.iloc[idx], f"sampled {k} of {total} requests (seed {seed})")


def clip_context(w: Workload, max_context_tokens: int) -> Workload:
    """Fit every request in a model's context: input+output <= max_context_tokens.

    The prompt is cut first, leaving room for one output token when the request has any;
    the output is then capped at what is left (vLLM stops generating at max_model_len).
    """
    if max_context_tokens < 2:
        raise TraceError(w.source, f"max context must be >= 2 tokens, got {max_context_tokens}",
                         field="--max-context-clip")
    df = w.requests
    inp, out = df["input_tokens"].to_numpy(), df["output_tokens"].to_numpy()
    new_in = np.minimum(inp, max_context_tokens - (out > 0))
    new_out = np.minimum(out, max_context_tokens - new_in)
    changed = int(((new_in != inp) | (new_out != out)).sum())
    df = df.assign(input_tokens=new_in, output_tokens=new_out)
    note = f"{changed} request(s) clipped to a {max_context_tokens}-token context"
    return _noted(w, df, note, clipped=w.clipped + changed)
