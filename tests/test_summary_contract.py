"""Issue 17: summary.json carries every key of vLLM's benchmark result file with vLLM's meaning, and
a `config` block from which `simulator.rerun` reproduces the run bit for bit (docs/outputs.md)."""
import dataclasses
import json
import re
import shutil

import numpy as np
import pytest

from simulator import compare, load_trace, rerun, run
from simulator.engine.config import EngineConfig
from simulator.results.files import write_run
from simulator.run import RunSpec, peak_second

# The keys of `vllm bench serve --save-result` (vLLM 0.33.0, commit 4ba787ec9, vllm/benchmarks/serve.py):
# setup keys serve.py:2306-2312, traffic serve.py:2326-2330, the benchmark result serve.py:1319-1341,
# mean/median/std/p99 of the default percentile metrics ttft,tpot,itl (serve.py:1426-1432, defaults
# serve.py:2255 and --metric-percentiles "99"); the per-request lists are kept only with --save-detailed
# (serve.py:2428-2442), except latencies and queue_times.
VLLM_KEYS = (
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")),
)
VLLM_DETAIL_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
SMALL = dict(model="llama-3.1-8b", hardware="h200", gpus=1, profile="none")
SPEC = "synthetic:gamma?rate=40&burstiness=0.5&n=120&input=256-2048&output=16-200&seed=3"


@pytest.fixture(scope="module")
def closed():
    return run(load_trace(SPEC), RunSpec(policy="tp", max_concurrency=6, **SMALL), detail=True)


def test_every_vllm_key_present(closed):
    missing = [k for k in VLLM_KEYS + VLLM_DETAIL_KEYS if k not in closed.summary]
    assert not missing, f"vLLM result-file keys missing from the summary: {missing}"
    plain = run(load_trace(SPEC), RunSpec(policy="tp", **SMALL)).summary
    assert all(k in plain for k in VLLM_KEYS + VLLM_DETAIL_KEYS)
    assert all(plain[k] is None for k in VLLM_DETAIL_KEYS + ("latencies", "queue_times"))  # detail only


def test_values_consistent(closed):
    s, req = closed.summary, closed.requests
    assert s["completed"] + s["failed"] == s["num_prompts"] == len(req) == 120
    assert s["failed"] == s["rejected"]
    assert re.fullmatch(r"\d{8}-\d{6}", s["date"])  # vLLM's %Y%m%d-%H%M%S
    assert s["request_rate"] == 40.0 and s["burstiness"] == 0.5 and s["max_concurrency"] == 6
    assert s["model_id"] == "llama-3.1-8b"
    # closed loop: never more than max_concurrency in flight at once; vLLM's per-second count may be more
    assert 1 <= s["max_in_flight_requests"] <= s["max_concurrency"]
    assert s["max_concurrent_requests"] >= s["max_in_flight_requests"]
    assert 0 < s["max_output_tokens_per_s"] <= s["total_output_tokens"]
    assert len(s["input_lens"]) == len(s["ttfts"]) == len(s["errors"]) == s["num_prompts"]
    assert sum(s["output_lens"]) == s["total_output_tokens"]
    assert s["mean_ttft_ms"] == pytest.approx(1e3 * np.mean([t for t, e in zip(s["ttfts"], s["errors"]) if not e]))
    json.dumps(s)  # JSON-serialisable as it is


def _vllm_peak(req):
    """vLLM's loop (serve.py calculate_metrics, max_output_tokens_per_s) on per-request token times."""
    comp = req[req["status"] == "completed"]
    m = comp["issued_s"].min()
    nb = int(np.ceil(comp["finish_s"].max() - m)) + 1
    tok, conc = np.zeros(nb), np.zeros(nb)
    for r in comp.itertuples():
        n = r.generated_tokens
        d = (r.finish_s - r.first_token_s) / (n - 1) if n > 1 else 0.0
        for j in range(n):
            b = int(r.first_token_s + j * d - m)
            if 0 <= b < nb:
                tok[b] += 1
        for sec in range(int(r.issued_s - m), int(r.finish_s - m) + 1):
            conc[sec] += 1
    return float(tok.max()), int(conc.max())


def test_peak_second_follows_vllm(closed):
    assert peak_second(closed.requests) == _vllm_peak(closed.requests)
    assert (closed.summary["max_output_tokens_per_s"], closed.summary["max_concurrent_requests"]) == \
        _vllm_peak(closed.requests)


def test_traffic_keys_as_vllm_reports_them():
    batch = run(load_trace("synthetic:batch?n=8&input=128&output=8"), RunSpec(policy="tp", **SMALL)).summary
    assert batch["request_rate"] == "inf" and batch["max_concurrency"] is None
    trace = run(load_trace("burstgpt.csv"), RunSpec(policy="tp", **SMALL)).summary
    assert trace["request_rate"] == "inf" and trace["burstiness"] is None  # timestamps of its own
    onoff = run(load_trace("synthetic:onoff?n=30&input=128&output=8"), RunSpec(policy="tp", **SMALL)).summary
    assert onoff["request_rate"] is None
    scaled = run(load_trace("synthetic:poisson?rate=5&n=20&input=128&output=8"), RunSpec(policy="tp", **SMALL),
                 workload_args={"trace": "synthetic:poisson?rate=5&n=20&input=128&output=8", "rate_scale": 2.0})
    assert scaled.summary["request_rate"] == 10.0 and scaled.summary["burstiness"] == 1.0


def test_config_block_complete(closed):
    cfg = closed.summary["config"]
    assert set(cfg["run_spec"]) == {f.name for f in dataclasses.fields(RunSpec)}
    assert set(cfg["run_spec"]["engine"]) == {f.name for f in dataclasses.fields(EngineConfig)}
    assert cfg["workload"]["synthetic"] == cfg["workload"]["trace"] and cfg["workload"]["sha256"] is None
    assert cfg["seed"] == 3 and cfg["framework"] == "vllm"
    assert cfg["profile"]["name"] == "datasheet"
    assert cfg["tool"]["name"] == "parallelism-sim" and cfg["tool"]["version"]
    assert set(cfg["environment"]) == {"python", "numpy", "pandas", "simpy"}
    calibrated = run(load_trace(SPEC), RunSpec(policy="tp", model="llama-3.1-8b", gpus=1)).summary["config"]
    assert calibrated["profile"]["name"] != "datasheet" and len(calibrated["profile"]["sha256"]) == 64


def test_library_versions_are_read_once_per_process(monkeypatch):
    """summary["config"]["environment"]: the package metadata is looked up once per process (~0.9 ms a run
    before 2026-12-02, paid by every validate replay, sweep and recommend run), and each summary gets its own dict."""
    from simulator import run_record

    wl = load_trace("synthetic:poisson?rate=5&n=10&input=128&output=8")
    first = run(wl, RunSpec(policy="tp", **SMALL)).summary["config"]["environment"]
    calls = []
    version = run_record.md.version
    monkeypatch.setattr(run_record.md, "version", lambda name: calls.append(name) or version(name))
    again = [run(wl, RunSpec(policy="tp", **SMALL)).summary["config"]["environment"] for _ in range(3)]
    assert not calls and all(e == first for e in again) and again[0] is not again[1]


def test_rerun_reproduces_synthetic_bit_for_bit(tmp_path, closed, capsys):
    write_run(tmp_path, closed.summary, closed.requests, closed.steps)
    again = rerun(tmp_path)
    old = json.loads((tmp_path / "summary.json").read_text())
    new = json.loads(json.dumps(again.summary))
    assert {k: v for k, v in new.items() if k != "date"} == {k: v for k, v in old.items() if k != "date"}
    assert rerun.main([str(tmp_path)]) == 0
    old["median_ttft_ms"] = np.nextafter(old["median_ttft_ms"], 1e9)  # one bit off
    (tmp_path / "summary.json").write_text(json.dumps(old))
    assert rerun.main([str(tmp_path / "summary.json")]) == 1
    assert "median_ttft_ms" in capsys.readouterr().out


def test_rerun_checks_the_trace_file(tmp_path):
    trace = tmp_path / "trace.csv"
    shutil.copy(load_trace("burstgpt.csv").source, trace)
    from simulator.workload import parse_sample, sample

    wl = sample(load_trace(str(trace)), seed=0, **parse_sample("200"))  # as simulate --sample 200 builds it
    r = run(wl, RunSpec(policy="tp", **SMALL), workload_args={"trace": str(trace), "sample": "200"})
    cfg = r.summary["config"]["workload"]
    assert cfg["path"] == str(trace.resolve()) and len(cfg["sha256"]) == 64 and cfg["num_requests"] == 200
    write_run(tmp_path / "out", r.summary, r.requests, r.steps)
    assert rerun.main([str(tmp_path / "out")]) == 0
    with trace.open("a") as f:
        f.write("\n")
    with pytest.raises(ValueError, match="changed since the run"):
        rerun(tmp_path / "out")
    assert rerun.main([str(tmp_path / "out")]) == 2


def test_rerun_of_a_relative_trace_path_reproduces_from_any_folder(tmp_path, monkeypatch):
    """Regression: a run given a relative trace path recorded it as given, while the rerun, which reads the
    file by its resolved path, recorded the absolute path, so `simulate rerun` reported a difference (exit 1)
    in `trace` (and from another folder could not hash the file). The rerun keeps the run's `trace` and reads
    the file by its recorded path: rerun from the run's folder and from another."""
    from simulator.apps.cli import main as simulate

    (tmp_path / "runs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(load_trace("burstgpt.csv").source, tmp_path / "runs" / "t.csv")
    monkeypatch.chdir(tmp_path / "runs")
    assert simulate(["--trace", "t.csv", "--sample", "50", "--policy", "tp", "--model", "llama-3.1-8b",
                     "--hardware", "h200", "--gpus", "1", "--profile", "none", "--max-concurrency", "4",
                     "--out", "out"]) == 0
    assert json.loads((tmp_path / "runs" / "out" / "summary.json").read_text())["trace"] == "t.csv"
    assert rerun.main(["out"]) == 0
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert rerun.main([str(tmp_path / "runs" / "out")]) == 0


def test_rerun_refuses_an_unrecorded_workload(tmp_path):
    from simulator.workload import rate_scale

    wl = rate_scale(load_trace("burstgpt.csv"), 2.0)  # transformed, but run() is not told how
    r = run(wl, RunSpec(policy="tp", **SMALL))
    write_run(tmp_path, r.summary, r.requests, r.steps)
    with pytest.raises(ValueError, match="rebuilt workload differs"):
        rerun(tmp_path)


def test_compare_one_row_per_policy():
    df = compare("synthetic:poisson?rate=5&n=30&input=256&output=16", ["tp", "dp"], **{**SMALL, "gpus": 2})
    assert list(df.index) == ["tp", "dp"] and (df["completed"] == 30).all()
    assert list(df["layout"]) == ["tp=2", "dp=2 x tp=1"]
