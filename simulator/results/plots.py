"""Standard figures of a run (matplotlib): each function takes result tables, returns a Figure.

timeline_figure (arrivals, queue, TTFT percentiles, throughput, share of time per mode per engine
over time), cdf_figure (TTFT / TPOT), run_title (model, hardware and trace of a run, for a title), frontier_figure (the Shift paper's three axes: response speed,
generation rate, combined throughput), kv_capacity_figure (bars per layout), and
step_breakdown_figure (stacked gemm / attention / collectives / overhead) with step_breakdown,
which splits a run's recorded step times into perfmodel's named cost terms.
"""
from __future__ import annotations

from typing import NamedTuple

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from perfmodel.batch import make_batch  # noqa: E402
from perfmodel.cost import TERMS, step_cost  # noqa: E402
from perfmodel.framework import DEFAULT_FRAMEWORK  # noqa: E402
from perfmodel.layout import LayoutError, ParallelLayout  # noqa: E402
from simulator.results.metrics import time_series  # noqa: E402


class RunFrames(NamedTuple):
    """One run as the figures take it: its label, requests frame and steps frame (None: no steps)."""

    name: str
    requests: object
    steps: object = None


def _runs(runs) -> list:
    """The runs as RunFrames (a caller's plain (label, requests[, steps]) tuple is read once, here)."""
    return [r if isinstance(r, RunFrames) else RunFrames(r[0], r[1], r[2] if len(r) > 2 else None) for r in runs]

# colours of the cost terms, one per name in perfmodel.cost.TERMS (collectives in blue/green tones)
TERM_COLORS = {"gemm": "#4c72b0", "attention": "#dd8452", "elementwise": "#937860",
               "all_reduce": "#55a868", "all_gather": "#8fd19e", "all_to_all": "#64b5cd",
               "reduce_scatter": "#2a9d8f", "send_recv": "#c44e52", "pipeline_bubble": "#bbbbbb",
               "overhead": "#8172b3", "switch": "#222222"}


def run_title(summary: dict, trace: str | None = None) -> str:
    """A figure title naming model, hardware and trace from a run's summary (simulator.run), e.g.
    'llama-3.3-70b (fp8) on 8 x h200_sxm, trace burstgpt.csv'."""
    model = summary.get("model", "?")
    weights = summary.get("weights")
    trace = str(trace if trace is not None else summary.get("trace") or "")
    trace = trace if len(trace) <= 60 else trace[:57] + "..."  # a long synthetic spec
    head = f"{model} ({weights})" if weights else str(model)
    hw = f"{summary['gpus']} x {summary.get('hardware', '?')}" if summary.get("gpus") else summary.get("hardware", "?")
    return f"{head} on {hw}" + (f", trace {trace}" if trace else "")


def _plain(v, _pos=None) -> str:
    """Tick text without offsets or powers of ten: 0.5, 12, 40k, 40,005, 1.5M."""
    a = abs(v)
    if a >= 1e6 and v % 1e5 == 0:
        return f"{v / 1e6:g}M"
    if a >= 1e4 and v % 100 == 0:
        return f"{v / 1e3:g}k"
    if a >= 1e4:
        return f"{v:,.0f}" if v == round(v) else f"{v:,.2f}"
    return f"{v:.6g}"


def _readable(ax, x: bool = True, y: bool = True) -> None:
    """Plain tick labels (no '1e4' offset text, no 10^n labels) on the linear or log axes of `ax`;
    call it after plotting: a log axis spanning under a decade labels its minor ticks too."""
    fmt = matplotlib.ticker.FuncFormatter(_plain)
    for on, axis, lim in ((x, ax.xaxis, ax.get_xlim), (y, ax.yaxis, ax.get_ylim)):
        if not on:
            continue
        axis.set_major_formatter(fmt)
        if axis.get_scale() == "log":
            lo, hi = sorted(lim())
            decades = np.log10(hi / lo) if lo > 0 else np.inf
            # 1-2-5 per decade up to two decades; over more, "500 1000 2000" run together (issue 33)
            subs = (1.0, 2.0, 5.0) if decades <= 2 else (1.0,)
            axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=subs))
            axis.set_minor_formatter(fmt if decades < 1 else matplotlib.ticker.NullFormatter())


def _policy_colors(labels) -> dict:
    """One colour per run label, the same in every panel and figure (matplotlib's C0..C9 cycle)."""
    return {lab: f"C{i % 10}" for i, lab in enumerate(dict.fromkeys(labels))}


def _busy_per_window(g: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Seconds of the steps in `g` falling in each window [edges[i], edges[i+1]): a step that spans
    windows (a fast-forwarded stretch) is split between them."""
    s = np.sort(g["start_s"].to_numpy(float))
    e = np.sort((g["start_s"] + g["duration_s"]).to_numpy(float))
    cs, ce = np.r_[0.0, np.cumsum(s)], np.r_[0.0, np.cumsum(e)]
    i, j = np.searchsorted(s, edges), np.searchsorted(e, edges)
    covered = (i * edges - cs[i]) - (j * edges - ce[j])  # sum over steps of clip(t - start, 0, duration)
    return np.diff(covered)


def _mode_share(steps: pd.DataFrame, edges: np.ndarray) -> dict:
    """{engine: {mode: fraction of each window's time that engine spent in the mode}} (idle time is
    the rest; modes in order of first appearance)."""
    out = {}
    w = np.diff(edges)
    for eng, g in steps.groupby("engine", sort=True):
        modes = list(dict.fromkeys(g.sort_values("start_s")["mode"].astype(str)))
        out[eng] = {m: np.clip(_busy_per_window(g[g["mode"].astype(str) == m], edges) / w, 0, 1) for m in modes}
    return out


_HATCHES = ("", "////", "....", "xxxx", "\\\\\\\\", "++++", "oooo")
MAX_LANES = 16  # engine lanes in a timeline's mode panel; over that, one lane per policy (labels legible)


def timeline_figure(runs: list, window_s: float = 10.0, title: str | None = None):
    """Arrival rate (once: the runs share the trace), queue length, median (solid) and p99 (dashed)
    TTFT, output throughput, and per engine the share of time in each mode per window (a stacked
    band per lane: a policy's colour, one shade and hatch per mode, blank = idle); one line per
    (label, requests frame, steps frame) run, one colour per run in every panel. `title`: the
    figure's title (run_title names model, hardware and trace)."""
    runs = _runs(runs)
    fig, axes = plt.subplots(5, 1, figsize=(10, 11.5 + 1.2 * (len(runs) > 4)), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1, 1, 1, 1.3 + 0.6 * (len(runs) > 4)]})
    colors = _policy_colors(r.name for r in runs)
    w = max(window_s, 1e-9)
    t_end = max([float(r.requests["arrival_s"].max()) for r in runs if len(r.requests)]
                + [float((r.steps["start_s"] + r.steps["duration_s"]).max()) for r in runs if len(r.steps)] + [w])
    t0 = min([float(r.requests["arrival_s"].min()) for r in runs if len(r.requests)] or [0.0]) // w * w
    edges = np.arange(t0, t_end + w, w)
    if runs:  # the runs replay one trace: its arrivals once, counted over every window (empty ones too)
        counts, _ = np.histogram(runs[0].requests["arrival_s"].to_numpy(float), edges)
        axes[0].plot(edges[:-1], counts / w, color="0.25", label="arrivals")
    bands, mode_handles = [], []  # bands: (lane label, colour, [(shade, fractions per window)])
    per_engine = sum(r.steps["engine"].nunique() for r in runs if len(r.steps)) <= MAX_LANES
    for name, req, steps in ((r.name, r.requests, r.steps) for r in runs):
        c = colors[name]
        ts = time_series(req, steps, w)
        t = ts.index.to_numpy()
        axes[1].plot(t, ts["queue_length"] if "queue_length" in ts else 0 * t, color=c, label=name)
        axes[2].plot(t, ts["median_ttft_ms"].where(ts["arrival_rate"] > 0), color=c, label=name)  # no arrivals: a gap, not 0
        p99 = req.groupby((req["arrival_s"] // w).astype(int))["ttft_ms"].quantile(0.99)
        axes[2].plot(p99.index.to_numpy() * w, p99.to_numpy(), ls="--", color=c, lw=0.8, label=f"{name} p99")
        axes[3].plot(t, ts["output_tokens_per_s"], color=c, label=name)
        if not len(steps):
            continue
        shares = _mode_share(steps, edges)
        modes = list(dict.fromkeys(m for per in shares.values() for m in per))
        if not per_engine:  # one lane per policy: the mode's share of all its engines' time
            n = len(shares)
            shares = {f"({n} engines)" if n > 1 else "": {m: sum(per.get(m, 0) for per in shares.values()) / n
                                                          for m in modes}}
        shade = {m: (1.0 - 0.55 * k / max(len(modes) - 1, 1), _HATCHES[k % len(_HATCHES)]) for k, m in enumerate(modes)}
        mode_handles += [matplotlib.patches.Patch(facecolor=c, alpha=shade[m][0], hatch=shade[m][1],
                                                  edgecolor="white", label=f"{name}: {m}") for m in modes]
        bands += [(f"{name} e{eng}" if per_engine else f"{name} {eng}".strip(), c,
                   [(shade[m], frac) for m, frac in per.items()]) for eng, per in shares.items()]
    for k, (lane, c, parts) in enumerate(bands):  # the first lane on top; each band grows upward from its lane's floor
        floor, low = len(bands) - 1 - k - 0.425, np.zeros(len(edges) - 1)
        for (alpha, hatch), frac in parts:
            top = low + 0.85 * frac
            axes[4].fill_between(edges, floor + np.r_[low, low[-1:]], floor + np.r_[top, top[-1:]], step="post",
                                 facecolor=c, alpha=alpha, hatch=hatch, edgecolor="white", lw=0)
            low = top
    lanes = [b[0] for b in bands]
    for ax, lab in zip(axes, ("arrival rate (req/s)", "queue length (requests)", "TTFT (ms)",
                              "output throughput (tok/s)", "share of time (0-1)\nper mode and engine")):
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
        _readable(ax, y=ax is not axes[4])
    axes[0].set_title("arrivals (the trace, shared by every run)", fontsize=9)
    axes[1].set_title("waiting requests", fontsize=9)
    axes[2].set_title("TTFT of requests arriving per window: median (solid), p99 (dashed)", fontsize=9)
    axes[3].set_title("output tokens completed per window", fontsize=9)
    axes[4].set_title(f"share of each {window_s:g} s window spent in each mode (blank: idle)", fontsize=9)
    axes[4].set_yticks(range(len(lanes)), lanes[::-1], fontsize=6 if len(lanes) > 12 else 8)
    axes[4].set_ylim(-0.6, max(len(lanes), 1) - 0.4)
    if len(mode_handles) > 8:  # under the panel, in columns: to its right it would run off the figure
        axes[4].legend(handles=mode_handles, loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=7,
                       ncol=min(6, -(-len(mode_handles) // 3)), title="policy: mode", title_fontsize=7)
    elif mode_handles:
        axes[4].legend(handles=mode_handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ttft = np.concatenate([ln.get_ydata() for ln in axes[2].get_lines()] or [[]]).astype(float)
    ttft = ttft[np.isfinite(ttft) & (ttft > 0)]
    if len(ttft) and ttft.max() > 30 * ttft.min():  # one slow policy would flatten the others at 0
        axes[2].set_yscale("log")
        axes[2].set_title(axes[2].get_title() + ", log scale", fontsize=9)
        _readable(axes[2], x=False)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="policy", title_fontsize=8)
    axes[2].legend(handles=[matplotlib.lines.Line2D([], [], color="0.3", label="median"),
                            matplotlib.lines.Line2D([], [], color="0.3", ls="--", lw=0.8, label="p99")],
                   loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes[-1].set_xlabel("time (s)")
    axes[-1].set_xlim(t0, t_end)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def cdf_figure(runs: list, title: str | None = None, log: bool = True):
    """Empirical CDFs of TTFT and TPOT (completed requests), one line per run: (label, requests
    frame) or (label, requests frame, steps frame) as timeline_figure takes; log x axis in ms."""
    runs = _runs(runs)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8 + 0.3 * bool(title)))
    colors = _policy_colors(r.name for r in runs)
    for r in runs:
        name, comp = r.name, r.requests[r.requests["status"] == "completed"]
        for ax, col in zip(axes, ("ttft_ms", "tpot_ms")):
            v = np.sort(comp[col].dropna().to_numpy())
            v = v[v > 0] if log else v
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=name, color=colors[name])
    for ax, what, lab in zip(axes, ("TTFT", "TPOT"), ("TTFT (ms)", "TPOT (ms)")):
        ax.set_title(f"{what} CDF (completed requests)", fontsize=10)
        ax.set_xlabel(lab)
        ax.set_ylabel("fraction of requests (0-1)")
        if log:
            ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        _readable(ax)
    if runs:
        axes[0].legend(fontsize=8, title="policy", title_fontsize=8)
    if title:
        fig.suptitle(title)
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
        _readable(ax)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _tokens(v: float) -> str:
    """A KV capacity as a bar label: '1.23M', '456k', '980'; 'does not fit' for a layout whose
    weights leave no KV memory (capacity <= 0 or missing)."""
    if not np.isfinite(v) or v <= 0:
        return "does not fit"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.0f}k" if v >= 1e3 else f"{v:.0f}"


def kv_capacity_figure(rows, label: str = "layout", value: str = "kv_capacity_tokens",
                       group: str | None = None, title: str | None = None):
    """Bars of KV capacity (tokens) per `label`, side by side per `group` if given; a layout that
    does not fit (capacity <= 0) is labelled so instead of a zero-height bar reading 0.00M."""
    df = pd.DataFrame(rows)
    groups = list(dict.fromkeys(df[group])) if group else [None]
    labels = list(dict.fromkeys(df[label]))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(labels) * len(groups)), 3.8))
    w = 0.8 / len(groups)
    for i, gname in enumerate(groups):
        sub = df if gname is None else df[df[group] == gname]
        vals = sub.set_index(label)[value].reindex(labels).astype(float)
        x = np.arange(len(labels)) + (i - (len(groups) - 1) / 2) * w
        bars = ax.bar(x, vals.clip(lower=0).fillna(0) / 1e6, w, label=None if gname is None else str(gname))
        for text in ax.bar_label(bars, [_tokens(v) for v in vals], fontsize=7):
            if text.get_text() == "does not fit" and len(groups) > 1:
                text.set_rotation(90)  # upright, so it stays within its own bar's slot
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20 if len(labels) > 5 else 0)
    ax.set_ylabel("KV capacity (M tokens)")
    ax.grid(alpha=0.3, axis="y")
    _readable(ax, x=False)
    if group:
        ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def step_breakdown(steps: pd.DataFrame, modes: dict, spec, hw, prof=None, fw=None) -> pd.DataFrame:
    """Seconds per cost term (perfmodel.cost.TERMS, plus `switch`) summed over a run's steps, one
    row per mode. `modes`: mode name -> ParallelLayout or its string (a SimResult engine's "modes";
    a mode missing from it is parsed as a layout itself, as static policies name their modes);
    modes that are not layouts (SiDP's step objects) are left out. Each step's terms are rescaled
    to its recorded duration (a fast-forwarded stretch records its first step's shape)."""
    out = {}
    for mode, g in steps.groupby("mode", observed=True):
        lay = modes.get(str(mode), str(mode))  # static policies name a mode by its layout
        try:
            lay = lay if isinstance(lay, ParallelLayout) else ParallelLayout.parse(str(lay))
        except (LayoutError, TypeError):
            continue
        run = g[g["steps"] > 0]
        b = make_batch(**{c: run[c].to_numpy(float) for c in ("prefill_tokens", "prefill_seqs", "prefill_pairs",
                                                               "prefill_kv_tokens", "decode_seqs", "decode_kv_tokens")})
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
    ax.set_ylabel("share of step time (0-1)" if normalize else f"time ({unit})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig
