"""Metamorphic relations of a simulated run, and the fuzz's cases (this module holds no tests:
tests/test_metamorphic.py and benchmarks/differential_fuzz.py use it; `trace` draws a bursty workload, `spec` builds a
case's RunSpec). Each relation takes a Workload, a RunSpec and a numpy Generator, and raises AssertionError naming the first request and field that break the relation.

  shift   moving the trace later in time moves every time by the same amount and changes nothing else: no code
          reads the absolute clock (a sentinel time, a timer from 0). Workloads start at 0 s, so both runs begin
          with the same 1-token request at 0 s and the trace follows at T1 or T2 seconds (the engine idle between):
          a policy whose state outlives an idle engine (Flying's binding, SiDP's mode) starts both alike.
  causal  a request appended to arrive at time t changes nothing that happened before t: no run acts on an
          arrival before it happens (the front end and the decode stretches read the arrival times ahead).

The traces' gaps are stretched by an irrational factor and a random part, so that no two arrivals and no
arrival and window end (vLLM's 2 ms tokenizer window) meet by the accident of decimal gaps: a tie that rounding
breaks differently at another offset is not a bug (same-instant arrivals stay tied: their gap is 0).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from simulator.engine.config import framework_engine
from simulator.run import RunSpec, run
from simulator.workload.workload import Workload

SHIFTS_S = (1000.0, 3000.0)
TIME_COLUMNS = ("issued_s", "scheduled_s", "first_token_s", "finish_s")
NEW_BLOCK = 10**9  # prefix block ids from here on: held by no request of the traces
INT_COLUMNS = ("generated_tokens", "preemptions", "engine", "status", "reject_reason")


def trace(rng, n: int, max_prompt: int, prefix: bool) -> Workload:
    """n requests: same-instant arrivals and gaps up to 3 s, prompts of 1 to max_prompt tokens, 0-output rows and
    priorities; with `prefix`, 16-token blocks whose leading two are shared in three groups."""
    gaps = rng.choice([0.0, 0.0, 0.001, 0.05, 0.4, 3.0], n)
    arr = np.cumsum(gaps) - gaps[0]
    inp = rng.integers(1, max_prompt, n)
    out = rng.choice([0, 1, 2, 17, 120, 400, 1500], n)
    df = pd.DataFrame({"request_id": np.arange(n), "arrival_s": arr, "input_tokens": inp, "output_tokens": out,
                       "priority": rng.integers(0, 2, n)})
    if prefix:  # 16-token blocks, the leading two shared in three groups
        df["prefix_blocks"] = [tuple((i % 3) * 100 + j if j < 2 else 10_000 + 100 * i + j
                                     for j in range(-(-int(p) // 16))) for i, p in enumerate(inp)]
    return Workload(df)


def spec(policy: str, fields: dict, eng: dict, fast: bool, big: bool) -> RunSpec:
    """A case's RunSpec: Llama-3.1-8B on 2 x H100 (`big`: 8 x H200) under `fields`, its framework's engine with
    `eng` and fast-forward on or off."""
    fw = fields.get("framework", "vllm")
    engine = dataclasses.replace(framework_engine(fw), fast_forward=fast, **eng)
    base = {"model": "llama-3.1-8b", "hardware": "h200" if big else "h100", "gpus": 8 if big else 2}
    return RunSpec(policy=policy, **{**base, **fields, "framework": fw, "engine": engine})


def untie(w: Workload, rng) -> Workload:
    """w with its nonzero gaps stretched (x 1.0123457, + U[0, 0.1 ms]): no accidental ties."""
    df = w.requests.copy()
    gap = np.diff(df["arrival_s"].to_numpy(), prepend=0.0)
    gap = np.where(gap > 0, gap * 1.0123457 + rng.uniform(0.0, 1e-4, len(gap)), 0.0)
    df["arrival_s"] = np.cumsum(gap)
    return Workload(df)


def _requests(spec, df: pd.DataFrame) -> pd.DataFrame:
    return run(Workload(df.reset_index(drop=True)), spec).result.requests.frame()


def _run(spec, df: pd.DataFrame):
    """(requests frame, steps frame) of df's run."""
    res = run(Workload(df.reset_index(drop=True)), spec).result
    return res.requests.frame(), res.steps.frame()


def _after_lead(df: pd.DataFrame, shift_s: float) -> pd.DataFrame:
    """The 1-token request at 0 s, then df's requests `shift_s` later (ids kept; the lead's is new)."""
    lead = df.iloc[[0]].copy()
    lead["request_id"], lead["arrival_s"] = int(df["request_id"].max()) + 1, 0.0
    lead["input_tokens"], lead["output_tokens"] = 1, 1
    if "prefix_blocks" in df:
        lead["prefix_blocks"] = [(NEW_BLOCK,)]
    moved = df.copy()
    moved["arrival_s"] = moved["arrival_s"] + shift_s
    return pd.concat([lead, moved], ignore_index=True)


def check_shift(w: Workload, spec, rng) -> None:
    w = untie(w, rng)
    a, b = (_requests(spec, _after_lead(w.requests, t)).iloc[1:] for t in SHIFTS_S)
    for c in INT_COLUMNS:
        bad = np.flatnonzero(a[c].to_numpy() != b[c].to_numpy())
        assert not len(bad), f"shift: {c} of request {bad[0]} differs: {a[c].iloc[bad[0]]} vs {b[c].iloc[bad[0]]}"
    for c in TIME_COLUMNS:  # (the times carry ~1e-12 s of rounding at 3,000 s: 1e-6 s is a step's 1/1000)
        x, y = a[c].to_numpy() - SHIFTS_S[0], b[c].to_numpy() - SHIFTS_S[1]
        bad = np.flatnonzero(~(np.isclose(x, y, rtol=0.0, atol=1e-6) | (np.isnan(x) & np.isnan(y))))
        assert not len(bad), f"shift: {c} of request {bad[0]} differs: {x[bad[0]]!r} vs {y[bad[0]]!r} s"


def _steps_before(s: pd.DataFrame, t: float, ended: bool) -> pd.DataFrame:
    """The step rows that ended before t (`ended`), or those begun before t but not ended, less their `waiting`
    (the queue when the step ended); modes as their names (a run's categories are the modes it ever ran)."""
    end = s["start_s"] + s["duration_s"]
    s = s[end < t] if ended else s[(end >= t) & (s["start_s"] < t)].drop(columns="waiting")
    s = s.assign(mode=s["mode"].astype(str))
    return s.sort_values(["start_s", "engine"], kind="stable").reset_index(drop=True)


# what a cut cannot change of a row begun before the new request: the step's start and its first step's work
STARTED = ("start_s", "engine", "mode", "prefill_tokens", "prefill_seqs", "prefill_pairs", "prefill_kv_tokens",
           "decode_seqs", "decode_kv_tokens", "switch_s")


def _same_started(a: pd.DataFrame, b: pd.DataFrame, t: float) -> None:
    """Rows begun before t and running at t: the same steps began (STARTED) and a row of one step in both is the
    same step. How many steps a decode stretch begun before t runs is decided after t (the new request may cut it;
    in a closed loop it also moves the later issues that cut it), so a stretch's length and duration may differ,
    and one cut to a single step looks like a single step (2026-12-03: that was a false failure of SiDP on
    TRT-LLM). Switch rows (0 steps) stay switch rows."""
    msg = f"causal: the steps running when a request at {t!r} s arrived differ:\n"
    assert a.shape == b.shape, msg + str((a.shape, b.shape))
    cols = list(STARTED)
    assert a[cols].equals(b[cols]), msg + str(a[cols].compare(b[cols]))
    k, j = a["steps"].to_numpy(), b["steps"].to_numpy()
    assert ((k == 0) == (j == 0)).all(), msg + f"steps {k.tolist()} vs {j.tolist()}"
    one = (k == 1) & (j == 1)
    assert a[one].equals(b[one]), msg + str(a[one].compare(b[one]))


def check_causal(w: Workload, spec, rng) -> None:
    w = untie(w, rng)
    df = w.requests
    t = float(rng.uniform(0.0, df["arrival_s"].max() + 5.0))
    late = df.iloc[[0]].copy()
    late["request_id"], late["arrival_s"] = int(df["request_id"].max()) + 1, t
    late["input_tokens"], late["output_tokens"] = int(rng.integers(1, 4000)), int(rng.integers(0, 300))
    if "prefix_blocks" in df:
        late["prefix_blocks"] = [tuple(range(NEW_BLOCK, NEW_BLOCK + -(-int(late["input_tokens"].iloc[0]) // 16)))]
    a, sa = _run(spec, df)
    b, sb = _run(spec, pd.concat([df, late], ignore_index=True).sort_values("arrival_s", kind="stable"))
    b = b.set_index("request_id").loc[a["request_id"]].reset_index()
    # the steps that ran before t: those that ended before it, and (but for `waiting`, counted when a step ends)
    # those begun before it (_same_started: a decode stretch begun before t may be cut by the new request)
    ea, eb = (_steps_before(s, t, True) for s in (sa, sb))
    assert ea.equals(eb), f"causal: the steps before a request at {t!r} s arrived differ:\n" + \
        str(ea.compare(eb) if ea.shape == eb.shape else (ea.shape, eb.shape))
    _same_started(*(_steps_before(s, t, False) for s in (sa, sb)), t)
    # every event before t is the same, bit for bit (the run's course up to t cannot know of the request)
    for c in TIME_COLUMNS:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        bad = np.flatnonzero((x < t) & (x != y))
        assert not len(bad), f"causal: {c} of request {bad[0]}, before a request at {t!r} s arrived, " \
                             f"differs: {x[bad[0]]!r} vs {y[bad[0]]!r}"
    done = a["finish_s"].to_numpy() < t
    for c in INT_COLUMNS:
        bad = np.flatnonzero(done & (a[c].to_numpy() != b[c].to_numpy()))
        assert not len(bad), f"causal: {c} of request {bad[0]}, done before a request at {t!r} s arrived, differs"


RELATIONS = {"shift": check_shift, "causal": check_causal}
