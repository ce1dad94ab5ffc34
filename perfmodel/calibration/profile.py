"""Calibrated profile: the fitted tables of one GPU kind, answering perfmodel.ops' questions.

A profile is a JSON file (perfmodel/profiles/<name>.json, or any path) written by
`perfmodel calibrate`. Every method takes numpy arrays and returns float64 seconds, or None when
the profile does not cover that op / dtype / group (ops.py then uses the datasheet roofline).
A derived profile (h200_sxm.json) names its base profile and the datasheet ratio it applies.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np

from ..formats import DTYPE_BYTES
from . import attention as att
from . import collectives as coll
from . import gemm as gm
from . import grid
from . import moe_table
from .coverage import caveats
from .moe_table import moe_ratio  # noqa: F401 (re-exported: tests import it from here)

PROFILE_DIR = Path(__file__).resolve().parents[1] / "profiles"
FORMAT = "parallelism-sim calibrated profile 1"
NOT_CALIBRATED = {
    "elementwise": ("datasheet HBM bandwidth (hardware preset; not calibrated) + a launch floor per misc kernel "
                    "(the framework's count: perfmodel/misc_kernels.py)"),
    "overhead": "Framework defaults (perfmodel/framework.py; not calibrated)",
    "pipeline_bubble": "idle pipeline stages: derived from the calibrated stage time",
}


class ComputeScale:
    """The `fp8_compute_scale` section (calibration/fp8_scale.py) parsed: seconds of the compute-scale pass at
    (m, k), bilinear in (log m, log k) on the grid, k clamped to it, m above it scaled in proportion (the pass
    reads the m x k activation)."""

    __slots__ = ("lm", "lk", "us", "m_max")

    def __init__(self, d: dict):
        self.lm, self.lk = np.log(np.asarray(d["m"], dtype=float)), np.log(np.asarray(d["k"], dtype=float))
        self.us = np.asarray(d["us"], dtype=float)
        if self.us.shape != (len(self.lm), len(self.lk)):
            raise ValueError(f"fp8_compute_scale us shape {self.us.shape} does not match its m, k axes")
        self.m_max = float(np.exp(self.lm[-1]))

    def time_s(self, m, k) -> np.ndarray:
        m, k = (np.asarray(x, dtype=float) for x in (m, k))
        t = grid.interp((self.lm, self.lk), self.us, (np.log(np.maximum(m, 1.0)), np.log(np.maximum(k, 1.0))))
        return t * np.maximum(m / self.m_max, 1.0) * 1e-6


@dataclasses.dataclass(frozen=True, eq=False)
class Profile:
    """Parsed tables (immutable once loaded; shared through load_profile's cache; hashable by
    identity, so callers may key caches on it)."""

    name: str
    path: str
    hardware: str
    roof: dict
    gemm: dict  # dtype -> GemmTable
    prefill: dict  # head_dim -> PrefillTable
    decode: dict  # head_dim -> DecodeTable
    collectives: dict  # op -> {group: Curve}: groups inside one node (JSON keys "2", "8")
    copies: dict  # kind -> Curve
    hbm_ratio: float = 1.0  # derived profiles: base HBM bandwidth / this GPU's (1 = measured here)
    base: str = ""  # derived profiles: the name of the profile whose tables these are
    notes: dict = dataclasses.field(default_factory=dict)  # op -> caveat of its source data
    moe: dict = dataclasses.field(default_factory=dict, repr=False)  # the `moe` section (calibration/moe.py)
    data: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    spanning: dict = dataclasses.field(default_factory=dict)  # op -> {(group, nodes): Curve}: measured
    # groups over several nodes (JSON keys "16@2"); exact placements only (spanning_time_s)
    mla: dict = dataclasses.field(default_factory=dict)  # kv dtype -> (DecodeTable, its head_dim): MLA decode
    # section -> what a run uses where this profile is silent, or the device it was wrongly fitted on
    # (calibration/coverage.py caveats; printed by every estimate, for summaries to show)
    caveats: dict = dataclasses.field(default_factory=dict)
    compute_scale: ComputeScale | None = None  # the `fp8_compute_scale` section (calibration/fp8_scale.py)

    # ---- the protocol perfmodel.ops calls -------------------------------------------------------
    def gemm_time_s(self, m, n, k, dtype: str):
        """C[m,n] = A[m,k] W[k,n] in compute dtype `dtype` (bf16/fp8/fp4; fp32 on CPU), or None (no table for
        it, gemm.DTYPE_FALLBACK: fp4 is answered from an fp4 table only)."""
        for d in gm.DTYPE_FALLBACK.get(dtype, (dtype,)):
            if d in self.gemm:
                m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
                t = gm.gemm_time_s(self.gemm[d], m, n, k, d, self.roof)
                return self._hbm_share(t, gm.gemm_bytes(m, n, k, d))
        return None

    def fp8_static_time_s(self, t, m, n, k):
        """An fp8 GEMM row's time `t` (gemm_time_s) without the compute-scale pass its dynamic kernel ran: a static
        activation scale's GEMM (fp8_scale.py), floored at the fp8 roofline; `t` unchanged without the section."""
        if self.compute_scale is None:
            return t
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        return np.maximum(t - self.compute_scale.time_s(m, k), gm.roofline_s(m, n, k, "fp8", self.roof))

    def attn_prefill_time_s(self, pairs, kv_tokens, seqs, heads, kv_heads, head_dim, kv_dtype: str = "bf16"):
        """Causal prefill attention on one GPU (aggregates as in perfmodel.batch), or None."""
        if not self.prefill:
            return None
        pairs, kv_tokens, seqs = (np.asarray(x, dtype=float) for x in (pairs, kv_tokens, seqs))
        t = att.by_head_dim(self.prefill, head_dim, lambda tab: tab.time_s(
            pairs, kv_tokens, seqs, heads, kv_heads, head_dim, self.roof))
        return self._hbm_share(t, kv_tokens * _kv_bytes(kv_dtype) * kv_heads * head_dim)

    def prefill_table(self, head_dim):
        """The prefill table that alone answers attn_prefill_time_s at `head_dim` (one measured at exactly that
        head_dim, no derived bandwidth rescaling), else None (cost.scalar_prefill_attention's fast path)."""
        return self.prefill.get(head_dim) if self.hbm_ratio == 1.0 else None

    def attn_decode_time_s(self, seqs, kv_tokens, heads, kv_heads, head_dim, kv_dtype: str = "bf16"):
        """Decode attention: fixed(seqs) + per_byte(seqs) * KV bytes, affine in kv_tokens, or None.
        fp8 KV halves the bytes (fit on bf16 KV: assumes the per-byte cost is bandwidth)."""
        if not self.decode:
            return None
        scale = self.hbm_ratio * _kv_bytes(kv_dtype) / att.KV_BYTES
        return att.by_head_dim(self.decode, head_dim, lambda tab: tab.time_s(
            seqs, kv_tokens, heads, kv_heads, head_dim, kv_scale=scale))

    def collective_time_s(self, op: str, size_bytes, group: int):
        """Measured-curve time of `op` over `group` ranks (nccl-tests size), or None if not covered."""
        curves = self.collectives.get(op)
        if not curves:
            return None
        return coll.group_time_s(curves, np.asarray(size_bytes, dtype=float), int(group))

    def spanning_time_s(self, op: str, size_bytes, group: int, nodes: int):
        """Measured time of `op` over `group` ranks spread evenly over `nodes` nodes (group / nodes per
        node, node-major), or None when that exact (group, nodes) was not measured: no interpolation
        across groups or node counts (the NIC share of the bytes changes with both)."""
        curve = self.spanning.get(op, {}).get((int(group), int(nodes)))
        if curve is None:
            return None
        size = np.asarray(size_bytes, dtype=float)
        return np.where(size > 0, curve.time_s(size), 0.0)

    def mla_decode_time_s(self, seqs, kv_tokens, heads: int, kv_dtype: str):
        """Absorbed-MLA decode attention (calibration/mla_decode.py: one latent per key, `heads` query heads on
        the GPU), or None without the section; a derived profile scales the per-byte part by its HBM ratio."""
        if kv_dtype not in self.mla:
            return None
        tab, head_dim = self.mla[kv_dtype]
        return tab.time_s(seqs, kv_tokens, heads, 1.0, head_dim, kv_scale=self.hbm_ratio)

    def copy_time_s(self, kind: str, nbytes):
        """Measured-curve time of an h2d/d2h/d2d/p2p copy, or None (datasheet formula) if unmeasured."""
        if kind not in self.copies:
            return None
        nbytes = np.asarray(nbytes, dtype=float)
        return np.where(nbytes > 0, self.copies[kind].time_s(nbytes), 0.0)

    def moe_factor(self, framework: str, weight_dtype: str, mode: str, split: int, m_e, kernel: str = "",
                   routing: str = ""):
        """Measured fused-MoE time / perfmodel.cost's formula for `framework`'s kernels on weights
        `weight_dtype`, `mode` 'ep' (split = EP degree) or 'tp' (split = MoE-TP degree), at m_e rows per
        hit expert: exp of the fitted log ratio, bilinear in (log2 split, log2 m_e), clamped to the
        table's range; None when the profile has no table for it (cost.py keeps the formula).
        `kernel`: a non-default kernel family's table ("<quant>_<kernel>") where the profile has one.
        `routing`: the routing skew's table ("<quant>@<routing>", perfmodel.knobs.moe_routing; "" the
        section's default_routing) where the profile has one, else the unsuffixed table."""
        tab = self._moe_table(framework, weight_dtype, mode, kernel, routing)
        if not tab:
            return None
        return moe_table.moe_ratio(tab, float(split), np.asarray(m_e, dtype=float))

    def moe_floor_s(self, framework: str, weight_dtype: str, mode: str, kernel: str = "", routing: str = "") -> float:
        """The fused-MoE kernel's fixed time per layer (seconds) that the table's fit took out before the
        ratio (its `floor_ms`: the intercept of time against the formula through the 1- and 2-token points,
        calibration.moe.floor_intercept_ms; e.g. 32 us for vLLM 0.24's Marlin MoE family under TP); 0 for a
        table fitted without one or no table."""
        tab = self._moe_table(framework, weight_dtype, mode, kernel, routing)
        return float(tab.get("floor_ms", 0.0)) * 1e-3 if tab else 0.0

    def moe_shape_factor(self, framework: str, weight_dtype: str, mode: str, split: int, m_e, shape: str,
                         kernel: str = "", routing: str = ""):
        """Where the table measured this model shape itself (`shape`: calibration.moe_shapes.shape_key), the
        median measured / cross-shape fit at that shape (bilinear like moe_factor); 1 elsewhere."""
        tab = self._moe_table(framework, weight_dtype, mode, kernel, routing)
        own = (tab or {}).get("shapes", {}).get(shape)
        if not own:
            return 1.0
        own_tab = {"log2_me": tab["log2_me"], "splits": own["splits"], "log_ratio": own["log_ratio"]}
        return moe_table.moe_ratio(own_tab, float(split), np.asarray(m_e, dtype=float))

    def _moe_table(self, framework: str, weight_dtype: str, mode: str, kernel: str = "", routing: str = ""):
        """The `moe` section's table for these keys (moe_factor's lookup), or None."""
        return moe_table.lookup(self.moe, framework, weight_dtype, mode, kernel, routing)

    # ---- provenance ------------------------------------------------------------------------------
    def describe(self, op: str) -> str:
        """Which profile and which fit produce a cost term or op (for `perfmodel estimate --explain`)."""
        own = src = f"{self.name}.json"
        if self.base:
            scaled = op in ("gemm", "attention", "attention_prefill", "attention_decode")
            src += (f" ({self.base}.json tables, HBM-bound share x {self.hbm_ratio:.3f})" if scaled
                    else f" ({self.base}.json tables, unchanged)")
        if op == "gemm":
            if not self.gemm:
                return f"datasheet roofline ({own} has no GEMM rows)"
            note = self.notes.get("gemm", "")
            moe = ("; routed experts: the `moe` section's measured fused-MoE tables per framework and format "
                   "(a fixed time per layer + a ratio to this grid; a bundled preset's own measured shape "
                   "where the table has it)") if self.moe else ""
            return (f"{src}: gemm {'/'.join(sorted(self.gemm))} efficiency grid, trilinear in log m, n, k "
                    "(edge efficiency x roofline outside the grid)" + (f"; {note}" if note else "") + moe)
        if op in ("attention", "attention_prefill", "attention_decode"):
            if not (self.prefill or self.decode):
                return f"datasheet roofline ({own} has no attention rows)"
            dims = ",".join(str(int(d)) for d in sorted(self.prefill or self.decode))
            parts = []
            if self.prefill and op != "attention_decode":
                parts.append("prefill efficiency grid over log (s, seqs*heads, GQA)")
            if self.decode and op != "attention_prefill":
                parts.append("decode fixed + KV bytes / bandwidth over log (seqs*kv_heads, GQA)")
            mla = "; MLA decode: the `mla_decode` section's kernel table per KV dtype" if self.mla else ""
            return f"{src}: {'; '.join(parts)}, per head_dim {dims}" + (mla if op != "attention_prefill" else "")
        if op in self.collectives or op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                             "send_recv", "custom_all_reduce"):
            if op not in self.collectives:
                return f"datasheet alpha-beta (hardware preset; {own} has no {op} rows)"
            groups = ",".join(str(g) for g in sorted(self.collectives[op]))
            text = f"{src}: {op} measured time, log-log interpolation over size, groups {groups}"
            if op == "all_reduce" and "custom_all_reduce" in self.collectives:
                text += "; custom one/two-shot all-reduce curve for messages <= 8 MiB"
            if self.spanning.get(op):
                text += "; measured over several nodes (group@nodes): " + ",".join(
                    f"{g}@{n}" for g, n in sorted(self.spanning[op]))
            return text
        kind = op.replace("memcpy_", "")
        if kind in ("h2d", "d2h", "d2d", "p2p"):
            if kind in self.copies:
                return f"{src}: {kind} copy measured time, log-log interpolation over bytes"
            return f"datasheet copy formula (hardware preset; {own} has no {kind} rows)"
        return NOT_CALIBRATED.get(op, f"datasheet roofline (not in {own})")

    def _hbm_share(self, t, nbytes):
        """Derived profiles: the share of the time that moving `nbytes` at the base GPU's datasheet
        bandwidth takes is scaled by hbm_ratio; the rest (compute, latency floors) is unchanged."""
        if self.hbm_ratio == 1.0:
            return t
        share = np.clip(nbytes / (self.roof["hbm_gbs"] * 1e9) / np.maximum(t, 1e-30), 0.0, 1.0)
        return t * (1.0 - share + share * self.hbm_ratio)


def _kv_bytes(kv_dtype: str) -> float:
    """K and V bytes per element: bf16 4, fp8 2, nvfp4 9/8 (its scales included). Regression: every dtype
    but fp8 read as bf16, so an nvfp4 KV cache decoded no faster than bf16 on a calibrated profile."""
    return 2.0 * DTYPE_BYTES[kv_dtype]


def from_dict(d: dict, path: str = "", base: "Profile | None" = None) -> Profile:
    """Build a Profile from its JSON content (for a derived profile, `base` is the parsed base)."""
    where = path or d.get("name", "profile")
    if d.get("format") != FORMAT:
        raise ValueError(f"{where}: not a calibrated profile (format {d.get('format')!r}, expected {FORMAT!r})")
    name = d.get("name", Path(path).stem)
    if "derived_from" in d:
        if base is None:
            raise ValueError(f"{where}: derived profile needs its base {d['derived_from'].get('profile')!r}")
        return dataclasses.replace(base, name=name, path=path, hardware=d["hardware"],
                                   hbm_ratio=float(d["transfer"]["hbm_ratio"]), base=base.name, data=d)
    unnormalised = sorted(set(d.get("gemm", {})) - set(d.get("roofline", {}).get("peak_tflops", {})))
    if unnormalised:  # a GEMM table is an efficiency against the roofline at its dtype's peak
        raise ValueError(f"{where}: malformed profile (gemm {unnormalised[0]} table without a roofline peak_tflops "
                         f"{unnormalised[0]!r})")
    try:
        return Profile(
            name=name, path=path, hardware=d["hardware"], roof=d["roofline"],
            gemm={k: gm.GemmTable(v) for k, v in d.get("gemm", {}).items()},
            prefill={float(k): att.PrefillTable(v) for k, v in d.get("attention_prefill", {}).items()},
            decode={float(k): att.DecodeTable(v) for k, v in d.get("attention_decode", {}).items()},
            collectives=coll.curves_of(d, multi=False), spanning=coll.curves_of(d, multi=True),
            mla=_mla_tables(d),
            copies={k: coll.Curve(v) for k, v in d.get("copies", {}).items()},
            notes=d.get("provenance", {}).get("notes", {}), moe=d.get("moe", {}), data=d, caveats=caveats(d),
            compute_scale=ComputeScale(d["fp8_compute_scale"]) if "fp8_compute_scale" in d else None)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: malformed profile ({type(e).__name__}: {e})") from None


def _mla_tables(d: dict) -> dict:
    return {k: (att.DecodeTable(v), att.equiv_head_dim(k)) for k, v in d.get("mla_decode", {}).get("tables", {}).items()}


@functools.lru_cache(maxsize=32)
def _load(path: str) -> Profile:
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    base = None
    if "derived_from" in d:
        base = _load(str((Path(path).parent / d["derived_from"]["profile"]).resolve()))
    return from_dict(d, path, base)


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def profile_path(name_or_path) -> Path:
    """The JSON file of a shipped profile by name (h100_sxm, h200_sxm) or a profile JSON path."""
    p = Path(name_or_path)
    if not p.is_file():
        p = PROFILE_DIR / f"{str(name_or_path).lower().replace('-', '_')}.json"
        if not p.is_file():
            raise ValueError(f"unknown profile {str(name_or_path)!r}: give a JSON path or one of "
                             f"{', '.join(profile_names()) or '(none shipped)'}")
    return p


def load_profile(name_or_path) -> Profile:
    """A shipped profile by name (h100_sxm, h200_sxm) or a profile JSON path; cached per file."""
    return _load(str(profile_path(name_or_path).resolve()))


def default_profile(hw):
    """The shipped profile named by the hardware preset (hw.profile), or None (datasheet roofline)."""
    name = getattr(hw, "profile", "")
    if name and (PROFILE_DIR / f"{name}.json").is_file():
        return load_profile(name)
    return None


def resolve_profile(hw, name: str | None):
    """The profile a run uses: 'none' -> None (datasheet roofline), a shipped name or JSON path,
    or None given -> hw's default (default_profile). CLIs, sweeps and notebooks all resolve here."""
    if name == "none":
        return None
    return load_profile(name) if name else default_profile(hw)
