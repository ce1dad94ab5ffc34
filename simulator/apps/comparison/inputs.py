"""Read what `simulate compare` compares: a run directory or a vLLM benchmark result file.

* a run directory as `simulate --out` or `simulate replay --out` writes it (requests.parquet and
  summary.json; steps.parquet when present), or that directory's summary.json;
* a vLLM `bench serve --save-result --save-detailed` JSON file (vllm/benchmarks/serve.py; the keys
  docs/outputs.md cites): per-request lists `input_lens`, `output_lens`, `ttfts` (s), `itls` (s, one list
  per request), and where the version writes them `start_times` (time.perf_counter() at send),
  `latencies` (s), `queue_times` (s) and `errors` ("" on success).

`vllm_requests` turns a vLLM file into the simulator's requests frame (docs/outputs.md, requests.parquet:
times in seconds from the first request sent, ttft/tpot/e2el in ms), so both sides of a comparison
are computed by the same code; `simulate replay --import-vllm` writes it as a run directory.
Every problem raises InputError with one line naming the file and what is wrong.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

# requests.parquet columns compare needs (docs/outputs.md)
REQUIRED_COLUMNS = ("input_tokens", "output_tokens", "status", "ttft_ms", "tpot_ms", "e2el_ms")
VLLM_LISTS = ("input_lens", "output_lens", "ttfts")  # what --save-detailed adds and compare needs


class InputError(ValueError):
    """An input compare cannot read: the message names the file and what is wrong."""


@dataclasses.dataclass
class Loaded:
    """One side of a comparison: per-request frame in the simulator's schema, the summary, steps."""

    path: Path
    kind: str  # "run" (a run directory) or "vllm" (a vLLM bench result file)
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame | None = None  # steps.parquet when the run directory has one
    itls: list | None = None  # per-request inter-token gaps (s), where the input records them


def load(path) -> Loaded:
    """A run directory (or its summary.json) or a vLLM bench result JSON file."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory (give a run directory or a vLLM bench result JSON)")
    if p.is_dir():
        return load_run_dir(p)
    if p.name == "summary.json" and (p.parent / "requests.parquet").exists():
        return load_run_dir(p.parent)
    d = read_json(p)
    if isinstance(d, dict) and any(k in d for k in VLLM_LISTS):
        return load_vllm(p, d)
    raise InputError(f"{p}: neither a run directory nor a vLLM bench result (no per-request lists "
                     f"{', '.join(VLLM_LISTS)})")


def read_json(p: Path):
    try:
        return json.loads(p.read_text())
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file (give a run directory or a vLLM bench result JSON)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not JSON ({e})") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or e})") from None


def load_run_dir(p: Path) -> Loaded:
    summ_path, req_path = p / "summary.json", p / "requests.parquet"
    if not summ_path.is_file():
        raise InputError(f"{p}: no summary.json (not a complete run directory as simulate --out writes it)")
    if not req_path.is_file():
        raise InputError(f"{p}: no requests.parquet (not a run directory as simulate --out writes it)")
    summary = read_json(summ_path)
    if not isinstance(summary, dict):
        raise InputError(f"{summ_path}: not a JSON object")
    try:
        req = pd.read_parquet(req_path)
    except Exception as e:  # noqa: BLE001 (pyarrow raises several kinds for a damaged file)
        raise InputError(f"{req_path}: cannot read as Parquet ({type(e).__name__}: {e})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in req.columns]
    if missing:
        raise InputError(f"{req_path}: missing column(s) {', '.join(missing)}")
    steps = None
    if (p / "steps.parquet").is_file():
        try:
            steps = pd.read_parquet(p / "steps.parquet")
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{p / 'steps.parquet'}: cannot read as Parquet ({type(e).__name__}: {e})") from None
    itls = summary.get("itls") if isinstance(summary.get("itls"), list) and len(summary["itls"]) == len(req) else None
    return Loaded(p, "run", summary, req, steps, itls)


def _list(d: dict, key: str, n: int | None, p: Path, required: bool = True):
    v = d.get(key)
    if v is None:
        if required:
            raise InputError(f"{p}: no per-request list {key!r} (a vLLM result written with --save-detailed has it)")
        return None
    if not isinstance(v, list):
        raise InputError(f"{p}: {key!r} is not a list")
    if n is not None and len(v) != n:
        raise InputError(f"{p}: {key!r} has {len(v)} entries, input_lens has {n}")
    return v


def _numbers(v: list, key: str, p: Path) -> np.ndarray:
    try:
        return np.array([np.nan if x is None else float(x) for x in v], dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{p}: {key!r} holds a value that is not a number") from None


def vllm_requests(d: dict, p: Path) -> tuple[pd.DataFrame, list]:
    """(requests frame in the simulator's schema, per-request itls) from a vLLM result dict."""
    lens = _list(d, "input_lens", None, p)
    n = len(lens)
    if n == 0:
        raise InputError(f"{p}: no requests (input_lens is empty)")
    inp = _numbers(lens, "input_lens", p)
    out = _numbers(_list(d, "output_lens", n, p), "output_lens", p)
    ttft = _numbers(_list(d, "ttfts", n, p), "ttfts", p)
    itls = _list(d, "itls", n, p, required=False)
    lat = _list(d, "latencies", n, p, required=False)
    starts = _list(d, "start_times", n, p, required=False)
    queue = _list(d, "queue_times", n, p, required=False)
    errors = _list(d, "errors", None, p, required=False)
    if itls is not None and not all(isinstance(x, list) for x in itls):
        raise InputError(f"{p}: 'itls' is not a list of per-request lists")
    if lat is not None:
        lat = _numbers(lat, "latencies", p)
    elif itls is not None:  # vLLM's latency: first token + every later gap (serve.py before `latencies`)
        lat = ttft + np.array([sum(float(g) for g in x) for x in itls])
    else:
        raise InputError(f"{p}: neither 'latencies' nor 'itls' (a vLLM result written with --save-detailed has them)")
    if errors is not None and len(errors) == n:
        ok = np.array([not e for e in errors])
    else:  # versions listing errors of failed requests only: a request without a first token failed
        ok = (ttft > 0) & (out > 0)
    ok &= np.isfinite(ttft) & np.isfinite(lat)
    start = _numbers(starts, "start_times", p) if starts is not None else np.zeros(n)
    t0 = float(np.nanmin(start)) if np.isfinite(start).any() else 0.0
    issued = start - t0
    arrival = issued - (_numbers(queue, "queue_times", p) if queue is not None else 0.0)
    first = np.where(ok, issued + ttft, np.nan)
    finish = np.where(ok, issued + lat, np.nan)
    outputs = np.where(ok, out, 0).astype(np.int64)
    reasons = np.array(["" if k else (str(errors[i]) if errors is not None and i < len(errors) and errors[i]
                                      else "failed") for i, k in enumerate(ok)], dtype=object)
    df = pd.DataFrame({
        "request_id": np.arange(n), "arrival_s": arrival, "issued_s": issued, "scheduled_s": np.full(n, np.nan),
        "first_token_s": first, "finish_s": finish, "input_tokens": inp.astype(np.int64),
        "output_tokens": outputs, "generated_tokens": outputs, "priority": np.zeros(n, dtype=np.int64),
        "engine": np.full(n, -1, dtype=np.int64), "preemptions": np.zeros(n, dtype=np.int64),
        "status": np.where(ok, "completed", "rejected"), "reject_reason": reasons,
    })
    df["queue_ms"] = np.nan
    df["ttft_ms"] = 1e3 * (df["first_token_s"] - df["issued_s"])
    df["e2el_ms"] = 1e3 * (df["finish_s"] - df["issued_s"])
    with np.errstate(invalid="ignore", divide="ignore"):
        df["tpot_ms"] = np.where(outputs > 1, 1e3 * (finish - first) / (outputs - 1), np.nan)
    gaps = [[float(g) for g in x] for x in itls] if itls is not None else None
    return df, gaps


def load_vllm(p: Path, d: dict) -> Loaded:
    req, itls = vllm_requests(d, p)
    return Loaded(p, "vllm", d, req, None, itls)


def finite(v) -> float | None:
    """A JSON number as float; None for null, strings ("inf") and NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None
