"""microbench end to end on CPU/gloo: one spawned 2-rank world over a tiny sweep (with cases that
must fail), the rows it writes, then perfmodel calibrate / validate on them; --resume in one rank."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from microbench import writer
from perfmodel.measurements import COLUMNS, read_measurements
from perfmodel.ops import busbw_factor

ROOT = Path(__file__).resolve().parents[1]
HUGE = 1 << 40  # bytes no machine allocates: the case must become an OOM error row (the case budget
# --max-case-gb, which skips such shapes up front, is lifted for these runs)
SWEEP = {"tp": [1], "model_m": [1], "grid_m": [1, 64], "grid_n": [256, 512, 1024], "grid_k": [256, HUGE],
         "max_gemm_flops": 1e30, "dtypes": ["bf16"], "prefill": [[1, 64], [1, 128], [1, 256]],
         "decode": [[2, 64], [2, 128], [2, 256]], "msg": [1024, HUGE, 1 << 30], "copy": [1024, 65536, 8],
         "ulysses_tokens": [64], "cas_tokens": [4], "attempts": 1}


# the last-level cache the rotating inputs exceed: a VM may report its host's whole L3 (480 MiB here), which made
# every case fill and rotate ~1 GB of inputs (this module's world took ~36 s instead of ~3 s; 2026-12-02)
CACHE = "4M"


def microbench(*args, timeout=150):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "microbench", "--device", "cpu", "--quick", "--repeats", "3",
                           "--warmup", "1", "--no-progress", "--max-case-gb", "1e9", "--cache-bytes", CACHE, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    """The one 2-rank world of this module: every suite over the tiny sweep."""
    out = tmp_path_factory.mktemp("mb") / "cpu.csv"
    p = microbench("--suite", "all", "--nproc", "2", "--sweep", json.dumps(SWEEP), "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rows (" in p.stdout
    return out


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_rows_schema_and_all_suites(run2):
    df = read_measurements(run2)
    assert tuple(df.columns) == COLUMNS
    ops = set(df.op)
    assert {"gemm", "attention_prefill", "attention_decode", "all_reduce", "all_gather", "reduce_scatter",
            "all_to_all", "send_recv", "broadcast", "ulysses_all_to_all", "sidp_weight_fetch",
            "cas_activation", "memcpy_h2d", "memcpy_d2h", "memcpy_d2d"} <= ops
    ok = df[df.error == ""]
    assert (ok.median_us > 0).all() and (ok.p10_us <= ok.median_us).all() and (ok.median_us <= ok.p90_us).all()
    assert (ok.iterations >= 3).all() and (ok.device != "").all() and (ok.torch_version != "").all()
    assert (ok.timestamp.str.len() > 0).all()
    assert set(ok[ok.op.isin(["gemm", "attention_prefill", "attention_decode"])].achieved_unit) == {"TFLOP/s"}
    assert set(ok[ok.op.str.startswith("memcpy") | (ok.op == "all_reduce")].achieved_unit) == {"GB/s"}
    assert ok[ok.op.isin(["gemm", "all_reduce", "memcpy_d2d", "attention_decode"])].predicted_us.notna().all()
    coll = ok[ok.op == "all_reduce"]
    assert set(coll.group_size) == {2} and set(coll.backend) == {"gloo"} and (coll.device_count == 2).all()
    # a spawned world is one node: every collective row says so; single-device ops leave it blank
    assert set(ok[ok.group_size > 1].nodes) == {1} and ok[ok.op == "gemm"].nodes.isna().all()
    assert json.loads(writer.env_path(run2).read_text())["runs"][-1]["local_world_size"] == 2


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_busbw_column_follows_nccl_tests(run2):
    df = read_measurements(run2)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        r = df[(df.op == op) & (df.error == "")].iloc[0]
        algbw = r.size_bytes / (r.median_us * 1e-6) / 1e9
        assert r.achieved == pytest.approx(algbw * float(busbw_factor(op, 2)), rel=1e-3)


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_failing_cases_are_error_rows_and_the_suite_goes_on(run2):
    df = read_measurements(run2)
    err = df[df.error != ""]
    assert len(err) >= 2 and err.error.str.startswith("OOM").all()
    assert err.median_us.isna().all()
    assert {"gemm", "all_reduce"} <= set(err.op)
    assert set(err[err.op == "all_reduce"].size_bytes) == {HUGE}  # agreed by both ranks, one row
    order = list(df.op)
    assert order.index("all_reduce") < len(order) - 1 and "memcpy_d2d" in order  # later suites ran
    first_err = df.index[(df.op == "gemm") & (df.error != "")][0]
    assert (df.loc[first_err:, "error"] == "").any()


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_environment_record(run2):
    runs = json.loads(writer.env_path(run2).read_text())["runs"]
    rec = runs[-1]
    assert rec["world_size"] == 2 and rec["device_type"] == "cpu" and rec["cpu_model"]
    assert rec["torch_threads_per_rank"] >= 1 and rec["model"] == "tiny" and rec["hardware_preset"] == "cpu"
    assert rec["cache_bytes"] == 4 << 20  # --cache-bytes, recorded as the run used it
    assert rec["suites"] == ["gemm", "attention", "collectives", "memcpy", "moe", "mla"] and rec["error_rows"] >= 4
    assert not writer.pending_path(run2).exists()


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_moe_and_mla_on_cpu_are_one_error_row_each_in_their_tables(run2):
    """No CUDA (and no vLLM) here: each kernel table beside --out holds one error row; the measurement CSV none."""
    from perfmodel.calibration import kernel_tables as kt

    for table, text in ((kt.MOE, "fused MoE needs a CUDA GPU"), (kt.MLA, "MLA decode needs a CUDA GPU")):
        (path,) = run2.parent.glob(f"{table}_*.csv")
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        assert tuple(df.columns) == kt.COLUMNS[table] and len(df) == 1 and text in df.error.iloc[0]
    assert not read_measurements(run2).op.isin(["moe", "mla_generation"]).any()


@pytest.mark.slow  # run2 spawns a 2-rank microbench world: ~3 s, shared by the tests that take it
def test_calibrate_and_validate_read_the_rows(run2, tmp_path, capsys):
    cli = pytest.importorskip("perfmodel.calibration.cli")
    prof = tmp_path / "cpu.json"
    assert cli.main(["calibrate", "--measurements", str(run2), "--base", "cpu", "--out", str(prof)]) == 0
    assert cli.main(["validate", "--measurements", str(run2), "--profile", str(prof)]) == 0
    table = capsys.readouterr().out
    assert "gemm" in table and "all_reduce" in table and "held-out" in table


@pytest.mark.slow  # two microbench runs in fresh interpreters: ~4 s
def test_resume_skips_measured_retries_failed_and_records_a_dead_case(tmp_path):
    out = tmp_path / "r.csv"
    sweep = json.dumps(dict(SWEEP, grid_n=[256], grid_m=[1], model_m=[], copy=[1024, 4096, 4]))
    p = microbench("--suite", "gemm,memcpy", "--nproc", "1", "--sweep", sweep, "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    first = read_measurements(out)
    assert len(first) == 8 and (first.error != "").sum() == 1  # 2 GEMMs (one OOM) + 6 copies
    dead = first[first.op == "memcpy_d2d"].iloc[0].to_dict()
    writer.mark_pending(out, {k: ("" if pd.isna(v) else v) for k, v in dead.items()})  # "the run died here"
    out.write_text("".join(l for l in out.read_text().splitlines(True)
                           if not (l.startswith("memcpy_d2d") and f",{int(dead['size_bytes'])}," in l)))
    p = microbench("--suite", "gemm,memcpy", "--nproc", "1", "--sweep", sweep, "--out", str(out), "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    df = read_measurements(out)
    ok = df[df.error == ""]
    keys = [writer.row_key(r) for r in ok.to_dict("records")]
    assert len(keys) == len(set(keys)) == 6  # nothing measured twice; the dead case not retried
    died = df[df.error.str.startswith("run died")]
    assert len(died) == 1 and died.op.iloc[0] == "memcpy_d2d" and died.size_bytes.iloc[0] == dead["size_bytes"]
    assert (df.error.str.startswith("OOM")).sum() == 2  # the failed case was tried again
    assert len(json.loads(writer.env_path(out).read_text())["runs"]) == 2


def test_bad_input_exits_2(capsys):
    from microbench.cli import main

    for args in (["--suite", "nope"], ["--sweep", '{"nope": 1}'], ["--max-bytes", "lots"], ["--cache-bytes", "0"]):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2, args
    assert main(["--dtypes", "int3"]) == 2 and main(["--model", "no-such-model"]) == 2
    assert main(["--hardware", "no-such-gpu"]) == 2
    assert main(["--nproc", "0", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    for text in ("error: argument --suite: unknown suite 'nope'", "error: argument --sweep: unknown key 'nope'",
                 "error: argument --max-bytes: 'lots'", "error: --dtypes 'int3' unknown",
                 "error: unknown model 'no-such-model'", "error: --nproc 0 must be >= 1",
                 "error: argument --cache-bytes: '0': the cache must be a positive size"):
        assert text in err


def test_cache_bytes_option():
    from microbench.cli import parser

    assert parser().parse_args(["--cache-bytes", "32M"]).cache_bytes == 32 << 20
    assert parser().parse_args([]).cache_bytes is None  # the device's own: timing.cache_bytes
