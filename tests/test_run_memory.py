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
