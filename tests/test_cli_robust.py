"""`simulate` at its edges (issue 17, points 1-4): output paths refused before any work, Ctrl-C and a
closed stdout end cleanly, --format json keeps stdout pure, a sweep with failed runs exits 1."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import simulator.apps.cli as cli
from simulator.apps.cli import main
from simulator.results import files

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--profile", "none", "--gpus", "2",
         "--trace", "synthetic:poisson?n=20&rate=4&input=128&output=8"]
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
MEASURED = ("id,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,"
            "batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms,"
            "silicon_concurrency\n"
            "a8b,trtllm,1.0.0rc3,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,,agg,1024,128,,,8,1,1,,1,1,191.0,7.9,8\n")


def _csv(tmp_path) -> Path:
    p = tmp_path / "runs.csv"
    p.write_text(MEASURED)
    return p


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a simulation starts: the refusals below must come before any work."""
    def boom(*a, **k):
        raise AssertionError("the simulation ran before the output path was checked")
    monkeypatch.setattr(cli, "run", boom)
    monkeypatch.setattr(cli, "workload_from_args", boom)


def _one_error(capsys, argv, *needles) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), cap.err
    for n in needles:
        assert n in err[0], err[0]
    assert cap.out == ""
    return err[0]


@pytest.fixture
def readonly(tmp_path):
    if ROOT:
        pytest.skip("running as root: permissions are not enforced")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    yield d
    d.chmod(0o700)


# 1. output paths checked before any work

def test_out_that_is_a_file_is_refused_before_the_run(capsys, tmp_path, no_run):
    f = tmp_path / "afile"
    f.write_text("x")
    _one_error(capsys, [*SMALL, "--out", str(f)], "--out", str(f), "not a directory")
    _one_error(capsys, [*SMALL, "--out", str(f / "sub")], "--out", "not a directory")


def test_plot_under_a_file_is_refused_before_the_run(capsys, tmp_path, no_run):
    f = tmp_path / "afile"
    f.write_text("x")
    _one_error(capsys, [*SMALL, "--plot", str(f / "t.png")], "--plot", "not a directory")
    _one_error(capsys, [*SMALL, "--out", str(tmp_path / "o"), "--plot", str(tmp_path)], "--plot", "is a directory")


def test_unwritable_out_and_plot_are_refused(capsys, readonly, no_run):
    _one_error(capsys, [*SMALL, "--out", str(readonly / "o")], "--out", str(readonly), "not writable")
    _one_error(capsys, [*SMALL, "--out", str(readonly)], "--out", "not writable")
    _one_error(capsys, [*SMALL, "--plot", str(readonly / "t.png")], "--plot", "not writable")


def test_sweep_out_is_checked_before_the_grid_runs(capsys, tmp_path, monkeypatch):
    import simulator.apps.sweep.grid as grid

    monkeypatch.setattr(grid, "run_sweep", lambda *a, **k: pytest.fail("sweep ran"))
    g = tmp_path / "g.toml"
    g.write_text('[grid]\npolicies = ["tp"]\ntraces = ["synthetic:batch?n=4&input=64&output=4"]\n')
    (tmp_path / "afile").write_text("x")
    _one_error(capsys, ["sweep", "--grid", str(g), "--out", str(tmp_path / "afile" / "r.parquet")], "--out",
               "not a directory")
    _one_error(capsys, ["sweep", "--grid", str(g), "--out", str(tmp_path)], "--out", "is a directory")


def test_validate_out_and_plot_are_checked_before_any_replay(capsys, tmp_path, monkeypatch):
    import simulator.apps.validate.cli as vcli

    monkeypatch.setattr(vcli, "run_rows", lambda *a, **k: pytest.fail("rows replayed"))
    (tmp_path / "afile").write_text("x")
    m = str(_csv(tmp_path))
    _one_error(capsys, ["validate", "--measurements", m, "--out", str(tmp_path / "afile" / "r.csv")], "--out")
    _one_error(capsys, ["validate", "--measurements", m, "--plot", str(tmp_path / "afile" / "f.png")], "--plot")


def test_check_helpers_accept_what_can_be_written(tmp_path):
    assert files.check_writable_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert files.check_writable_dir(tmp_path) == tmp_path
    assert files.check_writable_file(tmp_path / "x.png") == tmp_path / "x.png"
    (tmp_path / "x.png").write_text("")
    assert files.check_writable_file(tmp_path / "x.png") == tmp_path / "x.png"


# 2. clean exits: Ctrl-C, closed stdout

def test_ctrl_c_in_a_run_says_interrupted_and_exits_130(capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "run", interrupted)
    assert main([*SMALL, "--policy", "tp"]) == 130
    cap = capsys.readouterr()
    assert cap.err.strip() == "interrupted" and cap.out == ""


def test_ctrl_c_in_sweep_and_validate_exits_130(capsys, monkeypatch, tmp_path):
    import simulator.apps.sweep.grid as grid
    import simulator.apps.validate.cli as vcli

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(grid, "run_sweep", interrupted)
    monkeypatch.setattr(vcli, "run_rows", interrupted)
    g = tmp_path / "g.toml"
    g.write_text('[grid]\npolicies = ["tp"]\ntraces = ["synthetic:batch?n=4&input=64&output=4"]\n')
    assert main(["sweep", "--grid", str(g), "--out", str(tmp_path / "r.parquet"), "--no-progress"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    assert main(["validate", "--measurements", str(_csv(tmp_path)), "--jobs", "1"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"


def test_interrupted_write_leaves_no_summary_and_no_temp_files(capsys, monkeypatch, tmp_path):
    """summary.json is written last and every file is renamed into place: a run cut off while writing
    leaves no summary.json (even from an earlier run into the same folder) and no half-written file."""
    out = tmp_path / "o"
    assert main([*SMALL, "--policy", "tp", "--out", str(out)]) == 0
    assert (out / "summary.json").is_file()

    def cut(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(files, "time_series", cut)  # after the two parquet files, before summary.json
    assert main([*SMALL, "--policy", "tp", "--out", str(out), "--overwrite"]) == 130  # (issue 33: else refused)
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"
    assert not (out / "summary.json").exists()
    # --overwrite cleared the earlier run's files first: only the two written before the cut are there
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "steps.parquet"]
    assert not [p for p in out.iterdir() if ".tmp" in p.name]


def test_closed_stdout_ends_quietly_with_exit_141(tmp_path):
    """`simulate ... --format json | head -0`: the reader is gone before the first write; 141 = 128 + SIGPIPE
    (what `cat` reports; `perfmodel` and `microbench` say the same), no traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "simulator.apps.cli", *SMALL, "--policy", "tp", "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    p.stdout.close()  # the reader goes away before the child writes anything
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


def test_broken_pipe_inside_main_is_141_without_traceback(capsys, monkeypatch):
    def gone(*a, **k):
        raise BrokenPipeError
    monkeypatch.setattr(cli, "policies_main", gone)
    assert main(["policies"]) == 141
    assert capsys.readouterr().err == ""


# 3. --format json: stdout is the JSON alone

def test_json_with_plot_keeps_stdout_pure(capsys, tmp_path):
    assert main([*SMALL, "--policy", "tp", "--format", "json", "--out", str(tmp_path), "--plot"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["policy"] == "tp"
    assert f"plot: {tmp_path / 'timeline.png'}" in cap.err and (tmp_path / "timeline.png").is_file()
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_describe_json_with_plot_keeps_stdout_pure(capsys, tmp_path):
    assert main([*SMALL, "--describe", "--format", "json", "--plot", str(tmp_path / "h.png")]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["requests"] == 20 and "plot:" in cap.err


# 4. a sweep with failed runs exits 1 and says which

def test_sweep_with_a_failed_run_exits_1_naming_it(capsys, tmp_path):
    g = tmp_path / "g.toml"
    g.write_text('[grid]\npolicies = ["tp"]\ntraces = ["synthetic:batch?n=4&input=64&output=4"]\n'
                 'models = ["llama-3.1-8b", "llama-3.1-405b"]\nhardware = "l4"\ngpus = 1\n'
                 '[options]\nprofile = "none"\n')
    out = tmp_path / "r.parquet"
    assert main(["sweep", "--grid", str(g), "--out", str(out), "--workers", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    failed = [ln for ln in err.splitlines() if ln.startswith("failed:")]
    assert len(failed) == 1 and "run 1" in failed[0] and "model=llama-3.1-405b" in failed[0]
    assert "does not fit" in failed[0] and "llama-3.1-8b" not in failed[0]
    assert "1 of 2 runs failed" in err


@pytest.mark.parametrize("argv,part", [  # (2026-12-03, a new user's QA: these ran, or said mtp=0 "must be >= 0")
    (["--slo-ttft-ms", "-5", "--slo-tpot-ms", "0"], "slo_ttft_ms=-5.0 must be a positive number"),
    (["--slo-ttft-ms", "nan"], "slo_ttft_ms=nan must be a positive number"),
    (["--slo-tpot-ms", "0"], "slo_tpot_ms=0.0 must be a positive number"),
    (["--mtp-acceptance", "2"], "mtp_acceptance needs mtp >= 1"),
])
def test_bad_run_knobs_are_one_line_exit_2(capsys, argv, part):
    assert main([*SMALL, "--policy", "tp", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and part in err


def test_drop_failed_counts_what_it_dropped(capsys, tmp_path):
    """Regression (2026-12-03, a new user's QA): --drop-failed removed BurstGPT's failed rows with no trace in the
    run's summary or on stderr; they are now counted (dropped_failed_requests) and noted."""
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "0,ChatGPT,50,5,55,x\n1,ChatGPT,40,0,40,x\n2,ChatGPT,30,3,33,x\n")
    assert main([*SMALL[:-2], "--trace", str(p), "--drop-failed", "--policy", "tp", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    s = json.loads(out)
    assert (s["num_requests"], s["dropped_failed_requests"]) == (2, 1)
    assert "1 request(s) the trace marks failed were dropped" in err


def test_sidp_refuses_a_layout_axis_it_would_drop(capsys):
    """Regression (2026-12-03, a new user's QA): `--policy sidp --layout pp=2` ran dp=8 x tp=1, the pp dropped."""
    assert main([*SMALL, "--policy", "sidp", "--layout", "pp=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a SiDP replica is tp GPUs only, no pp" in err


def test_a_gpu_without_a_calibrated_profile_is_noted(capsys):
    """Regression (2026-12-03, a new user's QA): A100 decoded faster than H100 because A100 runs the datasheet
    roofline and H100 its calibrated profile, and only the header's 'profile: datasheet' said so. The run notes it
    (not when --profile none asks for the datasheet)."""
    argv = ["--model", "llama-3.1-8b", "--hardware", "a100_80gb", "--gpus", "1", "--policy", "tp", "--format", "json",
            "--trace", "synthetic:poisson?n=10&rate=4&input=128&output=8"]
    assert main(argv) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("a100_80gb has no calibrated profile: datasheet roofline") for n in notes), notes
    assert main([*argv, "--profile", "none"]) == 0
    assert not any("no calibrated profile" in n for n in json.loads(capsys.readouterr().out)["notes"])


@pytest.mark.parametrize("argv,part", [  # (2026-12-03, a new user's QA: matplotlib's own error; --out ignored)
    (["--policy", "tp", "--plot", "x.txt"], "--plot x.txt: no image format '.txt'"),
    (["--describe", "--out", "somewhere"], "--out: --describe writes no run files"),
])
def test_plot_format_and_describe_out_are_refused_before_the_run(capsys, argv, part, no_run):
    assert main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and part in err


def test_disagg_names_the_pool_it_inferred(capsys):
    """Regression (2026-12-03, a new user's QA): with only the prefill pool given, the decode pool takes the 7 GPUs
    left, on which 405B has no TP; the error said 'tp=7' and named no pool."""
    assert main(["--policy", "disagg", "--policy-arg", "prefill=1x(tp=1)", "--model", "llama-3.1-405b",
                 "--profile", "none", "--trace", "synthetic:poisson?n=5&rate=4&input=128&output=8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the decode pool, not given, gets the 7 x h200_sxm left" in err


def test_plot_formats_are_ones_matplotlib_writes():
    from matplotlib.backend_bases import FigureCanvasBase
    assert set(cli.PLOT_FORMATS) <= set(FigureCanvasBase.filetypes)
