"""Issue 33, plots: legible with many policies (structure only: axes, legend entries, tick label
boxes from the renderer; no timing)."""
import functools
import itertools

import numpy as np
import pandas as pd
import pytest

from simulator import run as sim_run
from simulator.apps.recommend.plot import pareto_figure
from simulator.results import plots
from simulator.run import workload

run_summary = functools.partial(sim_run.run_summary, profile="none")
POLICIES = ("tp", "dp", "sidp", "flying", "disagg")  # 8 x H200: 1 + 8 + 8 + 8 + 8 engine lanes


def _overlaps(texts, renderer) -> list:
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text()]
    return [(a, b) for (a, x), (b, y) in itertools.combinations(boxes, 2) if x.overlaps(y)]


def _inside(fig, artist, renderer) -> bool:
    box, page = artist.get_window_extent(renderer), fig.bbox
    return box.x0 >= page.x0 - 1 and box.y0 >= page.y0 - 1 and box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1


@pytest.fixture(scope="module")
def timeline():
    wl = workload("poisson?rate=4&n=40&input=512-2048&output=32-128&seed=3")
    runs = [(p, *run_summary(wl, p, frames=True)[1:]) for p in POLICIES]
    fig = plots.timeline_figure(runs, window_s=2.0)
    fig.canvas.draw()
    yield fig, runs
    plots.plt.close(fig)


def test_timeline_many_engines_one_lane_per_policy(timeline):
    fig, runs = timeline
    assert len(fig.axes) == 5
    modes = fig.axes[4]
    lanes = [t.get_text() for t in modes.get_yticklabels()][::-1]
    assert [lane.split()[0] for lane in lanes] == list(POLICIES)  # not 33 engine lanes
    assert "dp (8 engines)" in lanes and "tp" in lanes
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert not _overlaps(ax.get_yticklabels() + ax.get_xticklabels(), r), ax.get_title()


def test_timeline_mode_legend_names_each_drawn_mode_and_fits(timeline):
    fig, runs = timeline
    modes = fig.axes[4]
    drawn = [f"{p}: {m}" for p, _, s in runs for m in dict.fromkeys(s.sort_values("start_s")["mode"].astype(str))]
    leg = modes.get_legend()
    assert [t.get_text() for t in leg.get_texts()] == drawn
    r = fig.canvas.get_renderer()
    assert _inside(fig, leg, r)  # not cut off at the figure's edge
    assert not _overlaps(leg.get_texts(), r)


def test_cdf_log_tick_labels_do_not_run_together():
    rng = np.random.default_rng(0)
    runs = []
    for i in range(9):  # TTFT over 3.5 decades (10 ms .. 30 s), TPOT 10-40 ms
        ttft = 10 ** rng.uniform(1, 4.5, 200)
        runs.append((f"p{i}", pd.DataFrame({"status": "completed", "ttft_ms": ttft,
                                            "tpot_ms": rng.uniform(10, 40, 200)})))
    fig = plots.cdf_figure(runs)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert len(fig.axes) == 2
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) >= 3, ax.get_title()
        assert not _overlaps(ax.get_xticklabels(), r), [t.get_text() for t in labels]
    assert len(fig.axes[0].get_legend().get_texts()) == 9
    plots.plt.close(fig)


def _res(rows):
    return {"ranking": rows, "winner": rows[0], "slo": {"ttft_ms": 2000},
            "setup": {"model": "llama-3.3-70b", "gpus": 8, "hardware": "h200_sxm"}}


def _row(label, kind, ttft, good, met=True):
    return {"label": label, "kind": kind, "p90_ttft_ms": ttft, "goodput_per_gpu": good, "met": met}


@pytest.mark.parametrize("rows, kinds", [
    ([_row("shift", "dynamic", 60, 0.0215), _row("tp=8", "static", 70, 0.0215), _row("dp=8", "static", 90, 0.0215)],
     ["static, SLO met", "dynamic, SLO met"]),
    ([_row("dp=8", "static", 80, 0.03), _row("tp=8", "static", 60, 0.02),
      _row("disagg 4p4d", "disagg", 3000, 0.01, met=False)],
     ["static, SLO met", "disagg, SLO missed", "Pareto frontier"]),
])
def test_recommend_legend_only_for_what_is_drawn(rows, kinds):
    fig = pareto_figure(_res(rows))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == kinds + ["winner", "TTFT SLO"]
    drawn = {a.get_label() for a in ax.collections + ax.lines if not a.get_label().startswith("_")}
    assert set(labels) == drawn  # every entry is an artist on the axes, and every labelled artist has one
    colors = {"static": "blue", "dynamic": "orange", "disagg": "green"}
    for kind, word in colors.items():
        assert (word in ax.get_title()) is False  # the title promises no colours: the legend says them
        assert any(lab.startswith(kind) for lab in labels) == any(r["kind"] == kind for r in rows)
    plots.plt.close(fig)
