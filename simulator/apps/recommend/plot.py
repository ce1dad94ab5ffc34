"""The Pareto frontier of `simulate recommend`: p90 TTFT vs SLO goodput per GPU, a labelled marker per candidate."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, never a window (CI, headless nodes)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from simulator.results.files import atomic_path  # noqa: E402


def frontier(rows: list[dict]) -> list[dict]:
    """Candidates no other beats on both (higher goodput per GPU, lower p90 TTFT), by goodput."""
    pts = [r for r in rows if r.get("p90_ttft_ms") is not None]
    def beats(o, r):
        a, b = (o["goodput_per_gpu"], -o["p90_ttft_ms"]), (r["goodput_per_gpu"], -r["p90_ttft_ms"])
        return a != b and a[0] >= b[0] and a[1] >= b[1]

    out = [r for r in pts if not any(beats(o, r) for o in pts)]
    return sorted(out, key=lambda r: r["goodput_per_gpu"])


KIND_COLORS = {"static": "tab:blue", "dynamic": "tab:orange", "disagg": "tab:green"}


def pareto_figure(res: dict):
    """The figure: one scatter per (kind, SLO met) drawn, so the legend names only what is drawn
    (issue 33: it promised green disagg points that a run without disagg lacks)."""
    rows = [r for r in res["ranking"] if r.get("p90_ttft_ms") is not None]
    front = frontier(rows)
    named = {id(r) for r in front} | {id(rows[0])} if rows else set()  # labels for the frontier, the winner
    # and the misses; the ranked table names the rest (clusters of equal goodput would be unreadable)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    groups: dict = {}
    for r in rows:
        kind = r["kind"] if r["kind"] in KIND_COLORS else "dynamic"
        groups.setdefault((kind, bool(r["met"])), []).append(r)
    for (kind, met), rs in sorted(groups.items(), key=lambda g: (list(KIND_COLORS).index(g[0][0]), not g[0][1])):
        ax.scatter([r["p90_ttft_ms"] for r in rs], [r["goodput_per_gpu"] for r in rs], c=KIND_COLORS[kind],
                   marker="o" if met else "x", s=36, label=f"{kind}, SLO {'met' if met else 'missed'}")
    for i, r in enumerate(rows):
        if id(r) in named or not r["met"]:
            ax.annotate(r["label"], (r["p90_ttft_ms"], r["goodput_per_gpu"]), fontsize=7,
                        xytext=(4, -12 if i % 2 else 4), textcoords="offset points")
    if len(front) > 1:  # (one point draws no line)
        ax.plot([r["p90_ttft_ms"] for r in front], [r["goodput_per_gpu"] for r in front], "k--", lw=1,
                label="Pareto frontier")
    w = res.get("winner")
    if w and w.get("p90_ttft_ms") is not None:
        ax.scatter(w["p90_ttft_ms"], w["goodput_per_gpu"], s=160, facecolors="none", edgecolors="red", label="winner")
    ax.axvline(res["slo"]["ttft_ms"], color="grey", lw=0.8, ls=":", label="TTFT SLO")
    ax.margins(y=0.12)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))  # 100, not 10^2
    ax.set_xlabel("p90 TTFT (ms)")
    ax.set_ylabel("SLO goodput per GPU (req/s)")
    s = res["setup"]
    ax.set_title(f"{s['model']} on {s['gpus']} x {s['hardware']}: p90 TTFT vs SLO goodput per candidate", fontsize=9)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def pareto_plot(res: dict, path) -> None:
    fig = pareto_figure(res)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
