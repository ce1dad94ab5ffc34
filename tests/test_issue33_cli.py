"""Issue 33 (a new user's plausible, wrong answers or tracebacks), items 6, 8, 9, 12, 13 and the synthetic
spec's recorded name: each test fails on the code before the fix. Bad input is one `error:` line, exit 2."""
import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from test_sim_util import run, workload

from simulator.apps.cli import main
from simulator.run_record import peak_second
from simulator.workload import load_trace

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--profile", "none"]
TRACE = ["--trace", "synthetic:poisson?n=6&rate=2&input=64&output=4"]
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def one_error(capsys, argv, needle: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    return err[0]


# 6. a request too long for the model costs the front end nothing
def test_a_rejected_giant_prompt_does_not_delay_the_next_request():
    w = workload([0.0, 1.0], [100_000_000_000, 100], [10, 10])
    f = run(w, tokenize_s_per_token=1.5e-6).requests.frame()
    assert f["status"].tolist() == ["rejected", "completed"]
    alone = run(workload([1.0], [100], [10]), tokenize_s_per_token=1.5e-6).requests.frame()
    assert f["ttft_ms"].iloc[1] == pytest.approx(alone["ttft_ms"].iloc[0], rel=1e-12)  # was 150,000 s


# 8. shift whose base degenerates to TP: TP's numbers; the right GPU count when nothing fits
@pytest.mark.parametrize("gpus", ["4", "2"])
def test_shift_with_no_room_for_sp_runs_as_tp_with_one_weight_copy(capsys, gpus):
    argv = ["--model", "llama-3.3-70b", "--hardware", "h100", "--gpus", gpus, "--profile", "none", *TRACE,
            "--compare", "tp,shift", "--format", "json", "--hbm-gb", "80"]  # (80e9 bytes: no room for SP's copy)
    assert main(argv) == 0
    out = capsys.readouterr()
    tp, shift = json.loads(out.out)
    assert shift["kv_capacity_tokens"] == tp["kv_capacity_tokens"]  # was 417,088 vs 638,832 on 4 GPUs
    assert shift["median_ttft_ms"] == tp["median_ttft_ms"] and shift["median_tpot_ms"] == tp["median_tpot_ms"]
    assert "one weight copy" in out.err


def test_shift_that_fits_no_way_names_the_gpus_of_the_run(capsys):
    one_error(capsys, ["--model", "llama-3.3-70b", "--hardware", "h100", "--gpus", "2", "--profile", "none",
                       *TRACE, "--policy", "shift", "--policy-arg", "base=sp=2"], "does not fit")
    from perfmodel.deploy import deployment
    from perfmodel.hardware import load_hardware
    from perfmodel.layout import LayoutError
    from perfmodel.modelspec import load_model
    with pytest.raises(LayoutError, match=r"does not fit 2 x h100"):  # was "8 x h100_sxm"
        deployment("shift", load_model("llama-3.3-70b", weights="fp8"), load_hardware("h100"), 2)


# 9. flags out of range or ignored
@pytest.mark.parametrize("argv, needle", [
    (["--window-s", "0"], "--window-s 0"), (["--window-s", "-5"], "--window-s -5"),
    (["--policy", "shift", "--policy-arg", "threshold=-5"], "threshold='-5'"),
    (["--compare", "tp,shift:threshold=-1"], "threshold='-1'"),
    (["--compare", "tp,sidp:slots=0"], "slots='0'"),
    (["--compare", "tp,tp", "--policy", "shift"], "--policy shift with --compare"),
])
def test_bad_flags_are_one_line_before_any_run(capsys, argv, needle):
    one_error(capsys, [*SMALL, *TRACE, *argv], needle)


# 12. --out holding an earlier run: refused, or replaced cleanly with --overwrite
def test_out_with_an_earlier_run_is_refused_unless_overwrite(capsys, tmp_path):
    out = tmp_path / "o"
    base = [*SMALL, *TRACE, "--policy", "tp", "--out", str(out)]
    assert main([*base, "--plot"]) == 0
    assert (out / "timeline.png").is_file()
    (out / "mine.txt").write_text("the user's own")
    capsys.readouterr()
    one_error(capsys, base, "--overwrite")
    assert main([*base, "--overwrite"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "timeline.png" not in names and "mine.txt" in names and "summary.json" in names  # old plot gone


# 13. hostile inputs: one line, exit 2, before the work
def test_unwritable_out_is_refused_up_front(capsys):
    one_error(capsys, [*SMALL, *TRACE, "--out", "/proc/x"], "--out /proc/x")
    one_error(capsys, ["recommend", *TRACE, "--slo-ttft-ms", "100", "--slo-tpot-ms", "50", "--model",
                       "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--out", "/proc/x"], "/proc/x")
    one_error(capsys, ["validate", "--measurements", "none.csv", "--out", "/proc/x.csv"], "/proc/x.csv")


def test_a_sparse_file_is_not_read_whole(capsys, tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(3 << 20)  # sparse: NUL bytes, no newline (the was 2 GB)
    one_error(capsys, [*SMALL, "--trace", str(big)], "NUL byte")


def test_a_timestamp_in_the_wrong_unit_is_refused(capsys, tmp_path):
    far = tmp_path / "far.csv"
    far.write_text(HEADER + "0,ChatGPT,100,10,110,Conversation log\n1e15,ChatGPT,100,10,110,Conversation log\n")
    assert "request_id 1" in one_error(capsys, [*SMALL, "--policy", "tp", "--trace", str(far)], "1e+15")


def test_peak_second_is_sparse_and_agrees_with_the_dense_count():
    """A run spanning years must not allocate per second of it (a 1e15 s timestamp: 7 PiB)."""
    import pandas as pd
    rng = np.random.default_rng(1)
    issued = np.sort(rng.uniform(0, 40, 30))
    first = issued + rng.uniform(0.01, 2, 30)
    gen = rng.integers(0, 50, 30)
    finish = first + gen * rng.uniform(0.01, 0.1, 30)
    req = pd.DataFrame({"status": "completed", "issued_s": issued, "first_token_s": first, "finish_s": finish,
                        "generated_tokens": gen})
    tokens, conc = peak_second(req)
    # the dense definition (vLLM's calculate_metrics), by hand on 1-s buckets
    m, nb = issued.min(), int(np.ceil(finish.max() - issued.min())) + 1
    dense_conc = max(sum(int(s - m) <= b <= int(e - m) for s, e in zip(issued, finish)) for b in range(nb))
    assert conc == dense_conc and tokens > 0
    far = req.copy()
    far.loc[far.index[-1], ["issued_s", "first_token_s", "finish_s"]] += 2e7  # dense: 2 x 160 MB of buckets
    tracemalloc.start()
    try:
        assert peak_second(far)[1] <= conc
        assert tracemalloc.get_traced_memory()[1] < 20e6  # bytes: numpy's buffers are traced
    finally:
        tracemalloc.stop()


def test_a_config_json_that_is_an_array_is_one_line(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("[1, 2]")
    one_error(capsys, [*TRACE, "--model", str(cfg), "--hardware", "h100", "--gpus", "1", "--policy", "tp"],
              "JSON object")


def test_ctrl_c_during_the_imports_is_one_line_and_130():
    """Deterministic stand-in for SIGINT in the first 2 s: the import of a dependency raises KeyboardInterrupt."""
    code = ("import builtins, sys\nreal = builtins.__import__\n"
            "def imp(name, *a, **k):\n    if name == 'perfmodel.layout': raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\nbuiltins.__import__ = imp\nfrom simulator.apps.cli import main\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 130 and r.stderr == "interrupted\n", r.stderr


# the synthetic spec's defaults are part of the recorded trace name
def test_synthetic_source_records_the_resolved_spec():
    w = load_trace("synthetic:gamma?rate=5")
    assert w.source == "synthetic:gamma?n=1000&rate=5&burstiness=1&input=1024&output=128&priority=0:1&seed=0"
    assert load_trace(w.source).requests.equals(w.requests)
