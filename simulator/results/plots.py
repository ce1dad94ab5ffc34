"""Standard figures of a run (matplotlib): each function takes result tables, returns a Figure.

timeline_figure (arrivals, queue, TTFT percentiles, throughput, mode per engine over time),
cdf_figure (TTFT / TPOT), frontier_figure (the Shift paper's three axes: response speed,
generation rate, combined throughput), kv_capacity_figure (bars per layout), and
step_breakdown_figure (stacked gemm / attention / collectives / overhead) with step_breakdown,
which splits a run's recorded step times into perfmodel's named cost terms.
"""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from simulator.results.metrics import time_series  # noqa: E402

# colours of the cost terms, one per name in perfmodel.cost.TERMS (collectives in blue/green tones)
TERM_COLORS = {"gemm": "#4c72b0", "attention": "#dd8452", "elementwise": "#937860",
               "all_reduce": "#55a868", "all_gather": "#8fd19e", "all_to_all": "#64b5cd",
               "reduce_scatter": "#2a9d8f", "send_recv": "#c44e52", "pipeline_bubble": "#bbbbbb",
               "overhead": "#8172b3", "switch": "#222222"}


def _intervals(g: pd.DataFrame, gap_s: float):
    """(mode, start_s, length_s) of each run of consecutive steps in the same mode with no idle gap
    longer than gap_s between them."""
    g = g.sort_values("start_s")
    codes = g["mode"].astype(str).to_numpy()
    start = g["start_s"].to_numpy()
    end = start + g["duration_s"].to_numpy()
    cut = np.flatnonzero((codes[1:] != codes[:-1]) | (start[1:] - end[:-1] > gap_s)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(codes)]):
        yield codes[lo], start[lo], end[hi - 1] - start[lo]


def timeline_figure(runs: list, window_s: float = 10.0):
    """Arrival rate, queue length, median (solid) and p99 (dashed) TTFT, output throughput, the
    share of step time per mode, and each engine's mode over time; one line per (name, requests
    frame, steps frame) run."""
    fig, axes = plt.subplots(6, 1, figsize=(10, 13), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1, 1, 1, 1, 1.2]})
    lanes, colors = [], {}
    for name, req, steps in runs:
        ts = time_series(req, steps, window_s)
        t = ts.index.to_numpy()
        line, = axes[0].plot(t, ts["arrival_rate"], label=name)
        axes[1].plot(t, ts.get("queue_length", 0 * t), label=name)
        axes[2].plot(t, ts["median_ttft_ms"], label=name, color=line.get_color())
        p99 = req.groupby((req["arrival_s"] // max(window_s, 1e-9)).astype(int))["ttft_ms"].quantile(0.99)
        axes[2].plot(p99.index.to_numpy() * window_s, p99.to_numpy(), ls="--", color=line.get_color(), lw=0.8)
        axes[3].plot(t, ts["output_tokens_per_s"], label=name)
        modes = [c for c in ts.columns if c.startswith("mode_s_")]
        if modes:
            share = ts[modes].div(ts[modes].sum(axis=1).where(lambda s: s > 0, 1), axis=0)
            for c in modes:
                axes[4].plot(t, share[c], label=f"{name}: {c[7:]}")
        for eng, g in steps.groupby("engine"):
            y = len(lanes)
            lanes.append(f"{name} e{eng}")
            for mode, s0, length in _intervals(g, 0.1 * window_s):
                c = colors.setdefault(mode, f"C{len(colors) % 10}")
                axes[5].broken_barh([(s0, max(length, 1e-6))], (y - 0.4, 0.8), color=c)
    for ax, lab in zip(axes, ("arrivals (req/s)", "waiting requests", "TTFT (ms)\nmedian, p99 --",
                              "output tokens/s", "share of step time", "mode per engine")):
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[5].set_yticks(range(len(lanes)), lanes, fontsize=6 if len(lanes) > 12 else 8)
    axes[5].legend(handles=[matplotlib.patches.Patch(color=c, label=m) for m, c in colors.items()],
                   loc="upper right", fontsize=7, ncols=min(4, max(1, len(colors))))
    axes[0].legend(loc="upper right", fontsize=8)
    if axes[4].lines:
        axes[4].legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("time (s)")
    fig.tight_layout()
    return fig


def cdf_figure(runs: list, log: bool = True):
    """Empirical CDFs of TTFT and TPOT per (name, requests frame) run (completed requests)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, req in runs:
        comp = req[req["status"] == "completed"]
        for ax, col in zip(axes, ("ttft_ms", "tpot_ms")):
            v = np.sort(comp[col].dropna().to_numpy())
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=name)
    for ax, lab in zip(axes, ("TTFT (ms)", "TPOT (ms)")):
        ax.set_xlabel(lab)
        ax.set_ylabel("fraction of requests")
        if log:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def frontier_axes(rows, stat: str = "median") -> pd.DataFrame:
    """The three axes of the Shift paper from summary rows: response speed (mean input tokens per
    TTFT second), generation rate (tokens per second per request = 1/TPOT), combined throughput."""
    df = pd.DataFrame(rows).copy()
    mean_in = df["total_input_tokens"] / df["completed"].clip(lower=1)
    df["response_speed_tok_s"] = mean_in / (df[f"{stat}_ttft_ms"] / 1e3)
    df["generation_rate_tok_s"] = 1e3 / df[f"{stat}_tpot_ms"]
    df["combined_throughput_tok_s"] = df["total_token_throughput"]
    return df


def frontier_figure(rows, by: str = "policy", stat: str = "median"):
    """Latency-throughput frontier per `by` group: response speed and generation rate against
    combined throughput, and against each other; one point per row (e.g. per load level)."""
    df = frontier_axes(rows, stat)
    pairs = (("combined_throughput_tok_s", "response_speed_tok_s"),
             ("combined_throughput_tok_s", "generation_rate_tok_s"),
             ("generation_rate_tok_s", "response_speed_tok_s"))
    labels = {"combined_throughput_tok_s": "combined throughput (tok/s)",
              "response_speed_tok_s": f"response speed (input tok / {stat} TTFT s)",
              "generation_rate_tok_s": f"generation rate (1 / {stat} TPOT, tok/s)"}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for name, g in df.groupby(by, sort=False):
        g = g.sort_values("combined_throughput_tok_s")
        for ax, (x, y) in zip(axes, pairs):
            ax.plot(g[x], g[y], "o-", label=str(name), ms=4)
    for ax, (x, y) in zip(axes, pairs):
        ax.set_xlabel(labels[x])
        ax.set_ylabel(labels[y])
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def kv_capacity_figure(rows, label: str = "layout", value: str = "kv_capacity_tokens",
                       group: str | None = None):
    """Bars of KV capacity (tokens) per `label`, side by side per `group` if given."""
    df = pd.DataFrame(rows)
    groups = list(dict.fromkeys(df[group])) if group else [None]
    labels = list(dict.fromkeys(df[label]))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(labels) * len(groups)), 3.8))
    w = 0.8 / len(groups)
    for i, gname in enumerate(groups):
        sub = df if gname is None else df[df[group] == gname]
        vals = sub.set_index(label)[value].reindex(labels)
        x = np.arange(len(labels)) + (i - (len(groups) - 1) / 2) * w
        bars = ax.bar(x, vals / 1e6, w, label=None if gname is None else str(gname))
        ax.bar_label(bars, [f"{v / 1e6:.2f}M" if np.isfinite(v) else "" for v in vals], fontsize=7)
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20 if len(labels) > 5 else 0)
    ax.set_ylabel("KV capacity (M tokens)")
    ax.grid(alpha=0.3, axis="y")
    if group:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def step_breakdown(steps: pd.DataFrame, modes: dict, spec, hw, prof=None, fw=None) -> pd.DataFrame:
    """Seconds per cost term (perfmodel.cost.TERMS, plus `switch`) summed over a run's steps, one
    row per mode. `modes`: mode name -> ParallelLayout or its string (a SimResult engine's "modes";
    a mode missing from it is parsed as a layout itself, as static policies name their modes);
    modes that are not layouts (SiDP's step objects) are left out. Each step's terms are rescaled
    to its recorded duration (a fast-forwarded stretch records its first step's shape)."""
    from perfmodel.batch import make_batch
    from perfmodel.cost import TERMS, step_cost
    from perfmodel.framework import DEFAULT_FRAMEWORK
    from perfmodel.layout import LayoutError, ParallelLayout

    out = {}
    for mode, g in steps.groupby("mode", observed=True):
        lay = modes.get(str(mode), str(mode))  # static policies name a mode by its layout
        try:
            lay = lay if isinstance(lay, ParallelLayout) else ParallelLayout.parse(str(lay))
        except (LayoutError, TypeError):
            continue
        run = g[g["steps"] > 0]
        b = make_batch(*(run[c].to_numpy(float) for c in ("prefill_tokens", "prefill_seqs", "prefill_pairs",
                                                           "prefill_kv_tokens", "decode_seqs", "decode_kv_tokens")))
        terms = step_cost(spec, lay, hw, b, prof, fw or DEFAULT_FRAMEWORK).terms
        model_s = sum(terms.values())
        busy = (run["duration_s"] - run["switch_s"]).to_numpy()
        scale = np.where(model_s > 0, busy / np.maximum(model_s, 1e-30), 0.0)
        row = {t: float((np.asarray(terms[t]) * scale).sum()) for t in TERMS}
        row["switch"] = float(g["switch_s"].sum())
        out[str(mode)] = row
    return pd.DataFrame.from_dict(out, orient="index")


def step_breakdown_figure(table, normalize: bool = False, unit: str = "ms"):
    """Stacked bars of time per cost term, one bar per row of `table` (a DataFrame or a dict
    name -> {term: seconds}, e.g. StepCost.breakdown()); `normalize` shows shares of the total."""
    df = pd.DataFrame(table).T if isinstance(table, dict) else pd.DataFrame(table)
    df = df.loc[:, (df.abs() > 0).any(axis=0)].astype(float)
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    vals = df.div(df.sum(axis=1).where(lambda s: s > 0, 1), axis=0) if normalize else df * scale
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(df) + 3), 4))
    bottom = np.zeros(len(df))
    for term in vals.columns:
        ax.bar(range(len(df)), vals[term], bottom=bottom, label=term, color=TERM_COLORS.get(term))
        bottom += vals[term].to_numpy()
    ax.set_xticks(range(len(df)), [str(i) for i in df.index], rotation=20 if len(df) > 5 else 0)
    ax.set_ylabel("share of step time" if normalize else f"time ({unit})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig
