"""Golden scenario summaries (STYLE 8): a refactor of the simulator reproduces them exactly.

Each scenario's summary (vLLM keys + ours, datasheet roofline, no calibrated profile) is checked
in under tests/golden/. A perf-model or semantics change that moves them regenerates them with
    PSIM_UPDATE_GOLDEN=1 python -m pytest tests/test_sim_golden.py
and states the before/after numbers (the failure message lists them).
"""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from test_sim_util import batch, run, workload

from simulator.results.metrics import summarize
from simulator.workload import load_trace

GOLDEN = Path(__file__).parent / "golden"


def _mixed():
    rng = np.random.default_rng(20)
    n = 150
    return workload(np.cumsum(rng.exponential(0.01, n)), rng.integers(1, 5000, n), rng.choice([0, 1, 60, 500], n),
                    priority=rng.integers(0, 2, n))


SCENARIOS = {  # name -> (workload factory, run arguments)
    "burstgpt_8b_tp1": (lambda: load_trace("burstgpt.csv"), dict(policy="tp", gpus=1)),
    "onoff_8b_shift2": (lambda: load_trace("bursty_onoff.csv"), dict(policy="shift", gpus=2)),
    "onoff_8b_dp4_rr": (lambda: load_trace("bursty_onoff.csv"), dict(policy="dp", gpus=4, router="round-robin")),
    "batch_70b_tp8_closed16": (lambda: batch(400, 2048, 256),
                               dict(model_name="llama-3.3-70b", hw="h200", policy="tp", gpus=8, max_concurrency=16)),
    "batch_70b_tp8_saturated": (lambda: batch(2000, 1024, 128),
                                dict(model_name="llama-3.3-70b", hw="h200", policy="tp", gpus=8)),
    "mixed_8b_kvpressure_dp2": (_mixed, dict(policy="dp", gpus=2, util=0.14, router="shortest-queue",
                                             engine=dict(max_num_batched_tokens=1024, priority_scheduling=True))),
    "mixed_8b_pp2_unchunked": (_mixed, dict(policy="pp", gpus=2, engine=dict(enable_chunked_prefill=False))),
}


def _summary(name: str) -> dict:
    make, kw = SCENARIOS[name]
    res = run(make(), **kw)
    summ = summarize(res.requests.frame(), res.steps.frame(), res.engines)
    summ["kv_capacity_tokens"] = [e["kv_capacity_tokens"] for e in res.engines]
    return json.loads(json.dumps(summ))  # the JSON round trip (floats keep every bit: repr)


def _diff(old, new, path=""):
    """Keys whose values changed, as 'key: before -> after' (NaN equals NaN)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) for d in _diff(old.get(k), new.get(k), f"{path}{k}.")]
    same = old == new or (isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new))
    return [] if same else [f"{path.rstrip('.')}: {old!r} -> {new!r}"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_summary(name):
    path = GOLDEN / f"{name}.json"
    got = _summary(name)
    if os.environ.get("PSIM_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {path}")
    want = json.loads(path.read_text())
    changed = _diff(want, got)
    assert not changed, f"{name} moved (regenerate with PSIM_UPDATE_GOLDEN=1 if intended):\n" + "\n".join(changed)
