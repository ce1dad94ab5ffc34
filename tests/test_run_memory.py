"""Issue 36's memory bound (1M requests in <= 1 GB): the pieces that keep a finished run's frames small give
the same numbers as before. Parquet written in row chunks reads back as pandas' own to_parquet; step records
framed for good release their rows, hand every later caller the same frame and refuse more rows."""
from __future__ import annotations

import pandas as pd
import pytest

from perfmodel.batch import StepAgg
from simulator.engine.config import EngineConfig
from simulator.results.records import step_row
from simulator.results.files import to_parquet
from simulator.run import RunSpec, run
from simulator.workload import load_trace


@pytest.fixture(scope="module")
def r():
    # a front-door rejection (a prompt past max_model_len) gives the string columns a second value
    w = load_trace("synthetic:poisson?rate=40&n=300&input=100-3000&output=1-300&seed=3")
    return run(w, RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100", gpus=2,
                          engine=EngineConfig(max_model_len=2048)))


def test_chunked_parquet_reads_back_as_pandas_own(r, tmp_path):
    assert (r.requests["status"] == "rejected").any() and r.requests["status"].nunique() == 2
    for df in (r.requests, r.steps):
        for floats in (True, False):  # (the requests' file: float columns without dictionary encoding)
            to_parquet(df, tmp_path / "chunked.parquet", chunk_rows=7, dictionary_floats=floats)  # (many chunks)
            df.to_parquet(tmp_path / "whole.parquet", index=False)
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "chunked.parquet"),
                                          pd.read_parquet(tmp_path / "whole.parquet"))


def test_the_requests_file_writes_its_floats_plain_and_the_rest_with_a_dictionary(r, tmp_path):
    """The requests' times are distinct floats: dictionary-encoding them cost 3/4 of the file's write time (issue 36)."""
    import pyarrow.parquet as pq

    from simulator.results.files import write_run

    write_run(tmp_path, r.summary, r.requests, r.steps)
    meta = pq.ParquetFile(tmp_path / "requests.parquet").metadata
    enc = {meta.schema.column(i).name: meta.row_group(0).column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in enc["ttft_ms"] + enc["arrival_s"]), enc  # (RLE_ or PLAIN_DICTIONARY)
    assert "RLE_DICTIONARY" in enc["status"] and "RLE_DICTIONARY" in enc["engine"], enc
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "requests.parquet"), r.requests)


def test_steps_framed_for_good_are_the_same_frame_and_refuse_more_rows(r):
    recs = r.result.steps
    again = recs.frame()
    pd.testing.assert_frame_equal(again, r.steps)
    again.loc[0, "duration_s"] = -1.0  # a caller's change stays its own (copy-on-write)
    assert recs.frame().loc[0, "duration_s"] == r.steps.loc[0, "duration_s"] != -1.0
    assert len(recs) == len(r.steps)
    with pytest.raises(RuntimeError, match="framed for good"):
        recs.add(start_s=0.0, duration_s=1.0, engine=0, mode=0.0, steps=1, agg=StepAgg(0, 0, 0.0, 0.0, 1, 1.0), kv_used_tokens=0.0,
                 waiting=0, switch_s=0.0)
    with pytest.raises(RuntimeError, match="framed for good"):  # (StepRow's path: the kernels')
        recs.append(step_row(start_s=0.0, duration_s=1.0, engine=0, mode=0.0, steps=1,
                             agg=StepAgg(0, 0, 0.0, 0.0, 1, 1.0), kv_used_tokens=0.0, waiting=0))


def test_step_rows_packed_in_place_frame_as_added_across_the_arrays_growth():
    """StepRecords packs each row into room grown 8,192 rows at a time, and frames the rows through a blocked transpose
    (issue 36): across several growths, with a frame taken midway and rows added after it, every frame holds exactly
    the rows added (both paths, the engines' add and the kernels' StepRow), none of the zeros past them."""
    import numpy as np

    from simulator.results.records import STEP_COLUMNS, StepRecords

    rng = np.random.default_rng(7)
    recs, expected = StepRecords(), []
    recs.mode_code("base"), recs.mode_code("shift")

    def add(n):
        for j in range(n):
            t, d, kv = (float(x) for x in rng.random(3))
            agg = StepAgg(int(rng.integers(0, 9000)), int(rng.integers(0, 9)), float(rng.random()), float(rng.random()),
                          int(rng.integers(0, 300)), float(rng.random()))
            row = dict(start_s=t, duration_s=d, engine=j % 8, mode=float(j % 2), steps=1 + j % 7, agg=agg,
                       kv_used_tokens=kv, waiting=j % 5, switch_s=0.0)
            if j % 3:
                recs.add(**row)
            else:
                recs.append(step_row(**row))
            expected.append([t, d, j % 8, j % 2, 1 + j % 7, *agg, kv, j % 5, 0.0])

    def frame_of(rows):
        df = pd.DataFrame(np.array(rows, dtype=float).reshape(-1, len(STEP_COLUMNS)), columns=list(STEP_COLUMNS))
        df = df.astype({"engine": np.int64, "steps": np.int64})
        df["mode"] = pd.Categorical.from_codes(df["mode"].astype(int), categories=["base", "shift"])
        return df

    add(9000)  # past the first growth
    pd.testing.assert_frame_equal(recs.frame(), frame_of(expected), check_exact=True)
    add(20000)  # rows after a frame, two growths more
    assert len(recs) == 29000
    pd.testing.assert_frame_equal(recs.frame(final=True), frame_of(expected), check_exact=True)


def test_a_steps_file_that_fails_in_its_thread_fails_the_run_files_and_leaves_no_summary(r, tmp_path):
    """write_run writes steps.parquet in a thread beside requests.parquet (issue 36): the thread's error reaches the
    caller, and summary.json (the mark of a complete run folder) is not written, nor a temporary file left."""
    import pyarrow as pa

    from simulator.results.files import write_run

    bad = r.steps.copy()
    bad["waiting"] = pd.Series([1, "two"] * (len(bad) // 2) + [3] * (len(bad) % 2), dtype=object)  # (not one type)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        write_run(tmp_path, r.summary, r.requests, bad)
    assert not (tmp_path / "summary.json").exists() and not (tmp_path / "steps.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet"]  # (no temporary file left)
