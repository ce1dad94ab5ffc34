"""Errors of replayed rows against their measurements, by group (backend x model x system)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .replay import Replayed
from .rows import Skip

KEYS = ("group", "rows", "skipped", "ttft_median_abs_rel_err", "ttft_p90_abs_rel_err", "ttft_median_rel_err",
        "tpot_median_abs_rel_err", "tpot_p90_abs_rel_err", "tpot_median_rel_err")


def frame(done: list[Replayed]) -> pd.DataFrame:
    """One row per replayed case: setup, measured and simulated means, relative errors."""
    return pd.DataFrame([{
        "id": r.case.id, "group": r.case.group, "backend": r.case.backend, "model": r.case.model,
        "layout": r.case.layout, "weights": r.case.weights, "isl": r.case.isl, "osl": r.case.osl,
        "concurrency": r.case.concurrency, "ttft_ms_measured": r.case.ttft_ms, "ttft_ms_simulated": r.ttft_ms,
        "tpot_ms_measured": r.case.tpot_ms, "tpot_ms_simulated": r.tpot_ms, "ttft_rel_err": r.ttft_rel_err,
        "tpot_rel_err": r.tpot_rel_err, "preemptions": r.preemptions, "kv_capacity_tokens": r.kv_capacity_tokens,
        "setup_unknown": r.unknown, "simulate_command": r.command,
    } for r in done])


def note_key(unknown: str) -> str:
    """A row's setup note as counted in a report: a recipe note without its row's own concurrency and recipe names
    (harness.recipe_note), any other note as is."""
    if unknown.startswith("recipe"):
        return "recipe: two or more ran at the row's concurrency, the row does not say which: replayed as the first"
    return unknown


def _stats(group: str, df: pd.DataFrame, skipped: int) -> dict:
    out = {"group": group, "rows": int(len(df)), "skipped": int(skipped)}
    for m in ("ttft", "tpot"):
        e = df[f"{m}_rel_err"].to_numpy(dtype=float) if len(df) else np.array([np.nan])
        out[f"{m}_median_abs_rel_err"] = float(np.median(np.abs(e)))
        out[f"{m}_p90_abs_rel_err"] = float(np.percentile(np.abs(e), 90))
        out[f"{m}_median_rel_err"] = float(np.median(e))
    return out


def summary(done: list[Replayed], skipped: list[Skip]) -> list[dict]:
    """[{group: "all", ...}, {group: "<backend> <model> <system>", ...}, ...]: the JSON contract."""
    df = frame(done)
    sk = pd.Series([s.group for s in skipped], dtype=object)  # (each skip's would-be group)
    out = [_stats("all", df, len(skipped))]
    n_dis = int(sk.str.endswith(" disagg").sum()) if len(sk) else 0
    if (len(df) and df["group"].str.endswith(" disagg").any()) or n_dis:  # the two kinds apart (issue 14's
        dis = df["group"].str.endswith(" disagg") if len(df) else pd.Series([], dtype=bool)  # targets are over
        # the aggregated rows, issue 18's over the disagg ones)
        out += [_stats("all aggregated", df[~dis] if len(df) else df, len(skipped) - n_dis),
                _stats("all disaggregated", df[dis] if len(df) else df, n_dis)]
    groups = set(df["group"]) if len(df) else set()
    for g in sorted(groups | {g for g in sk if g}):  # a group whose rows were all skipped is listed too
        out.append(_stats(g, df[df["group"] == g] if len(df) else df, int((sk == g).sum())))
    return out


def table(rows: list[dict]) -> str:
    """The summary as an aligned text table (errors in %)."""
    head = ["group", "rows", "skipped", "TTFT |err| med", "p90", "bias", "TPOT |err| med", "p90", "bias"]
    body = [[r["group"], str(r["rows"]), str(r["skipped"])] +
            [f"{100 * r[k]:.1f}%" if r[k] == r[k] else "-" for k in KEYS[3:]] for r in rows]  # (- : no row)
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [head] + body)
