"""Reading a profile's `moe` section (calibration/moe.py fits it): which table answers a framework, weight
format, mode, kernel family and routing skew, and the fitted ratio at (split, rows per hit expert)."""
from __future__ import annotations

import numpy as np


def lookup(section: dict, framework: str, weight_dtype: str, mode: str, kernel: str = "", routing: str = ""):
    """The section's table for these keys (Profile.moe_factor's lookup), or None. `framework` without tables
    reads the section's framework_fallback; weight_dtype_map names one quant key per weight format, or several
    (a Blackwell fit: mxfp4 -> its W4A16 and W4A8 MXFP4 tables): this framework's first that has a table."""
    if not section:
        return None
    fws = section.get("frameworks", {})
    quants = fws.get(framework) or fws.get(section.get("framework_fallback", ""), {})
    cands = section.get("weight_dtype_map", {}).get(weight_dtype, weight_dtype)
    cands = [cands] if isinstance(cands, str) else list(cands)
    bases = {q.split("@")[0] for q in quants}
    quant = next((c for c in cands if c in bases or f"{c}_{kernel}" in bases), cands[0])
    if kernel and f"{quant}_{kernel}" in bases:  # a non-default kernel family's table
        quant = f"{quant}_{kernel}"
    routing = routing or section.get("default_routing", "")
    if routing and f"{quant}@{routing}" in quants:
        quant = f"{quant}@{routing}"
    return quants.get(quant, {}).get("tables", {}).get(mode)


def moe_ratio(tab: dict, split: float, m_e):
    """exp of the table's log ratio, bilinear in (log2 split, log2 m_e), clamped to the table's range."""
    grid = np.asarray(tab["log2_me"], dtype=float)
    lr = np.asarray(tab["log_ratio"], dtype=float)  # [split][x]
    ls = np.log2(np.asarray(tab["splits"], dtype=float))
    s = float(np.clip(np.log2(max(split, 1.0)), ls[0], ls[-1]))
    j = int(np.clip(np.searchsorted(ls, s) - 1, 0, max(len(ls) - 2, 0)))
    w = 0.0 if len(ls) == 1 else (s - ls[j]) / (ls[j + 1] - ls[j])
    row = lr[j] if len(ls) == 1 else (1 - w) * lr[j] + w * lr[j + 1]
    x = np.log2(np.maximum(m_e, 1.0))
    return np.exp(np.interp(x, grid, row))
