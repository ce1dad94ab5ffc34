"""`calibrate` / `validate` end to end on generated measurement files (our CSV schema, as microbench
writes on CPU, and an aiconfigurator-layout folder), and one-line errors with exit 2."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibration import cli
from perfmodel.calibration.profile import load_profile
from perfmodel.measurements import append_rows


def cpu_rows():
    """A CPU-like sweep: fp32 GEMMs at ~60 GFLOP/s with a 15 us floor, gloo collectives, copies."""
    rows = []
    for m in (1, 8, 32, 128, 512):
        for n in (256, 512, 1024, 2048, 4096):
            for k in (256, 1024, 4096):
                t = 15 + 2 * m * n * k / 60e3 * (1 + 8 / m) ** 0.3 + n * k * 4 / 15e3
                rows.append(dict(op="gemm", dtype="fp32", m=m, n=n, k=k, group_size=1, median_us=t, backend="cpu"))
    for op, alpha in (("all_reduce", 120.0), ("all_gather", 90.0)):
        for s in 2 ** np.arange(10, 25):
            rows.append(dict(op=op, dtype="fp32", size_bytes=int(s), group_size=2, median_us=alpha + s / 1.5e3,
                             backend="gloo"))
    for s in 2 ** np.arange(10, 26, 2):
        rows.append(dict(op="memcpy_d2d", size_bytes=int(s), median_us=5 + 2 * s / 12e3, backend="cpu"))
    rows.append(dict(op="gemm", dtype="fp32", m=4096, n=4096, k=4096, error="timeout"))
    rows.append(dict(op="cas_activation", size_bytes=1024, median_us=3.0))
    return rows


@pytest.fixture
def cpu_csv(tmp_path):
    path = tmp_path / "cpu.csv"
    append_rows(path, cpu_rows())
    return path


def run(argv, capsys):
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_calibrate_and_validate_cpu_csv(cpu_csv, tmp_path, capsys):
    prof_path = tmp_path / "cpu.json"
    rc, out, err = run(["calibrate", "--measurements", str(cpu_csv), "--base", "cpu", "--out", str(prof_path)], capsys)
    assert rc == 0, err
    d = json.loads(prof_path.read_text())
    assert set(d["gemm"]) == {"fp32"} and set(d["collectives"]) == {"all_reduce", "all_gather"}
    assert d["copies"]["d2d"]["size_bytes"]
    src = d["provenance"]["sources"][0]
    assert src["file"] == "cpu.csv" and len(src["sha256"]) == 64 and src["rows_used"] == 75 + 30 + 8
    assert any("error" in k for k in d["provenance"]["rows_skipped"])
    assert d["provenance"]["fit_error"]["gemm fp32"]["heldout_rows"] > 0
    rc, out, err = run(["validate", "--measurements", str(cpu_csv), "--profile", str(prof_path), "--format", "json"], capsys)
    assert rc == 0, err
    rows = {(r["op"], r["dtype"], r["subset"]): r for r in json.loads(out)}
    for key in (("gemm", "fp32", "all"), ("all_reduce", "", "all"), ("all_gather", "", "all"), ("memcpy_d2d", "", "all")):
        r = rows[key]
        assert {"op", "rows", "median_abs_rel_err", "p90_abs_rel_err"} <= set(r)
        assert r["compared"] == "held-out" and r["rows"] > 0
        assert r["median_abs_rel_err"] < 0.1, key
    # the CPU profile answers perfmodel's "bf16" GEMM question from its fp32 fit
    prof = load_profile(prof_path)
    assert np.allclose(prof.gemm_time_s(64, 1024, 1024, "bf16"), prof.gemm_time_s(64, 1024, 1024, "fp32"))
    assert prof.gemm_time_s(64, 1024, 1024, "fp8") is None
    assert prof.collective_time_s("all_to_all", 1e6, 2) is None and prof.attn_decode_time_s(1, 10, 8, 8, 64) is None


def test_validate_table_and_plot(cpu_csv, tmp_path, capsys):
    prof_path = tmp_path / "cpu.json"
    assert run(["calibrate", "--measurements", str(cpu_csv), "--base", "cpu", "--out", str(prof_path),
                "--split", "all"], capsys)[0] == 0
    png = tmp_path / "v.png"
    rc, out, err = run(["validate", "--measurements", str(cpu_csv), "--profile", str(prof_path), "--plot", str(png)], capsys)
    assert rc == 0, err
    assert "in-sample" in out and "datasheet" in out and "worst:" in out
    assert png.stat().st_size > 10_000


def aic_dir(tmp_path):
    """A folder in the aiconfigurator layout (ms latencies, their column names)."""
    d = tmp_path / "gpu"
    d.mkdir()
    g = [("NVIDIA X", "bfloat16", m, n, k, (4 + 2 * m * n * k / 7e8 + n * k * 2 / 2.7e6) / 1e3)
         for m in (1, 16, 256, 4096) for n in (512, 1024, 2048, 4096, 8192) for k in (1024, 4096)]
    pd.DataFrame(g, columns=["device", "gemm_dtype", "m", "n", "k", "latency_ms"]).to_csv(d / "gemm_x.csv", index=False)
    rows = []
    for op in ("all_reduce", "alltoall"):
        for ng in (2, 8):
            for s in 2 ** np.arange(9, 25):
                t = 10 + s / 2e5 * ng
                rows.append(("v1", op, "half", ng, s // 2, s, t / 1e3, t, s / t / 1e3, 0.0))
    pd.DataFrame(rows, columns=["nccl_version_dir", "op_name", "nccl_dtype", "num_gpus", "message_size", "size_bytes",
                                "latency", "time_us", "algbw_GBps", "busbw_GBps"]).to_csv(d / "nccl.csv", index=False)
    (d / "notes.csv").write_text("a,b\n1,2\n")  # not a measurement table: ignored in a folder
    return d


def test_calibrate_reads_aiconfigurator_layout(tmp_path, capsys):
    d = aic_dir(tmp_path)
    out = tmp_path / "p.json"
    assert run(["calibrate", "--measurements", str(d), "--base", "h100_sxm", "--out", str(out)], capsys)[0] == 0
    prof = load_profile(out)
    assert set(prof.gemm) == {"bf16"} and set(prof.collectives) == {"all_reduce", "all_to_all"}
    assert 2 < float(prof.gemm_time_s(1, 1024, 1024, "bf16")) * 1e6 < 20
    rc, txt, err = run(["validate", "--measurements", str(d), "--profile", str(out)], capsys)
    assert rc == 0 and "all_to_all" in txt and "held-out" in txt


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(m=""), "field 'm'"),
    (lambda r: r.update(dtype="int3"), "field 'dtype'"),
    (lambda r: r.update(median_us="fast"), "field 'median_us'"),
])
def test_bad_rows_one_line_exit_2(tmp_path, capsys, edit, needle):
    rows = cpu_rows()[:5]
    edit(rows[3])
    path = tmp_path / "bad.csv"
    append_rows(path, rows)
    rc, out, err = run(["calibrate", "--measurements", str(path), "--base", "cpu", "--out", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and needle in err and "bad.csv line 5" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, needle", [
    (["calibrate", "--measurements", "/nonexistent/x.csv", "--base", "cpu", "--out", "/tmp/x.json"], "no such"),
    (["calibrate", "--measurements", "/dev/null", "--base", "tpu", "--out", "/tmp/x.json"], "unknown hardware"),
    (["validate", "--measurements", "/dev/null", "--profile", "nope"], "unknown profile"),
    (["calibrate", "--derive-from", "h100_sxm", "--base", "cpu", "--out", "/tmp/x.json"], "differs"),
])
def test_bad_arguments_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_module_entry_point(cpu_csv, tmp_path):
    r = subprocess.run([sys.executable, "-m", "perfmodel.calibration.cli", "calibrate", "--measurements", str(cpu_csv),
                        "--base", "cpu", "--out", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert r.returncode == 0 and "gemm fp32" in r.stdout
