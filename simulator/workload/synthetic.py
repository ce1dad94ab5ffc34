"""Synthetic traces from a spec string: synthetic:KIND?key=value&... (see traces/README.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from . import generators as g
from .checks import ReadOptions
from .errors import TraceError
from .files import read_trace_file
from .workload import Workload, make_workload

SYNTHETIC_PREFIX = "synthetic:"
KINDS = ("poisson", "gamma", "onoff", "batch")
_COMMON = ("n", "duration_s", "input", "output", "lengths", "priority", "seed")
KEYS = {"poisson": _COMMON + ("rate",), "gamma": _COMMON + ("rate", "burstiness"),
        "onoff": _COMMON + ("low", "high", "off_s", "on_s"),
        "batch": ("n", "input", "output", "lengths", "priority", "seed")}


@dataclass(frozen=True)
class SyntheticSpec:
    """A synthetic workload: arrival process, request count or duration, lengths, priorities, seed."""

    kind: str = "poisson"
    n: int | None = None  # requests; default 1000 unless duration_s is given
    duration_s: float | None = None
    rate_rps: float = 10.0  # poisson / gamma mean rate
    burstiness: float = 1.0  # gamma shape: 1 = Poisson, < 1 burstier (CV = 1/sqrt(burstiness))
    low_rps: tuple[float, float] = (2.0, 5.0)  # onoff: rate range of the low phases
    high_rps: tuple[float, float] = (10.0, 30.0)  # onoff: rate range of the burst phases
    off_s: float = 60.0
    on_s: float = 30.0
    input_tokens: tuple[int, int] = (1024, 1024)  # uniform [lo, hi]; equal = fixed
    output_tokens: tuple[int, int] = (128, 128)
    lengths: str | None = None  # trace / length table to resample (input, output) pairs from
    priority: tuple[tuple[int, float], ...] = ((0, 1.0),)  # (priority, weight) pairs
    seed: int = 0

    def __post_init__(self):
        def bad(field, msg):
            raise TraceError(f"{SYNTHETIC_PREFIX}{self.kind}", msg, field=field)
        if self.kind not in KINDS:
            bad("kind", f"unknown generator {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.n is not None and self.duration_s is not None:
            bad("n", "give n or duration_s, not both")
        if self.kind == "batch" and self.duration_s is not None:
            bad("duration_s", "a batch has all requests at t=0: give n")
        if self.n is not None and self.n < 1:
            bad("n", f"must be >= 1, got {self.n}")
        for name in ("duration_s", "rate_rps", "burstiness", "off_s", "on_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                bad(name, f"must be a positive number, got {v}")
        for name in ("low_rps", "high_rps", "input_tokens", "output_tokens"):
            lo, hi = getattr(self, name)
            if not (0 <= lo <= hi) or not math.isfinite(hi):
                bad(name, f"range must satisfy 0 <= lo <= hi, got {lo}-{hi}")
        if self.input_tokens[0] < 1:
            bad("input", "input tokens must be >= 1")
        if self.high_rps[1] <= 0:
            bad("high", "the burst rate must be > 0")
        if any(w < 0 for _, w in self.priority) or sum(w for _, w in self.priority) <= 0:
            bad("priority", "weights must be >= 0 and not all 0")


def parse_spec(text: str, default_seed: int = 0) -> SyntheticSpec:
    """Parse 'synthetic:gamma?rate=10&burstiness=0.5&n=1000&input=1024&output=128'."""
    body = text[len(SYNTHETIC_PREFIX):] if text.startswith(SYNTHETIC_PREFIX) else text
    kind, _, query = body.partition("?")
    if kind not in KINDS:
        raise TraceError(text, f"unknown generator {kind!r}; choose one of {', '.join(KINDS)}",
                         field="kind")
    kw: dict = {"kind": kind, "seed": default_seed}
    for item in filter(None, query.split("&")):
        key, eq, value = item.partition("=")
        if key not in KEYS[kind] or not eq:
            raise TraceError(text, f"expected key=value with key one of {', '.join(KEYS[kind])}",
                             field=key)
        try:
            kw.update(_value(key, value))
        except ValueError as e:
            raise TraceError(text, f"bad value {value!r} ({e})", field=key) from None
    return SyntheticSpec(**kw)


def _value(key: str, v: str) -> dict:
    if key in ("n", "seed"):
        return {key: int(v)}
    if key in ("duration_s", "off_s", "on_s", "burstiness"):
        return {key: float(v)}
    if key == "rate":
        return {"rate_rps": float(v)}
    if key in ("low", "high"):
        return {f"{key}_rps": _range(v, float)}
    if key in ("input", "output"):
        return {f"{key}_tokens": _range(v, int)}
    if key == "priority":  # 0:0.8,1:0.2
        pairs = [p.split(":") for p in v.split(",")]
        if any(len(p) != 2 for p in pairs):
            raise ValueError("expected PRIORITY:WEIGHT[,PRIORITY:WEIGHT...]")
        return {"priority": tuple((int(p), float(w)) for p, w in pairs)}
    return {"lengths": v}


def _range(v: str, typ) -> tuple:
    lo, sep, hi = v.partition("-")
    if sep and not lo:  # "-3": a negative number, not a range
        raise ValueError("must be >= 0 (a range is LO-HI)")
    return (typ(lo), typ(hi)) if sep else (typ(v), typ(v))


def generate(spec: SyntheticSpec) -> Workload:
    """Draw a Workload; arrivals, lengths and priorities use separate seeded streams."""
    arr_rng, len_rng, pri_rng = (np.random.default_rng(s)
                                 for s in np.random.SeedSequence(spec.seed).spawn(3))
    draw = _arrival_draw(spec)
    if spec.duration_s is not None:
        t = g.arrivals_until(spec.duration_s, draw, arr_rng, int(_mean_rate_rps(spec) * spec.duration_s))
    else:
        t = draw(spec.n or 1000, arr_rng)
    n = len(t)
    if n == 0:
        raise TraceError(_source(spec), "generated no requests (duration too short?)", field="duration_s")
    if spec.lengths:
        # as load_trace(spec.lengths) reads it (load.py imports this module, so its two branches are spelt here)
        lengths = (generate(parse_spec(spec.lengths)) if spec.lengths.startswith(SYNTHETIC_PREFIX)
                   else read_trace_file(spec.lengths, None, ReadOptions()))
        table = lengths.requests
        inp, out = g.empirical_lengths(n, table["input_tokens"].to_numpy(),
                                       table["output_tokens"].to_numpy(), len_rng)
    else:
        (in_lo, in_hi), (out_lo, out_hi) = spec.input_tokens, spec.output_tokens  # (lo, hi) tokens
        inp = g.uniform_lengths(n, in_lo, in_hi, len_rng)
        out = g.uniform_lengths(n, out_lo, out_hi, len_rng)
    prio = g.priority_mix(n, dict(spec.priority), pri_rng)
    cols = {"arrival_s": t, "input_tokens": inp, "output_tokens": out, "priority": prio}
    return make_workload(cols, _source(spec))


def _mean_rate_rps(spec: SyntheticSpec) -> float:
    """Expected long-run rate, used only to size the first draw of a duration-bounded trace."""
    if spec.kind != "onoff":
        return spec.rate_rps
    low, high = sum(spec.low_rps) / 2, sum(spec.high_rps) / 2  # mean of each uniform range
    return (low * spec.off_s + high * spec.on_s) / (spec.off_s + spec.on_s)


def _arrival_draw(spec: SyntheticSpec):
    if spec.kind == "poisson":
        return lambda n, rng: g.poisson_arrivals_s(n, spec.rate_rps, rng)
    if spec.kind == "gamma":
        return lambda n, rng: g.gamma_arrivals_s(n, spec.rate_rps, spec.burstiness, rng)
    if spec.kind == "onoff":
        return lambda n, rng: g.onoff_arrivals_s(n, spec.low_rps, spec.high_rps, spec.off_s,
                                                 spec.on_s, rng)
    return lambda n, rng: g.batch_arrivals_s(n)


def _source(spec: SyntheticSpec) -> str:
    """The spec string that regenerates this workload, every key its kind reads with the value used,
    defaults included (`gamma?rate=5` records burstiness, n, input, output, priority and seed), so the
    summary's trace name stays unambiguous if a default ever changes."""
    keys = {"rate_rps": "rate", "low_rps": "low", "high_rps": "high", "input_tokens": "input",
            "output_tokens": "output"}
    items = []
    for f in fields(spec):
        name, v = keys.get(f.name, f.name), getattr(spec, f.name)
        if f.name == "n" and v is None and spec.duration_s is None:
            v = 1000  # generate()'s default count
        if name not in KEYS[spec.kind] or v is None or (spec.lengths and name in ("input", "output")):
            continue  # not this kind's key, not given (n or duration_s), or lengths resampled instead
        if isinstance(v, tuple) and f.name == "priority":
            v = ",".join(f"{p}:{_num(w)}" for p, w in v)
        elif isinstance(v, tuple):
            v = _num(v[0]) if v[0] == v[1] else f"{_num(v[0])}-{_num(v[1])}"
        elif isinstance(v, float):
            v = _num(v)
        items.append(f"{name}={v}")
    return f"{SYNTHETIC_PREFIX}{spec.kind}?{'&'.join(items)}"


def _num(v) -> str:
    """Short text for a number that parses back to the same value."""
    short = f"{v:g}"
    return short if float(short) == v else repr(v)
