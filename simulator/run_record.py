"""What summary.json adds to `summarize` (simulator.run.run calls these): the keys of vLLM's benchmark
result file that summarize does not give (docs/outputs.md cites vLLM's lines) and the `config` block
from which simulator.rerun rebuilds the run."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata as md
import math
import platform
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.workload.files import resolve_trace_path
from simulator.workload.synthetic import parse_spec as parse


# ---- summary.json: vLLM's result-file keys and the run's config -----------------------------------
# The per-request lists of vLLM's result file (`vllm bench serve --save-result --save-detailed`);
# null unless run(..., detail=True). generated_texts and itls stay null: no text, no per-token times.
DETAIL_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "latencies", "queue_times",
               "generated_texts", "errors")
# how a workload was built: the CLI's trace flags (simulator.workload.cli.workload_from_args)
WORKLOAD_ARGS = ("trace", "trace_format", "strict", "drop_failed", "burstgpt_model", "seed", "time_window",
                 "sample", "rate_scale", "max_context_clip")
SYNTHETIC = "synthetic:"


def vllm_keys(req, rs, recipe: dict, detail: bool = False) -> dict:
    """The keys of vLLM's result file that `summarize` does not give, with vLLM's meaning
    (vllm/benchmarks/serve.py; docs/outputs.md cites the lines): failed = rejected requests,
    num_prompts, traffic (request_rate, burstiness, max_concurrency), the peak-second figures and,
    with `detail`, the per-request lists. Keys vLLM fills from its client (backend, label,
    tokenizer_id, rtfx) are null: the simulator has no endpoint, tokenizer or audio."""
    rate, burst = traffic(recipe)
    peak_tokens, peak_conc = peak_second(req)
    out = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),  # vLLM's format, local time
        "endpoint_type": None, "backend": None, "label": None,
        "model_id": rs.model, "tokenizer_id": None,
        "num_prompts": int(len(req)),
        "request_rate": rate, "burstiness": burst,
        "max_concurrency": int(rs.max_concurrency) if rs.max_concurrency else None,
        "failed": int((req["status"] != "completed").sum()),
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_conc,
        "rtfx": None,
    }
    out.update(dict.fromkeys(DETAIL_KEYS))
    if detail:
        out.update(detail_lists(req))
    return out


def _floats(a) -> list:
    return [None if math.isnan(v) else float(v) for v in np.asarray(a, dtype=float)]


def detail_lists(req) -> dict:
    """vLLM's per-request lists in workload order, seconds as vLLM's: a failed (rejected) request has
    vLLM's defaults (ttft and latency 0.0, output length 0) and its reject reason as the error."""
    ok = (req["status"] == "completed").to_numpy()
    return {
        "input_lens": [int(v) for v in req["input_tokens"]],
        "output_lens": [int(v) for v in np.where(ok, req["generated_tokens"], 0)],
        "start_times": _floats(req["issued_s"]),
        "ttfts": _floats(np.where(ok, np.nan_to_num(req["ttft_ms"].to_numpy() / 1e3), 0.0)),
        "latencies": _floats(np.where(ok, req["e2el_ms"].to_numpy() / 1e3, 0.0)),
        "queue_times": _floats(req["issued_s"].to_numpy() - req["arrival_s"].to_numpy()),
        "errors": ["" if k else str(r) for k, r in zip(ok, req["reject_reason"])],
    }


def traffic(recipe: dict):
    """(request_rate, burstiness) as vLLM's result file gives them: the synthetic generator's rate and
    gamma shape (Poisson: 1.0), times --rate-scale; "inf" for a batch (every request at t=0, vLLM's
    --request-rate inf) and for a trace replayed with its own timestamps (vLLM's timed_trace dataset
    leaves --request-rate at its default inf); null where no one rate describes the arrivals (on/off
    phases, a sampled or windowed synthetic workload)."""
    trace = str(recipe.get("trace") or "")
    if not trace.startswith(SYNTHETIC):
        return "inf", None
    try:
        spec = parse(trace, default_seed=int(recipe.get("seed") or 0))
    except ValueError:  # a source text that does not parse back (e.g. input=3e+06): no known rate
        return None, None
    if spec.kind == "batch":
        return "inf", None
    if spec.kind == "onoff" or recipe.get("sample") or recipe.get("time_window"):
        return None, None
    return spec.rate_rps * float(recipe.get("rate_scale") or 1.0), float(spec.burstiness if spec.kind == "gamma" else 1.0)


def peak_second(req) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests (serve.py, calculate_metrics): over
    successful requests, 1-second buckets from the first one sent (min start_time) to
    ceil(last end - first start) + 1; a token counts in the bucket int(its time - first start); a
    request counts in every bucket from int(start) to int(end) (both included); each figure is the
    maximum over buckets (separately). A request's token times are its first token, then one every
    TPOT to its finish (vLLM adds its measured ITLs; the simulator records first token and finish per
    request, not each token). (0.0, 0) when nothing completed, as vLLM."""
    ok = (req["status"] == "completed").to_numpy()  # (the columns it reads, not a copy of the whole frame)
    if not ok.any():
        return 0.0, 0
    start, end = req["issued_s"].to_numpy(float)[ok], req["finish_s"].to_numpy(float)[ok]
    m = float(start.min())
    # buckets are kept sparse (only those a request touches): a trace spanning years costs no more
    # memory than one spanning minutes (issue 33: a 1e15 s timestamp asked for a 7 PiB dense array)
    edges, steps_ = np.concatenate([(start - m).astype(np.int64), (end - m).astype(np.int64) + 1]), \
        np.concatenate([np.ones(len(start), np.int64), -np.ones(len(end), np.int64)])
    conc = np.cumsum(_bucket_sums(edges, steps_)[1])  # from each touched bucket on
    sums: list = []  # (bucket, tokens) pairs, one array pair per chunk
    n = req["generated_tokens"].to_numpy(np.int64)[ok]
    first = req["first_token_s"].to_numpy(float)[ok] - m
    keep = n > 0
    n, a = n[keep], first[keep]
    d = np.where(n > 1, (end[keep] - m - a) / np.maximum(n - 1, 1), 0.0)
    lo = a.astype(np.int64)
    hi = (a + (n - 1) * d).astype(np.int64)
    # tokens of request i in bucket b: F_i(b + 1) - F_i(b), F_i(x) = #{j < n_i: a_i + j d_i < x};
    # evaluated only on the buckets a request spans, in chunks (memory ~ total span, not tokens)
    size = hi - lo + 1
    cum = np.cumsum(size)
    cuts = np.searchsorted(cum, np.arange(CHUNK, int(cum[-1]) if len(cum) else 0, CHUNK), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [len(size)]])).tolist()
    for lo_i, hi_i in zip(bounds[:-1], bounds[1:]):
        sl = slice(lo_i, hi_i)
        rep = np.repeat(np.arange(hi_i - lo_i), size[sl])
        b = lo[sl][rep] + (np.arange(len(rep)) - np.repeat(np.cumsum(size[sl]) - size[sl], size[sl]))
        ai, di, ni = a[sl][rep], d[sl][rep], n[sl][rep]
        sums.append(_bucket_sums(b, _count_below(b + 1, ai, di, ni) - _count_below(b, ai, di, ni)))
    peak = 0.0
    if sums:
        _, tot = _bucket_sums(np.concatenate([u for u, _ in sums]), np.concatenate([w for _, w in sums]))
        peak = float(tot.astype(np.int64).max())
    return peak, int(np.rint(conc).max())


def _bucket_sums(b, w) -> tuple:
    """(the distinct buckets of `b`, ascending; the sum of `w` over each), summed in input order. Dense (bincount
    over the buckets' range, O(n)) where that range is at most a few times the entries, as for any trace of
    hours or days; sorted (np.unique, O(n log n)) otherwise: a span of years stays as small as its entries."""
    if not len(b):
        return b, np.zeros(0)
    lo, hi = int(b.min()), int(b.max())
    if hi - lo > 4 * len(b) + 1024:
        ub, inv = np.unique(b, return_inverse=True)
        return ub, np.bincount(inv, weights=w, minlength=len(ub))
    off = b - lo
    at = np.flatnonzero(np.bincount(off))
    return at + lo, np.bincount(off, weights=w)[at]


CHUNK = 250_000  # request-bucket pairs evaluated at once (peak_second: ~10 arrays of this many, 8 bytes each; 1M was ~80 MB at the peak of a 1M-request run, issue 36)


def _count_below(x, a, d, n):
    """#{j in [0, n): a + j d < x} elementwise (d = 0: one token at a)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(d > 0, np.ceil((x - a) / np.where(d > 0, d, 1.0)), np.where(x > a, n, 0))
    return np.clip(k, 0, n)


def max_in_flight(req) -> int:
    """The most requests in flight at one instant (issued, not finished; ours, not vLLM's): at most
    max_concurrency in a closed loop. vLLM's max_concurrent_requests counts every request active at
    any time within a 1-s bucket, so it may exceed the concurrency limit when requests turn over."""
    ok = (req["status"] == "completed").to_numpy()
    if not ok.any():
        return 0
    t = np.concatenate([req["finish_s"].to_numpy(float)[ok], req["issued_s"].to_numpy(float)[ok]])
    n = int(ok.sum())
    step = np.concatenate([-np.ones(n, np.int64), np.ones(n, np.int64)])
    order = np.lexsort((step, t))  # at one instant, finishes before issues (a closed loop's hand-over)
    return int(np.cumsum(step[order]).max())


# ---- config: everything rerun needs -------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _sha256_cached(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path) -> str:
    """sha256 of a file's bytes (cached per path, mtime and size)."""
    st = Path(path).stat()
    return _sha256_cached(str(Path(path).resolve()), st.st_mtime_ns, st.st_size)


def workload_sha256(wl) -> str:
    """sha256 of a workload's request frame (every column, workload order): what rerun checks the
    rebuilt workload against."""
    df = wl.requests
    cols = {c: (df[c].map(repr) if df[c].dtype == object else df[c]) for c in df.columns}
    h = hashlib.sha256(",".join(df.columns).encode())
    h.update(pd.util.hash_pandas_object(pd.DataFrame(cols), index=False).to_numpy().tobytes())
    return h.hexdigest()


def workload_recipe(wl, workload_args=None) -> dict:
    """The workload's recipe (WORKLOAD_ARGS, None where unset) with the trace file's resolved path and
    sha256 (null for a synthetic spec) and the sha256 of the workload itself."""
    get = workload_args.get if isinstance(workload_args, dict) else (
        (lambda k: getattr(workload_args, k, None)) if workload_args is not None else (lambda k: None))
    recipe = {k: get(k) for k in WORKLOAD_ARGS}
    recipe["trace"] = str(recipe["trace"] or getattr(wl, "source", "<memory>"))
    if recipe["trace"].startswith(SYNTHETIC):
        try:
            spec_seed = parse(recipe["trace"], default_seed=int(recipe["seed"] or 0)).seed
        except ValueError:  # a source text that does not parse back: rerun will say so
            spec_seed = None
        recipe.update(path=None, sha256=None, synthetic=recipe["trace"], seed=spec_seed if recipe["seed"] is None
                      else recipe["seed"])
    else:
        path = Path(getattr(wl, "source", "") or "")
        if not path.is_file() and get("path") and Path(get("path")).is_file():
            path = Path(get("path"))  # a rerun: the file its run read, found again by its resolved path
        if not path.is_file():
            try:
                path = resolve_trace_path(recipe["trace"])
            except Exception:  # noqa: BLE001  (an in-memory workload: nothing to rebuild it from)
                path = None
        recipe.update(path=str(path.resolve()) if path else None, sha256=file_sha256(path) if path else None,
                      synthetic=None)
    recipe["num_requests"] = len(wl)
    recipe["requests_sha256"] = workload_sha256(wl)
    return recipe


def _versions() -> dict:
    return {name: v for name, v in _version_items() if name != TOOL}


@functools.lru_cache(maxsize=1)
def _version_items() -> tuple:
    """(name, version) of the tool, Python and the libraries a run's numbers depend on, read once per process (the
    four package metadata lookups took ~0.9 ms, ~5% of a 20-request run: every validate replay, sweep and recommend
    run paid it; 2026-12-02)."""
    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "unknown"

    return ((TOOL, version(TOOL)), ("python", platform.python_version()),
            *((p, version(p)) for p in ("numpy", "pandas", "simpy")))


def run_config(wl, rs, recipe: dict, prof, framework=None) -> dict:
    """summary["config"]: the workload recipe (trace path + sha256, or the synthetic spec), every
    RunSpec field (EngineConfig included), the profile (name, file, sha256; a derived profile's base
    too), the framework (and a caller's own Framework, when run() was given one), the workload seed,
    the tool's version and the Python / numpy / pandas / simpy versions."""
    tool_version = dict(_version_items())[TOOL]
    profile = {"name": "datasheet", "path": None, "sha256": None, "base": None}
    if prof is not None:
        profile.update(name=prof.name, path=str(prof.path), sha256=file_sha256(prof.path) if prof.path else None)
        derived = (getattr(prof, "data", None) or {}).get("derived_from")
        if derived and prof.path:
            base = (Path(prof.path).parent / derived["profile"]).resolve()
            profile["base"] = {"name": prof.base, "path": str(base), "sha256": file_sha256(base)}
    return {
        "workload": recipe,
        "run_spec": dataclasses.asdict(rs),
        "profile": profile,
        "framework": rs.framework,
        "framework_override": dataclasses.asdict(framework) if framework is not None else None,
        "seed": recipe.get("seed"),
        "tool": {"name": TOOL, "version": tool_version},
        "environment": _versions(),
    }


TOOL = "parallelism-sim"  # pyproject [project] name
