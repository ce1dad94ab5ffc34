"""`simulate compare --plot`: TTFT and TPOT CDFs of the measured and the simulated run, overlaid. Its own
module so that only a plot loads matplotlib (~0.2 s): comparison/cli.py imports it where --plot is given."""
from __future__ import annotations

import matplotlib.pyplot as plt

from simulator.results.files import atomic_path
from simulator.results.plots import cdf_figure

from .inputs import Loaded


def write_plot(path, m: Loaded, s: Loaded) -> None:
    """TTFT and TPOT CDFs of both sides, overlaid (simulator.results.plots.cdf_figure)."""
    fig = cdf_figure([(f"measured ({m.path.name})", m.requests), (f"simulated ({s.path.name})", s.requests)],
                     title="measured vs simulated")
    leg = fig.axes[0].get_legend()
    if leg is not None:
        leg.set_title("run")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
