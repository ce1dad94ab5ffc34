"""Issue 17: the perfmodel and microbench command lines fail early and cleanly. --out is checked
before any fit or measurement and written atomically; Ctrl-C gives `interrupted` and 130; a closed
stdout pipe gives 141 without a traceback; every --help shows its defaults; `perfmodel models` and
`perfmodel hardware` print their key numbers; calibrate reports its fit stages."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from microbench import cli as mb_cli
from microbench import writer
from perfmodel import cli
from perfmodel import cliutil
from perfmodel.calibration import calibrate as cal_fit
from perfmodel.calibration import cli as cal_cli
from perfmodel.measurements import append_rows

ROOT = Path(__file__).resolve().parents[1]
root_only = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                               reason="root ignores directory permissions")


def rows():
    out = [dict(op="gemm", dtype="fp32", m=m, n=n, k=k, group_size=1, median_us=10 + m * n * k / 3e4, backend="cpu")
           for m in (1, 16, 128) for n in (256, 1024) for k in (256, 1024)]
    out += [dict(op="all_reduce", dtype="fp32", size_bytes=2 ** s, group_size=2, median_us=50 + 2 ** s / 1e3,
                 backend="gloo") for s in range(10, 20)]
    return out


@pytest.fixture
def csv(tmp_path):
    path = tmp_path / "m.csv"
    append_rows(path, rows())
    return path


def one_error_line(err: str, *needles):
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err


# 1. --out checked first, written atomically ------------------------------------------------------

def no_fit(*a, **k):
    raise AssertionError("the fit ran before --out was checked")


def test_calibrate_out_is_a_directory(csv, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cal_fit, "calibrate", no_fit)
    assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, f"--out {tmp_path}", "directory")


def test_calibrate_out_under_a_file(csv, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cal_fit, "calibrate", no_fit)
    bad = csv / "p.json"  # a regular file as the folder: refused even for root
    assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(bad)]) == 2
    one_error_line(capsys.readouterr().err, f"--out {bad}")


@root_only
def test_calibrate_out_under_a_read_only_directory(csv, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cal_fit, "calibrate", no_fit)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(ro / "p.json")]) == 2
    finally:
        ro.chmod(0o700)
    one_error_line(capsys.readouterr().err, f"--out {ro / 'p.json'}")


def test_calibrate_writes_atomically(csv, tmp_path, capsys, monkeypatch):
    out = tmp_path / "p.json"
    out.write_text("old")
    out.chmod(0o640)
    monkeypatch.setattr(cliutil.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(out)]) == 2
    one_error_line(capsys.readouterr().err, "No space left")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "p.json"]
    monkeypatch.undo()
    assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["hardware"] == "cpu" and (out.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv", "p.json"]  # no temporary file left


def test_microbench_out_checked_before_measuring(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(mb_cli, "_start", no_fit)
    assert mb_cli.main(["--device", "cpu", "--out", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, f"--out {tmp_path}", "directory")
    assert mb_cli.main(["--device", "cpu", "--out", str(tmp_path / "no" / "x.csv")]) == 2
    one_error_line(capsys.readouterr().err, "does not exist")


@root_only
def test_microbench_out_under_a_read_only_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(mb_cli, "_start", no_fit)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert mb_cli.main(["--device", "cpu", "--out", str(ro / "x.csv")]) == 2
    finally:
        ro.chmod(0o700)
    one_error_line(capsys.readouterr().err, f"--out {ro / 'x.csv'}")


def test_microbench_env_json_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "x.csv"
    writer.write_env(out, {"run": 1}, resume=False)
    monkeypatch.setattr(cliutil.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError):
        writer.write_env(out, {"run": 2}, resume=True)
    assert json.loads(writer.env_path(out).read_text()) == {"runs": [{"run": 1}]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.env.json"]


# 2. clean exits ----------------------------------------------------------------------------------

def interrupt(*a, **k):
    raise KeyboardInterrupt


@pytest.mark.parametrize("target, argv", [
    ((cli, "estimate_main"), ["estimate"]),
    ((cal_cli, "calibrate_main"), ["calibrate", "--base", "cpu", "--out", "x.json"]),
    ((cli, "write_table"), ["models"]),
])
def test_perfmodel_ctrl_c_is_130_without_traceback(target, argv, capsys, monkeypatch):
    monkeypatch.setattr(*target, interrupt)
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_microbench_ctrl_c_is_130_and_stops_the_workers(tmp_path, capsys, monkeypatch):
    start = mb_cli._start
    monkeypatch.setattr(mb_cli, "_start", interrupt)
    assert mb_cli.main(["--device", "cpu", "--nproc", "2", "--out", str(tmp_path / "x.csv")]) == 130
    assert capsys.readouterr().err == "interrupted\n"

    class Proc:  # a spawned worker that never ends by itself
        def __init__(self, target, args):
            self.pid, self.exitcode, self.sentinel, self.calls = None, None, object(), []

        def start(self):
            self.pid = 1

        def terminate(self):
            self.calls.append("terminate")
            self.exitcode = -15

        def join(self, timeout=None):
            self.calls.append("join")

    procs = []

    class Ctx:
        def Process(self, target, args):  # noqa: N802 - multiprocessing's spelling
            procs.append(Proc(target, args))
            return procs[-1]

    class Mp:
        def get_context(self, kind):
            return Ctx()

    import multiprocessing.connection

    monkeypatch.setattr(multiprocessing.connection, "wait", interrupt)
    args = mb_cli.parser().parse_args(["--nproc", "2"])
    with pytest.raises(KeyboardInterrupt):
        start(Mp(), args)
    assert len(procs) == 2 and all(p.calls == ["join", "terminate", "join"] for p in procs)


def test_closed_stdout_pipe_is_141_without_traceback():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "perfmodel.cli", "estimate", "--strategies", "dp,tp"], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line (as `| head -1` after its line)
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == "", err


def test_microbench_broken_pipe_is_141(monkeypatch, capsys):
    def broken(argv):
        raise BrokenPipeError

    monkeypatch.setattr(mb_cli, "_main", broken)
    assert mb_cli.main([]) == 141 and capsys.readouterr().err == ""


# 3. --help shows the defaults --------------------------------------------------------------------

def help_text(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_every_subcommand_help_shows_defaults(capsys):
    text = help_text(["estimate"], capsys)
    for needle in ("(default: llama-3.3-70b)", "(default: h200)", "(default: 8)", "(default: 4096)",
                   "(default: 250)", "(default: the checkpoint's own format", "(default: vllm)",
                   "(default: dp,tp,sp,shift)", "(default: 256)", "(default: 0.9)", "(default: table)"):
        assert needle in text, needle
    for sub, needles in (("models", ["(default: table)"]), ("hardware", ["(default: table)"]),
                         ("calibrate", ["(default: the --out file's name", "(default; validate"]),
                         ("validate", ["(default: table)", "(default: the profile's hardware)"])):
        text = help_text([sub], capsys)
        for needle in needles:
            assert needle in text, (sub, needle)


# 4. models and hardware tables -------------------------------------------------------------------

def test_models_table_json_csv(capsys):
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["model", "params_b", "active_params_b", "layers", "hidden", "heads", "kv_heads",
                                "experts", "experts_per_token", "max_context"]
    assert next(l for l in lines if l.startswith("llama-3.3-70b ")).split()[1:] == \
        ["70.55", "70.55", "80", "8,192", "64", "8", "0", "0", "131,072"]
    assert cli.main(["models", "--format", "json"]) == 0
    moe = {r["model"]: r for r in json.loads(capsys.readouterr().out)}["qwen3-30b-a3b"]
    assert moe["experts"] == 128 and moe["active_params_b"] < moe["params_b"] / 5
    assert cli.main(["models", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("model,params_b,active_params_b,")


def test_hardware_table_json(capsys):
    assert cli.main(["hardware"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["hardware", "hbm_gb", "hbm_bw_gbs", "bf16_tflops", "fp8_tflops", "fp4_tflops", "link",
                                "link_bw_gbs", "gpus_per_node", "hosts_per_node", "profile"]
    assert cli.main(["hardware", "--format", "json"]) == 0
    h200 = {r["hardware"]: r for r in json.loads(capsys.readouterr().out)}["h200_sxm"]
    assert (h200["hbm_gb"], h200["hbm_bw_gbs"], h200["gpus_per_node"], h200["link"]) == (150.8, 4800, 8, "nvswitch")
    assert h200["fp8_tflops"] == pytest.approx(2 * h200["bf16_tflops"], rel=1e-3) and h200["link_bw_gbs"] == 450
    assert (h200["fp4_tflops"], h200["hosts_per_node"], h200["profile"]) == (0, 1, "h200_sxm")


# 6. calibrate's progress -------------------------------------------------------------------------

def test_calibrate_reports_its_stages(csv, tmp_path, capsys, monkeypatch):
    from perfmodel.calibration.readers import read_measurements_any
    from perfmodel.hardware import load_hardware

    seen = []
    cal_fit.calibrate(read_measurements_any([csv]), load_hardware("cpu"), progress=lambda *a: seen.append(a))
    assert seen == [("gemm", 0, 3), ("collectives", 1, 3), ("fit error", 2, 3), ("done", 3, 3)]
    monkeypatch.setattr(cal_cli, "PROGRESS_DELAY_S", 0)  # the bar shows after 1 s; here at once
    assert cli.main(["calibrate", "--measurements", str(csv), "--base", "cpu", "--out", str(tmp_path / "p.json")]) == 0
    assert "calibrate: " in capsys.readouterr().err
