"""simulator/results/invariants.py (issue 33): a real run satisfies every invariant, and each invariant
fails on the records it exists to catch (planted into a copy of that run's frames)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.results import invariants as inv
from simulator.run import RunSpec, run
from simulator.workload import load_trace


@pytest.fixture(scope="module")
def r():
    w = load_trace("synthetic:gamma?rate=30&burstiness=0.3&n=80&input=20-2500&output=0-200&seed=5")
    return run(w, RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100", gpus=2, gpu_memory_utilization=0.16))


def test_a_real_run_holds_every_invariant(r):
    assert inv.check_run(r.result) == []
    assert (r.steps["waiting"] > 0).any()  # the queue check below has something to compare


def test_each_invariant_fails_on_what_it_guards(r):
    req, steps, eng = r.requests.copy(), r.steps.copy(), r.result.engines
    lost = req.copy()
    lost.loc[0, "status"] = "unfinished"
    assert inv.conservation(lost)[0].startswith("conservation")
    dup = req.copy()
    dup.loc[1, "request_id"] = dup.loc[0, "request_id"]
    assert any("twice" in x for x in inv.conservation(dup))
    over = steps.copy()
    over.loc[over.index[3], "kv_used_tokens"] = eng[int(over["engine"].iloc[3])]["kv_capacity_tokens"] + 1
    assert inv.kv_within_capacity(over, eng)[0].startswith("kv: engine")
    early = req.copy()
    k = int(np.flatnonzero(np.isfinite(early["first_token_s"].to_numpy()))[0])
    early.loc[k, "first_token_s"] += 1e-4  # a first token between step ends
    assert "no step" in inv.first_tokens(early, steps)[0]
    fast = steps.copy()
    fast["duration_s"] *= 1.0  # a request whose TTFT is shorter than the step that computed it:
    t = req.loc[k, "first_token_s"]
    fast_req = req.copy()
    fast_req.loc[k, "issued_s"] = t - 1e-7
    assert "below" in " ".join(inv.first_tokens(fast_req, steps))
    hidden = steps.copy()
    hidden["waiting"] = 0  # the queue a plot draws reads 0 while requests wait (issue 33 finding 2)
    assert inv.queue_visible(req, hidden, slack_s=0.0)[0].startswith("queue:")
    lazy = steps.copy()
    lazy["prefill_tokens"] = 0  # the steps computed no prompt
    assert inv.work_done(req, lazy)[0].startswith("work:")


def test_queue_length_is_the_per_request_queue(r):
    """timeseries.csv's queue_length integrates to the per-request queue times (issued -> scheduled), under
    any window; it used to be the mean of the engines' `waiting`, which a policy's own queue could hide."""
    from simulator.results.metrics import time_series

    req = r.requests
    started = np.isfinite(req["scheduled_s"].to_numpy(float))
    total_s = float((req["scheduled_s"] - req["issued_s"])[started].sum())
    assert total_s > 0
    for w in (0.05, 0.5, 7.0):
        ts = time_series(req, r.steps, w)
        assert float(ts["queue_length"].sum()) * w == pytest.approx(total_s, rel=1e-9)


def test_simulate_check_reports_ok_and_exits_1_on_a_violation(tmp_path, capsys):
    import json
    from unittest import mock

    from simulator.apps.cli import main

    argv = ["--trace", "synthetic:gamma?rate=20&n=30&input=64-900&output=0-40&seed=2", "--compare", "tp,sidp",
            "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "2", "--check", "--format", "json"]
    assert main(argv) == 0
    assert [s["invariants"] for s in json.loads(capsys.readouterr().out)] == ["ok", "ok"]
    with mock.patch("simulator.results.invariants.kv_within_capacity", lambda steps, engines: ["kv: planted"]):
        assert main(argv + ["--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "error: invariant violated (tp): kv: planted" in err and "(sidp)" in err
    assert json.loads((tmp_path / "o" / "tp" / "summary.json").read_text())["invariants"] == ["kv: planted"]


def test_step_records_take_named_rows_only():
    """Issue 34: a step row crosses files as a StepRow built by name, never as positional values."""
    from perfmodel.batch import StepAgg
    from simulator.results.records import STEP_COLUMNS, StepRecords, StepRow, step_row

    rec = StepRecords()
    code = rec.mode_code("tp")
    rec.append(step_row(start_s=1.0, duration_s=0.5, engine=2, mode=code, steps=3,
                        agg=StepAgg(0, 0, 0.0, 0.0, 4, 40.0), kv_used_tokens=64, waiting=1))
    with pytest.raises(TypeError, match="StepRow"):
        rec.append(tuple(range(len(STEP_COLUMNS))))
    f = rec.frame()
    assert list(f.columns) == list(StepRow._fields) and f.loc[0, "decode_kv_tokens"] == 40.0
    assert f.loc[0, "engine"] == 2 and f.loc[0, "steps"] == 3 and f.loc[0, "waiting"] == 1 and f.loc[0, "mode"] == "tp"


def test_step_row_token_columns_are_step_aggs_fields():
    """StepRow spells StepAgg's fields out (a class mypyc compiles): they stay StepAgg's, in its order."""
    from perfmodel.batch import StepAgg
    from simulator.results.records import StepRow

    f = StepRow._fields
    at = f.index(StepAgg._fields[0])
    assert f[at:at + len(StepAgg._fields)] == StepAgg._fields
    assert f[:at] == ("start_s", "duration_s", "engine", "mode", "steps")


def test_step_records_add_by_name_equals_a_step_row():
    """The engine core's `add` (fields by name, no StepRow built) writes the row StepRow's order gives."""
    from perfmodel.batch import StepAgg
    from simulator.results.records import StepRecords, step_row

    kw = dict(start_s=1.5, duration_s=0.25, engine=3, mode=0.0, steps=7, agg=StepAgg(11, 2, 13.0, 17.0, 5, 19.0),
              kv_used_tokens=23.0, waiting=29, switch_s=0.125)
    a, b = StepRecords(), StepRecords()
    a.add(**kw)
    b.append(step_row(**kw))
    a.mode_code("m"), b.mode_code("m")
    assert a.frame().equals(b.frame())
    assert len(set(a.frame().iloc[0].tolist())) == len(a.frame().columns)  # every field distinct: order shows
