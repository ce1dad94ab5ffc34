"""microbench rows: the measurement schema, resume keys, the in-flight marker, error rows."""
import csv
import json
import types

import pytest

from microbench import runner, writer
from perfmodel.measurements import COLUMNS, read_measurements

ROW = dict(op="gemm", dtype="bf16", m=16, n=256, k=512, group_size=1, device_count=1, backend="cpu",
           cuda_graph=0, device="AMD EPYC", torch_version="2.13.0", median_us=12.5, p10_us=12.0,
           p90_us=13.25, iterations=90, achieved=0.0107, achieved_unit="TFLOP/s", predicted_us=10.0,
           timestamp="2026-01-01T00:00:00+00:00")


def test_rows_follow_the_schema(tmp_path):
    out = tmp_path / "m.csv"
    writer.write_rows(out, [ROW])
    writer.write_rows(out, [dict(op="all_reduce", dtype="bf16", size_bytes=1024, group_size=2, backend="gloo",
                                 error="OOM: out of memory", timestamp="t")])
    with out.open() as f:
        header = next(csv.reader(f))
    assert tuple(header) == COLUMNS  # exactly the schema, in order, header written once
    df = read_measurements(out)
    assert len(df) == 2 and df.m.iloc[0] == 16 and df.median_us.iloc[0] == 12.5
    assert df.error.iloc[1] == "OOM: out of memory" and df.median_us.isna().iloc[1]
    with pytest.raises(ValueError, match="unknown measurement column"):
        writer.write_rows(out, [dict(ROW, bogus=1)])


def test_row_key_normalises_numbers():
    assert writer.row_key(dict(ROW, m="16.0", n=256.0)) == writer.row_key(ROW)
    assert writer.row_key(dict(ROW, dtype="fp8")) != writer.row_key(ROW)
    assert writer.row_key(dict(ROW, median_us=99)) == writer.row_key(ROW)  # results are not identity


def test_done_keys_skip_measured_and_retry_failed(tmp_path):
    out = tmp_path / "m.csv"
    assert writer.done_keys(out) == set()
    failed = dict(ROW, k=1024, median_us="", error="RuntimeError: boom")
    writer.write_rows(out, [ROW, failed])
    assert writer.done_keys(out) == {writer.row_key(ROW)}
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="cannot resume"):
        writer.done_keys(bad)


def test_resume_keys_tell_placements_apart_and_read_files_without_nodes(tmp_path):
    ar = dict(op="all_reduce", dtype="bf16", size_bytes=1024, group_size=8, backend="nccl", median_us=9.0)
    out = tmp_path / "m.csv"
    writer.write_rows(out, [dict(ar, nodes=1)])
    skip = writer.done_keys(out)
    assert writer.is_done(dict(ar, nodes=1), skip)
    assert not writer.is_done(dict(ar, nodes=2), skip)  # the same 8 ranks on 2 x 4 GPUs: measure them
    old = tmp_path / "old.csv"  # written before the nodes column: its rows count as done for any placement
    old.write_text(",".join(c for c in COLUMNS if c != "nodes") + "\n")
    writer.write_rows(old, [dict(ar, nodes=1)])
    assert writer.is_done(dict(ar, nodes=1), writer.done_keys(old))


def test_pending_marker_roundtrip(tmp_path):
    out = tmp_path / "run.csv"
    assert writer.take_pending(out) is None
    writer.mark_pending(out, ROW)
    assert writer.pending_path(out).name == "run.pending.json"
    got = writer.take_pending(out)
    assert writer.row_key(got) == writer.row_key(ROW) and writer.take_pending(out) is None
    writer.mark_pending(out, ROW)
    writer.clear_pending(out)
    assert not writer.pending_path(out).exists()


def test_env_json_beside_csv_appends_on_resume(tmp_path):
    out = tmp_path / "cpu.csv"
    assert writer.env_path(out) == tmp_path / "cpu.env.json"
    writer.write_env(out, {"n": 1}, resume=False)
    writer.write_env(out, {"n": 2}, resume=True)
    assert [r["n"] for r in json.loads(writer.env_path(out).read_text())["runs"]] == [1, 2]
    writer.write_env(out, {"n": 3}, resume=False)
    assert [r["n"] for r in json.loads(writer.env_path(out).read_text())["runs"]] == [3]


@pytest.mark.parametrize("exc,text", [
    (MemoryError(), "OOM: "), (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore"), "OOM: CUDA out of"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory"), "OOM: "),
    (TimeoutError("NCCL watchdog timeout"), "TimeoutError: NCCL watchdog timeout"),
    (writer.CaseError("OOM: on rank 1"), "OOM: on rank 1")])
def test_error_text_one_line(exc, text):
    got = writer.error_text(exc)
    assert got.startswith(text) and "\n" not in got


def test_a_failing_case_becomes_an_error_row():
    ctx = types.SimpleNamespace(device=types.SimpleNamespace(type="cpu"))
    ok = types.SimpleNamespace(run=lambda ctx, case: {"median_us": 1.0})
    bad = types.SimpleNamespace(run=lambda ctx, case: (_ for _ in ()).throw(RuntimeError("unsupported dtype fp8")))
    row = {}
    assert runner._measure(ctx, ok, {}, row) and row == {"median_us": 1.0}
    row = {}
    assert not runner._measure(ctx, bad, {}, row)
    assert row == {"error": "RuntimeError: unsupported dtype fp8"}
