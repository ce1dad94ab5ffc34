"""Standard figures of a run (matplotlib): each function takes result tables, returns a Figure."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .metrics import time_series  # noqa: E402


def timeline_figure(runs: list, window_s: float = 10.0):
    """Arrival rate, queue length, median TTFT, output throughput and the active mode over time,
    one line per (name, requests frame, steps frame) run."""
    fig, axes = plt.subplots(5, 1, figsize=(10, 11), sharex=True)
    for name, req, steps in runs:
        ts = time_series(req, steps, window_s)
        t = ts.index.to_numpy()
        axes[0].plot(t, ts["arrival_rate"], label=name)
        axes[1].plot(t, ts.get("queue_length", 0 * t), label=name)
        axes[2].plot(t, ts["median_ttft_ms"], label=name)
        axes[3].plot(t, ts["output_tokens_per_s"], label=name)
        modes = [c for c in ts.columns if c.startswith("mode_s_")]
        if modes:
            share = ts[modes].div(ts[modes].sum(axis=1).where(lambda s: s > 0, 1), axis=0)
            for c in modes:
                axes[4].plot(t, share[c], label=f"{name}: {c[7:]}")
    for ax, lab in zip(axes, ("arrivals (req/s)", "waiting requests", "median TTFT (ms)",
                              "output tokens/s", "share of step time")):
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[4].legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("time (s)")
    fig.tight_layout()
    return fig
