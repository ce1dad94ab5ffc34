"""Property tests: any valid canonical file round-trips exactly; readers keep every valid row."""
import re
import string
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.workload import load_trace, make_workload, write_csv

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,  # CI: same examples each run
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
INT64 = st.integers(-(2**63), 2**63 - 1)
# Text ids: printable, not all digits (those read back as ints), no surrounding blanks.
TEXT = st.text(string.ascii_letters + string.digits + " ,;\"'-_.:/|#", min_size=1, max_size=12) \
    .map(str.strip).filter(lambda s: s and not re.fullmatch(r"-?\d+", s))
FLOATS = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    t = sorted(draw(st.lists(FLOATS, min_size=n, max_size=n)))
    t[0] = 0.0  # a Workload starts at 0 s
    cols = {
        "arrival_s": np.array(t),
        "input_tokens": np.array(draw(st.lists(st.integers(1, 2**62), min_size=n, max_size=n))),
        "output_tokens": np.array(draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n))),
        "priority": np.array(draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n))),
    }
    ids = st.lists(INT64, min_size=n, max_size=n, unique=True) if draw(st.booleans()) else \
        st.lists(TEXT, min_size=n, max_size=n, unique=True)
    cols["request_id"] = draw(ids)
    if draw(st.booleans()):
        cols["session_id"] = draw(st.lists(st.none() | TEXT, min_size=n, max_size=n))
    if draw(st.booleans()):
        blocks = st.lists(st.integers(0, 2**63 - 1), max_size=5).map(tuple)
        cols["prefix_blocks"] = draw(st.lists(blocks, min_size=n, max_size=n))
    return make_workload(cols, "hypothesis")


@SETTINGS
@given(w=workloads())
def test_canonical_round_trip_is_exact(w):
    with tempfile.TemporaryDirectory() as tmp:
        first = write_csv(w, Path(tmp) / "a.csv")
        back = load_trace(first)
        pd.testing.assert_frame_equal(back.requests, w.requests, check_exact=True)
        second = write_csv(back, Path(tmp) / "b.csv")
        assert first.read_bytes() == second.read_bytes()


@st.composite
def canonical_text(draw):
    """Hand-written style canonical files: any float spelling, optional columns, any order."""
    n = draw(st.integers(1, 20))
    gaps = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    times = np.cumsum(gaps) / 1000.0  # ms resolution, sorted
    spell = draw(st.sampled_from(["{:.3f}", "{!r}", "{:.6e}", "{:g}"]))
    cols = {"arrival_s": [spell.format(float(x)) for x in times],
            "input_tokens": [str(draw(st.integers(1, 10**6))) for _ in range(n)],
            "output_tokens": [str(draw(st.integers(0, 10**6))) for _ in range(n)]}
    if draw(st.booleans()):
        cols["priority"] = [str(draw(st.integers(-5, 5))) for _ in range(n)]
    if draw(st.booleans()):
        cols["request_id"] = [f"r{i}" for i in draw(st.permutations(range(n)))]
    names = draw(st.permutations(list(cols)))
    lines = [",".join(names)] + [",".join(cols[c][i] for c in names) for i in range(n)]
    return "\n".join(lines) + "\n", times, cols


@SETTINGS
@given(case=canonical_text())
def test_valid_canonical_text_reads_and_round_trips(case):
    text, times, cols = case
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "t.csv"
        p.write_text(text)
        w = load_trace(p)
        expected_t = np.array([float(s) for s in cols["arrival_s"]])
        np.testing.assert_array_equal(w.requests["arrival_s"].to_numpy(), expected_t - expected_t[0])
        assert w.requests["input_tokens"].tolist() == [int(s) for s in cols["input_tokens"]]
        if "request_id" in cols:
            assert w.requests["request_id"].tolist() == cols["request_id"]
        again = load_trace(write_csv(w, Path(tmp) / "w.csv"))
        pd.testing.assert_frame_equal(again.requests, w.requests, check_exact=True)


@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 10**7), st.sampled_from(["ChatGPT", "GPT-4"]),
                               st.integers(0, 5000), st.integers(0, 5000)), min_size=1, max_size=40))
def test_burstgpt_keeps_every_row_sorted(rows):
    text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{t},{m},{i},{o},{i + o},Conversation log\n" for t, m, i, o in rows)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "b.csv"
        p.write_text(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unsorted input warns; sorting is what we check
            df = load_trace(p).requests
    order = sorted(range(len(rows)), key=lambda k: rows[k][0])  # stable, as the reader sorts
    t0 = min(r[0] for r in rows)
    assert df["arrival_s"].tolist() == [float(rows[k][0] - t0) for k in order]
    assert df["input_tokens"].tolist() == [max(rows[k][2], 1) for k in order]
    assert df["output_tokens"].tolist() == [rows[k][3] for k in order]
    assert df["request_id"].tolist() == order
