"""`simulate compare` (simulator/apps/comparison): a run against itself has zero error on every metric; a vLLM
bench serve --save-detailed result file is read with every request; bad input is one `error:` line, exit 2."""
from __future__ import annotations

import json

import pytest

from simulator import RunSpec, run
from simulator.apps.comparison import inputs
from simulator.apps.comparison.cli import HEADLINE, METRICS, main
from simulator.results.files import write_run
from simulator.workload import load_trace

SPEC = "synthetic:gamma?rate=20&burstiness=0.5&n=30&input=128-512&output=8-32&seed=1"
SMALL = dict(model="llama-3.1-8b", hardware="h200", gpus=1, profile="none")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    r = run(load_trace(SPEC), RunSpec(policy="tp", **SMALL))
    write_run(out, r.summary, r.requests, r.steps)
    return out


def vllm_result(n: int = 4) -> dict:
    """A small result file with the keys vLLM's bench serve writes (--save-result --save-detailed);
    request 2 failed (vLLM's defaults: ttft 0.0, output length 0, its error text)."""
    ok = [i != 2 for i in range(n)]
    out_lens = [5 + i if k else 0 for i, k in enumerate(ok)]
    return {
        "date": "20250101-120000", "endpoint_type": "openai", "backend": "vllm", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
        "duration": 2.5, "completed": sum(ok), "failed": n - sum(ok),
        "total_input_tokens": sum(100 * (i + 1) for i in range(n) if ok[i]), "total_output_tokens": sum(out_lens),
        "request_throughput": sum(ok) / 2.5, "request_goodput": None, "output_throughput": sum(out_lens) / 2.5,
        "total_token_throughput": (sum(100 * (i + 1) for i in range(n) if ok[i]) + sum(out_lens)) / 2.5,
        "input_lens": [100 * (i + 1) for i in range(n)], "output_lens": out_lens,
        "ttfts": [0.05 + 0.01 * i if k else 0.0 for i, k in enumerate(ok)],
        "itls": [[0.02] * (o - 1) if k else [] for o, k in zip(out_lens, ok)],
        "start_times": [1000.0 + 0.1 * i for i in range(n)],
        "generated_texts": ["x" if k else "" for k in ok],
        "errors": ["" if k else "ClientConnectorError" for k in ok],
        "mean_ttft_ms": 60.0, "median_ttft_ms": 60.0, "std_ttft_ms": 1.0, "p99_ttft_ms": 70.0,
        "max_output_tokens_per_s": 10.0, "max_concurrent_requests": n,
    }


def test_self_compare_is_zero(run_dir, capsys):
    assert main([str(run_dir), str(run_dir / "summary.json"), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for m in HEADLINE:
        assert rep[f"{m}_measured"] is not None and rep[f"{m}_measured"] > 0, m
    for m in METRICS:
        assert rep[f"{m}_rel_err"] in (0.0, None), m
        assert rep[f"{m}_measured"] == rep[f"{m}_simulated"], m
    pr = rep["per_request"]
    assert pr["joined_by"] == "request_id" and pr["completed_both"] == 30 and pr["input_tokens_differ"] == 0
    assert pr["ttft_rel_err_median_abs"] == pr["tpot_rel_err_mean"] == 0.0
    assert rep["steps"] is None  # the simulator's steps carry no predicted_s


def test_table_and_plot(run_dir, tmp_path, capsys):
    png = tmp_path / "cdf.png"
    assert main([str(run_dir), str(run_dir), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "median_ttft_ms" in out and "+0.0%" in out and png.stat().st_size > 1000


def test_vllm_file_read_with_every_request(tmp_path, run_dir, capsys):
    f = tmp_path / "vllm.json"
    f.write_text(json.dumps(vllm_result()))
    side = inputs.load(f)
    req = side.requests
    assert side.kind == "vllm" and len(req) == 4 and list(req["status"]) == ["completed"] * 2 + ["rejected", "completed"]
    assert list(req["input_tokens"]) == [100, 200, 300, 400]
    assert req["issued_s"].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert req.loc[0, "ttft_ms"] == pytest.approx(50.0) and req.loc[0, "tpot_ms"] == pytest.approx(20.0)
    assert req.loc[0, "e2el_ms"] == pytest.approx(50.0 + 4 * 20.0)  # latency = ttft + sum(itls)
    assert main([str(f), str(f), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["completed_measured"] == 3 and rep["total_token_throughput_measured"] == pytest.approx(
        vllm_result()["total_token_throughput"])
    assert rep["median_itl_ms_measured"] == pytest.approx(20.0) and rep["median_ttft_ms_rel_err"] == 0.0
    # a vLLM file against a run: joined by position, errors finite
    assert main([str(f), str(run_dir), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["per_request"]["joined_by"].startswith("position (first 4") and rep["median_ttft_ms_rel_err"] is not None


@pytest.mark.parametrize("bad, says", [
    ("missing", "no such file"), ("notjson", "not JSON"), ("nolists", "neither a run directory"),
    ("short", "'output_lens' has 2 entries"), ("emptydir", "no summary.json"),
])
def test_bad_input_one_line_exit_2(tmp_path, run_dir, capsys, bad, says):
    p = tmp_path / bad
    if bad == "notjson":
        p.write_text("arrival_s,input_tokens\n")
    elif bad == "nolists":
        p.write_text(json.dumps({"duration": 1.0}))
    elif bad == "short":
        d = vllm_result()
        d["output_lens"] = d["output_lens"][:2]
        p.write_text(json.dumps(d))
    elif bad == "emptydir":
        p.mkdir()
    assert main([str(run_dir), str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(p) in err[0] and says in err[0], err


def test_api_compare_still_callable():
    """Importing the simulator.apps.comparison package keeps `from simulator import compare` the policy comparison."""
    import simulator.apps.comparison  # noqa: F401
    import simulator
    from simulator import compare

    assert callable(compare) and callable(simulator.compare)
    df = compare("synthetic:batch?n=4&input=64&output=4", ["tp"], **SMALL)
    assert list(df.index) == ["tp"] and df.loc["tp", "completed"] == 4


def test_step_predictions_reported(run_dir, tmp_path, capsys):
    """A steps.parquet with `predicted_s` beside the measured duration_s: per-step error, per mode."""
    import pandas as pd

    r = inputs.load(run_dir)
    steps = r.steps.assign(predicted_s=r.steps["duration_s"] * 1.1)
    write_run(tmp_path, r.summary, r.requests, steps)
    assert main([str(tmp_path), str(run_dir), "--format", "json"]) == 0
    st = json.loads(capsys.readouterr().out)["steps"]
    assert st["steps"] == len(pd.read_parquet(run_dir / "steps.parquet"))
    assert st["rel_err_mean"] == pytest.approx(0.1) and st["rel_err_median_abs"] == pytest.approx(0.1)
    assert len(st["by_mode"]) == 1 and next(iter(st["by_mode"].values()))["steps"] == st["steps"]
