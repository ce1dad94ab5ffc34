"""One figure describing a Workload: arrival rate over time, inter-arrival and length histograms."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, never a window (CI, headless nodes)
import matplotlib.pyplot as plt  # noqa: E402

from .workload import Workload  # noqa: E402


def plot_workload(w: Workload, path: str | Path) -> Path:
    """Write a 2x2 PNG/PDF (by extension): rate over time, inter-arrivals, input and output lengths."""
    df = w.requests
    t_s = df["arrival_s"].to_numpy()
    gaps_s = np.diff(t_s)
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    bins = max(10, min(200, len(t_s) // 20))
    span_s = max(float(t_s[-1]), 1e-9)
    ax[0, 0].hist(t_s, bins=bins, weights=np.full(len(t_s), bins / span_s), color="C0")
    ax[0, 0].set(title="arrival rate", xlabel="time (s)", ylabel="requests / s")
    ax[0, 1].hist(gaps_s, bins=100, color="C1", log=True)
    cv = w.summary()["interarrival_cv"]
    ax[0, 1].set(title=f"inter-arrival times (CV {cv:.2f})", xlabel="gap (s)", ylabel="count")
    for a, col, color in ((ax[1, 0], "input_tokens", "C2"), (ax[1, 1], "output_tokens", "C3")):
        x = df[col].to_numpy()
        a.hist(x, bins=100, color=color)
        a.set(title=f"{col} (mean {x.mean():.0f}, p99 {np.percentile(x, 99):.0f})",
              xlabel="tokens", ylabel="count")
    fig.suptitle(f"{Path(w.source).name}: {len(df)} requests", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
