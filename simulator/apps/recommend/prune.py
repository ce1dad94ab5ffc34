"""Closed-form bounds that let `simulate recommend` skip candidates before simulating them.

For each candidate, from perfmodel.estimate on the trace's lengths:
* a lower bound on each request's TTFT and TPOT: the request alone on an idle deployment (one
  unchunked prefill step; one decode step at its prompt's context),
  on a grid of prompt lengths
  (both grow with the prompt, so the grid point just below a prompt bounds it). Dynamic policies run
  one of several layouts per step, so theirs is the least of their own row and every static layout's;
* `possible`: requests whose lower bounds meet both SLOs (with LATENCY_MARGIN of slack);
* a bound on the requests served within SLO: min(possible, THROUGHPUT_SLACK x the closed form's
  saturated request rate x the time they can finish in);
  disaggregated splits are bounded by their own pools (prefill alone + KV transfer; a decode step alone),
  not by the static floor: they never run a prompt on the decode pool or a decode on the prefill pool;
* a lower bound on the p90 TTFT (order statistics keep the per-request bounds' order).
Upper key (can meet the attainment, requests bound, -p90 TTFT bound) against a simulated result's key
(met, good requests, -p90 TTFT): a candidate whose upper key is below the best simulated key cannot win.
The bounds are the closed form's, with slack; tests/test_recommend.py checks them against exhaustive runs.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from perfmodel.disagg import estimate_row
from perfmodel.estimate import estimate
from perfmodel.framework import SchedulerLimits, vllm_default_limits
from perfmodel.layout import LayoutError

GRID_POINTS = 32
LATENCY_MARGIN = 0.9  # lower bounds are scaled by this before they are compared (the simulator's steps differ)
THROUGHPUT_SLACK = 1.5  # the closed form's saturated rate (mean lengths) times this bounds the simulated rate
REASONS = ("slo_unreachable", "goodput_bound", "ttft_bound")


@dataclasses.dataclass
class Bound:
    label: str
    can_meet: bool
    good_bound: float  # requests within both SLOs, at most
    p90_ttft_lb_ms: float
    unloaded_ttft_ms: float  # at the trace's median prompt
    unloaded_tpot_ms: float
    saturated_tokens_per_s: float

    @property
    def key(self) -> tuple:
        return (int(self.can_meet), self.good_bound, -self.p90_ttft_lb_ms)


def result_key(met: bool, good: int, p90_ttft_ms: float | None) -> tuple:
    return (int(met), float(good), -(p90_ttft_ms if p90_ttft_ms is not None else float("inf")))


def _grid(inputs: np.ndarray, max_input: int) -> np.ndarray:
    u = np.unique(np.clip(inputs, 1, max_input))
    if len(u) <= GRID_POINTS:
        return u
    return np.unique(np.quantile(u, np.linspace(0, 1, GRID_POINTS), method="lower").astype(int))


def _estimate(c, spec, hw, gpus, I, O, prof, fw, limits, max_len) -> dict:
    """perfmodel's closed-form row of candidate `c`. Disaggregated splits go to perfmodel.disagg.estimate_row
    with their pools (estimate('disagg') knows only the default split): TTFT = the prompt alone on a prefill
    instance + its KV transfer, TPOT = one decode step alone on a decode instance, tok/s = the slowest
    pool's saturated rate; the same quantities, with the same scheduler limits, as the other candidates'."""
    if c.policy == "disagg":
        a = dict(c.policy_args)
        return estimate_row(spec, hw, gpus, I, O, prof, fw, limits, max_len, a.get("prefill"), a.get("decode"))
    return estimate(c.strategy, spec, hw, gpus, I, O, prof, fw, limits, c.threshold, max_len)


def _curves(c, spec, hw, gpus, fw, prof, grid, max_len):
    """(TTFT ms, one decode step ms) alone per grid prompt length (LayoutError / ValueError: refused)."""
    nochunk = SchedulerLimits(max(int(grid.max()), 1), 1024)
    ttft, tpot = [], []
    for i in grid:
        r = _estimate(c, spec, hw, gpus, int(i), 2, prof, fw, nochunk, max_len)
        ttft.append(r["ttft_ms"])
        tpot.append(r["tpot_ms"])
    # PP layouts need no division by pp: a prompt's prefill is never split over micro-batches
    # (perfmodel.batch.micro_batch), so it takes at least its time alone (tests/test_recommend.py)
    return np.array(ttft), np.array(tpot)


def bounds(cands, wl, spec, hw, gpus, fw, prof, slo_ttft_ms, slo_tpot_ms, pct) -> tuple[dict, dict]:
    """{label: Bound} and {label: reason} for candidates whose closed form refuses the trace. `hw` is the
    node as perfmodel.deploy.cluster returns it and `gpus` the total (as `perfmodel estimate --nodes`
    passes them), so multi-node candidates are costed with the inter-node network."""
    req = wl.requests
    I = req["input_tokens"].to_numpy()
    O = req["output_tokens"].to_numpy()
    max_len = spec.max_model_len
    servable = (I + O) <= max_len
    n = len(req)
    grid = _grid(I[servable] if servable.any() else I, max_len - 2)
    arr = req["arrival_s"].to_numpy()
    window = float(arr.max() - arr.min()) + (slo_ttft_ms + slo_tpot_ms * float(O.max(initial=1))) / 1e3
    mean_i = int(np.clip(I.mean(), 1, max_len - 2))
    mean_o = int(np.clip(O.mean(), 1, max_len - mean_i))
    limits = vllm_default_limits(hw)
    prefix = "prefix_blocks" in req.columns  # cached prefixes make TTFT shorter than alone: no TTFT bound
    curves, sat, failed = {}, {}, {}
    for c in cands:
        try:
            curves[c.label] = _curves(c, spec, hw, gpus, fw, prof, grid, max_len)
            sat[c.label] = _estimate(c, spec, hw, gpus, mean_i, mean_o, prof, fw, limits, max_len)[
                "throughput_tokens_per_s"]
        except (LayoutError, ValueError) as e:
            failed[c.label] = str(e).splitlines()[0]
    static = [c.label for c in cands if c.kind == "static" and c.label in curves]
    floor_ttft = np.min([curves[s][0] for s in static], axis=0) if static else None
    floor_tpot = np.min([curves[s][1] for s in static], axis=0) if static else None
    best_static_sat = max((sat[s] for s in static), default=0.0)
    idx = np.clip(np.searchsorted(grid, I, side="right") - 1, 0, len(grid) - 1)
    out = {}
    for c in cands:
        if c.label not in curves:
            continue
        ttft, tpot = curves[c.label]
        rate = sat[c.label]
        if c.kind == "dynamic" and floor_ttft is not None:
            ttft, tpot = np.minimum(ttft, floor_ttft), np.minimum(tpot, floor_tpot)
            rate = max(rate, best_static_sat)
        lb_ttft = LATENCY_MARGIN * ttft[idx] if not prefix else np.zeros(n)
        lb_tpot = LATENCY_MARGIN * tpot[idx]
        ok = servable & (lb_ttft <= slo_ttft_ms) & ((O <= 1) | (lb_tpot <= slo_tpot_ms))
        possible = int(ok.sum())
        req_rate = rate / max(1.0, float((I + O).mean()))
        good = min(float(possible), THROUGHPUT_SLACK * req_rate * window)
        p90 = float(np.percentile(lb_ttft[servable], 90)) if servable.any() else 0.0
        mid = int(np.searchsorted(grid, np.median(I), side="right") - 1)
        out[c.label] = Bound(c.label, possible >= pct / 100.0 * n and good >= pct / 100.0 * n, good, p90,
                             float(ttft[max(mid, 0)]), float(tpot[max(mid, 0)]), float(sat[c.label]))
    return out, failed


def prune_reason(b: Bound, best: tuple | None) -> str | None:
    """Why `b` cannot beat the best simulated key so far (None: simulate it)."""
    if best is None or b.key >= best:
        return None
    if b.key[0] < best[0]:
        return "slo_unreachable"
    if b.key[1] < best[1]:
        return "goodput_bound"
    return "ttft_bound"
