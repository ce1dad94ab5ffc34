"""Predicted vs measured mean TTFT and TPOT, one marker per row, coloured by backend (log axes)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, never a window (CI, headless nodes)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

PLAIN = FuncFormatter(lambda v, _: f"{v:g}")  # 2, 5, 10, 20: a range under a decade got 3x10^0 4x10^0 ... run together


def scatter(fr):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    for ax, m, unit in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for backend, g in fr.groupby("backend"):
            ax.scatter(g[f"{m}_ms_measured"], g[f"{m}_ms_simulated"], s=10, alpha=0.7, label=backend)
        lo = min(fr[f"{m}_ms_measured"].min(), fr[f"{m}_ms_simulated"].min())
        hi = max(fr[f"{m}_ms_measured"].max(), fr[f"{m}_ms_simulated"].max())
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.8, 1.25):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # (2026-12-03 QA: the TPOT panel's labels overlapped)
            axis.set_major_formatter(PLAIN)
            axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
            axis.set_minor_formatter(PLAIN)
        ax.set_xlabel(f"measured mean {unit} (ms)")
        ax.set_ylabel(f"simulated mean {unit} (ms)")
        ax.set_title(f"mean {unit}: simulated vs measured (dotted: +-20-25%)")
        ax.legend()
    fig.tight_layout()
    return fig
