"""Predicted vs measured, per op: the calibrated profile beside the uncalibrated datasheet roofline.

Rows compared: for a measurement file the profile was fitted on (same sha256), only the rows the
fixed split held out (split.py), or all rows flagged "in-sample" when the profile was fitted on
all of them; every row of a file the profile never saw ("unseen").
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import network, ops
from ..comm import Call
from ..modelspec import DTYPE_BYTES
from . import attention as att
from . import collectives as coll
from . import split

LLM_SHAPED_MIN = 256  # GEMM n and k of real LLM layers after TP sharding (toy widths 32-128 excluded)
# a table's compute dtype -> the weight format perfmodel.ops costs it as (the datasheet column): fp4 GEMMs
# are what NVFP4 weights run on fp4 tensor cores; the others are their own weight format
WEIGHTS_OF = {"fp4": "nvfp4"}
KIND_OP = {"prefill": "attention_prefill", "decode": "attention_decode"}


def _pairs_kv(df):
    return att.causal_pairs(df.batch.to_numpy(), df.seq_len.to_numpy(), df.kv_len.to_numpy()), \
        df.batch.to_numpy() * df.kv_len.to_numpy()


def predict_us(kind: str, df: pd.DataFrame, prof=None, hw=None) -> np.ndarray:
    """Predicted microseconds per row: from `prof` (NaN where it does not cover the row) or, with
    prof None, from the datasheet roofline of `hw` (perfmodel.ops)."""
    out = np.full(len(df), np.nan)
    if not len(df):
        return out
    if kind == "collective":  # unknown placement: node-major on hw's nodes (without hw: one node, as before)
        df = coll.with_nodes(df, hw.gpus_per_node) if hw is not None else df.assign(
            nodes=df["nodes"].fillna(1.0) if "nodes" in df.columns else 1.0)
    pos = pd.Series(np.arange(len(df)), index=df.index)
    keys = {"gemm": ["dtype"], "prefill": ["heads", "kv_heads", "head_dim"],
            "decode": ["heads", "kv_heads", "head_dim"], "collective": ["op", "group", "nodes"],
            "copy": ["kind"]}[kind]
    for key, g in df.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        t = _group_s(kind, key, g, prof, hw)
        if t is not None:
            out[pos[g.index].to_numpy()] = np.broadcast_to(t, (len(g),)) * 1e6
    return out


def _group_s(kind, key, g, prof, hw):
    if kind == "gemm":
        m, n, k = (g[c].to_numpy() for c in ("m", "n", "k"))
        if prof:
            return prof.gemm_time_s(m, n, k, key[0])
        wd = WEIGHTS_OF.get(key[0], key[0])
        return ops.gemm_time_s(m, n, k, wd, hw) if wd in DTYPE_BYTES else None  # a format ops cannot cost: NaN
    if kind == "prefill":
        pairs, kv = _pairs_kv(g)
        seqs = g.batch.to_numpy()
        if prof:
            return prof.attn_prefill_time_s(pairs, kv, seqs, *key)
        return ops.attn_prefill_time_s(pairs, kv, seqs, *key, "bf16", hw)
    if kind == "decode":
        seqs = g.batch.to_numpy()
        kv = seqs * g.kv_len.to_numpy()
        return prof.attn_decode_time_s(seqs, kv, *key) if prof else ops.attn_decode_time_s(seqs, kv, *key, "bf16", hw)
    if kind == "collective":
        size = g.size_bytes.to_numpy()
        op, group, nodes = key[0], int(key[1]), int(key[2])
        if nodes > 1:  # the measured curve of exactly this placement, or the hierarchical datasheet model
            if prof:
                return prof.spanning_time_s(op, size, group, nodes)
            # ranks spread evenly (microbench's groups 2^k and world on whole nodes): ceil(group / nodes) a node
            call = Call(op, group, size, 1, "validate", nodes=nodes, per_node=-(-group // nodes))
            ok = hw.has_network and op in network.SPANNING_OPS
            return network.spanning_time_s(call, hw) if ok else None
        if prof:
            return prof.collective_time_s(op, size, group)
        return ops.collective_time_s(op, size, group, hw) if op in hw.collectives else None
    if kind == "copy":
        size = g.size_bytes.to_numpy()
        return prof.copy_time_s(key[0], size) if prof else ops.copy_time_s(key[0], size, hw)
    raise ValueError(kind)


def compared_rows(kind: str, df: pd.DataFrame, meas, prof) -> tuple[pd.Series, str]:
    """(mask of rows to compare, label): held-out / in-sample / unseen, by the profile's sources."""
    used = {s["sha256"]: s for s in prof.data.get("provenance", {}).get("sources", [])}
    fit_split = prof.data.get("provenance", {}).get("split", {}).get("fit_on", "fit")
    by_file = {s["file"]: s["sha256"] for s in meas.sources}
    seen = df.src.map(lambda f: by_file.get(f) in used)
    if not seen.any():
        return pd.Series(True, index=df.index), "unseen"
    if fit_split == "all":
        return pd.Series(True, index=df.index), "in-sample"
    return (~seen) | split.heldout(kind, df), "held-out"


def _shape(kind: str, r) -> str:
    if kind == "gemm":
        return f"m={r.m:.0f} n={r.n:.0f} k={r.k:.0f}"
    if kind == "prefill":
        return (f"b={r.batch:.0f} s={r.seq_len:.0f} kv={r.kv_len:.0f} h={r.heads:.0f}/{r.kv_heads:.0f} "
                f"d={r.head_dim:.0f}")
    if kind == "decode":
        return f"b={r.batch:.0f} kv={r.kv_len:.0f} h={r.heads:.0f}/{r.kv_heads:.0f} d={r.head_dim:.0f}"
    if kind == "collective":
        span = f"@{r.nodes:.0f}" if r.get("nodes", 1) > 1 else ""  # group over several nodes: g=16@2
        return f"g={r.group:.0f}{span} size={_bytes(r.size_bytes)}"
    return f"size={_bytes(r.size_bytes)}"


def _bytes(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.4g}{unit}"
    return f"{n:.0f}B"


def repeat_noise(kind: str, df: pd.DataFrame) -> float:
    """Median |t / median of its repeats - 1| over shapes measured more than once (NaN if none)."""
    shape_cols = {"gemm": ["dtype", "m", "n", "k"],
                  "prefill": ["batch", "seq_len", "kv_len", "heads", "kv_heads", "head_dim"],
                  "decode": ["batch", "kv_len", "heads", "kv_heads", "head_dim"],
                  "collective": ["op", "group", "size_bytes"], "copy": ["kind", "size_bytes"]}[kind]
    g = df.groupby(shape_cols).t_us
    rep = g.transform("size") > 1
    if not rep.any():
        return float("nan")
    return float(np.median(np.abs(df.t_us[rep] / g.transform("median")[rep] - 1)))


def _summary(op, dtype, subset, kind, d, cal, ds, label, worst_n=5) -> dict:
    meas = d.t_us.to_numpy()
    ok = np.isfinite(cal)
    e = np.abs(cal[ok] / meas[ok] - 1)
    eds = np.abs(ds / meas - 1)
    order = np.argsort(-np.abs(np.where(ok, cal / meas - 1, 0)))[:worst_n]
    worst = [{"shape": _shape(kind, d.iloc[i]), "measured_us": float(meas[i]), "predicted_us": float(cal[i]),
              "rel_err": float(cal[i] / meas[i] - 1)} for i in order if ok[i]]
    q = lambda x, p: float(np.percentile(x, p)) if len(x) else float("nan")  # noqa: E731
    return {"op": op, "dtype": dtype, "subset": subset, "rows": int(ok.sum()), "compared": label,
            "median_abs_rel_err": q(e, 50), "p90_abs_rel_err": q(e, 90),
            "datasheet_median_abs_rel_err": q(eds[np.isfinite(eds)], 50),
            "datasheet_p90_abs_rel_err": q(eds[np.isfinite(eds)], 90),
            "noise_median_abs_rel": repeat_noise(kind, d), "worst": worst}


def op_frame(meas, kind: str, hw) -> pd.DataFrame:
    """meas' frame of `kind`; collectives of unknown placement placed node-major on hw's nodes."""
    df = meas.frame(kind)
    return coll.with_nodes(df, hw.gpus_per_node) if kind == "collective" else df


def validate(meas, prof, hw) -> list[dict]:
    """One summary per op (per dtype for GEMM, plus its LLM-shaped subset) over the compared rows."""
    out = []
    for kind in ("gemm", "prefill", "decode", "collective", "copy"):
        df = op_frame(meas, kind, hw)
        if not len(df):
            continue
        mask, label = compared_rows(kind, df, meas, prof)
        df = df[mask]
        cal, ds = predict_us(kind, df, prof), predict_us(kind, df, None, hw)
        key = {"gemm": "dtype", "collective": "op", "copy": "kind"}.get(kind)
        groups = df.groupby(key) if key else [("", df)]
        for name, g in groups:
            i = df.index.get_indexer(g.index)
            if kind == "gemm":
                out.append(_summary("gemm", name, "all", kind, g, cal[i], ds[i], label))
                llm = ((g.n >= LLM_SHAPED_MIN) & (g.k >= LLM_SHAPED_MIN)).to_numpy()
                if llm.any() and not llm.all():
                    out.append(_summary("gemm", name, f"n,k>={LLM_SHAPED_MIN}", kind, g[llm], cal[i][llm],
                                        ds[i][llm], label))
            else:
                op = {"collective": name, "copy": f"memcpy_{name}"}.get(kind, KIND_OP.get(kind))
                out.append(_summary(op, "", "all", kind, g, cal[i], ds[i], label))
                multi = (g.nodes > 1).to_numpy() if kind == "collective" else np.zeros(len(g), bool)
                if multi.any() and not multi.all():  # groups over several nodes on their own
                    out.append(_summary(op, "", "nodes>1", kind, g[multi], cal[i][multi], ds[i][multi], label))
    return out


def format_table(rows: list[dict], title: str = "") -> str:
    pct = lambda x: "    -" if not np.isfinite(x) else f"{100 * x:5.1f}%"  # noqa: E731
    lines = [title] if title else []
    lines.append(f"{'op':18s} {'dtype':5s} {'subset':9s} {'rows':>6s} {'compared':9s} "
                 f"{'calibrated med/p90':>19s} {'datasheet med/p90':>19s} {'noise':>6s}")
    for r in rows:
        lines.append(f"{r['op']:18s} {r['dtype']:5s} {r['subset']:9s} {r['rows']:6d} {r['compared']:9s} "
                     f"{pct(r['median_abs_rel_err']):>9s} {pct(r['p90_abs_rel_err']):>9s} "
                     f"{pct(r['datasheet_median_abs_rel_err']):>9s} {pct(r['datasheet_p90_abs_rel_err']):>9s} "
                     f"{pct(r['noise_median_abs_rel']):>6s}")
        if r["worst"] and r["subset"] == "all":
            lines.append("    worst: " + "; ".join(f"{w['shape']} {100 * w['rel_err']:+.0f}%" for w in r["worst"]))
    return "\n".join(lines)
