"""`perfmodel validate --plot`: predicted vs measured per op. Apart from validate.py so that only a
plot pays for matplotlib (calibrate imports validate's predictions; the CLI imports this module lazily)."""
from __future__ import annotations

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, never a window (CI, headless nodes)
import matplotlib.pyplot as plt  # noqa: E402

from .validate import KIND_OP, compared_rows, op_frame, predict_us  # noqa: E402


def plot(meas, prof, hw, path) -> None:
    """Predicted vs measured (log-log) per op: calibrated dots, datasheet crosses, y = x line."""
    panels = []
    for kind in ("gemm", "prefill", "decode", "collective", "copy"):
        df = op_frame(meas, kind, hw)
        if not len(df):
            continue
        df = df[compared_rows(kind, df, meas, prof)[0]]
        cal, ds = predict_us(kind, df, prof), predict_us(kind, df, None, hw)
        key = {"gemm": "dtype", "collective": "op", "copy": "kind"}.get(kind)
        for name, g in (df.groupby(key) if key else [(KIND_OP[kind], df)]):
            i = df.index.get_indexer(g.index)
            panels.append((f"{kind} {name}" if kind == "gemm" else str(name), g.t_us.to_numpy(), cal[i], ds[i]))
    cols = min(3, max(1, len(panels)))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    for ax, (name, meas_us, cal, ds) in zip(axes.ravel(), panels):
        ax.loglog(meas_us, ds, "x", ms=2, alpha=0.3, color="tab:gray", label="datasheet roofline")
        ax.loglog(meas_us, cal, ".", ms=2, alpha=0.5, color="tab:blue", label=f"calibrated ({prof.name})")
        lo, hi = np.nanmin(meas_us), np.nanmax(meas_us)
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        med = lambda pred: np.nanmedian(np.abs(pred / meas_us - 1)) * 100  # noqa: E731
        ax.set_title(f"{name}: median |err| {med(cal):.1f}% (datasheet {med(ds):.0f}%)", fontsize=9)
        ax.set_xlabel("measured us")
        ax.set_ylabel("predicted us")
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
