"""CLI: describe / convert, trace flags on any parser, bundled samples reproducible."""
import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from simulator.workload import load_trace
from simulator.workload.cli import add_trace_args, describe_main, main, workload_from_args

REPO = Path(__file__).resolve().parents[1]


def test_describe_bundled_burstgpt(capsys):
    assert describe_main(["burstgpt.csv"]) == 0
    out = capsys.readouterr().out
    rows = dict(line.split(None, 1) for line in out.splitlines() if not line.startswith("note:"))
    assert int(rows["requests"]) == len(pd.read_csv(REPO / "traces" / "burstgpt.csv"))
    assert "interarrival_cv" in rows and "output_tokens_p99" in rows
    assert "failed request(s) (0 response tokens) kept as prefill-only" in out


def test_describe_json_and_flags(capsys):
    assert describe_main(["--trace", "burstgpt.csv", "--json", "--drop-failed",
                          "--burstgpt-model", "ChatGPT", "--time-window", "0:600"]) == 0
    s = json.loads(capsys.readouterr().out)
    raw = pd.read_csv(REPO / "traces" / "burstgpt.csv")
    chat = raw[raw["Model"] == "ChatGPT"]
    assert s["dropped_failed_requests"] == int((chat["Response tokens"] == 0).sum())
    ok = chat[chat["Response tokens"] > 0]
    in_window = ok["Timestamp"] - ok["Timestamp"].iloc[0] < 600
    assert s["requests"] == int(in_window.sum()) and s["prefill_only_requests"] == 0


def test_describe_plot_writes_png(tmp_path, capsys):
    png = tmp_path / "p.png"
    assert describe_main(["bursty_onoff.csv", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_convert_synthetic_then_read_back(tmp_path, capsys):
    out = tmp_path / "s.csv"
    spec = "synthetic:onoff?n=500&low=1-2&high=20&input=64-512&output=32&priority=0:3,1:1"
    assert main(["convert", spec, str(out), "--seed", "5", "--rate-scale", "2"]) == 0
    assert "wrote 500 requests" in capsys.readouterr().out
    back = load_trace(out)
    direct = load_trace(spec, seed=5)
    assert back.requests["arrival_s"].tolist() == pytest.approx(
        (direct.requests["arrival_s"] / 2).tolist(), rel=0, abs=0)


def test_add_trace_args_on_foreign_parser_and_model_clip():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=3)  # e.g. simulate already owns --seed
    add_trace_args(p, seed=False)
    args = p.parse_args(["--max-context-clip", "tiny", "--sample", "0.5"])
    assert args.trace == "burstgpt.csv"  # the default gives a useful run with no flag
    w = workload_from_args(args)
    from perfmodel.modelspec import load_model
    ctx = load_model("tiny").max_position_embeddings
    assert (w.requests["input_tokens"] + w.requests["output_tokens"] <= ctx).all()
    assert len(w) == 750  # half of the 1500 bundled rows


def test_module_main_usage():
    assert main([]) == 2 and main(["frobnicate"]) == 2


def test_bundled_samples_are_reproducible(tmp_path):
    import runpy
    runpy.run_path(str(REPO / "traces" / "make_samples.py"))["main"](tmp_path)
    for name in ("bursty_onoff.csv", "burstgpt.csv"):
        bundled = REPO / "traces" / name
        assert (tmp_path / name).read_bytes() == bundled.read_bytes(), name
        assert bundled.stat().st_size < 300_000
    assert (REPO / "traces" / "README.md").is_file()


def test_load_speed_benchmark_runs_small():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "benchmarks/trace_load_speed.py", "--rows", "20000",
                        "--layout", "session"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "20,000 requests" in r.stdout and "peak RSS" in r.stdout
