"""`python -m kernels.serve`: a real serving loop (2 gloo ranks) over the reference models, scheduled
by the simulator's own scheduler, writing the simulator's files with predicted_s beside each step."""
import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from kernels.serve.cli import main, parse, run_serve, scaled_spec  # noqa: E402
from simulator.results.records import STEP_COLUMNS, RequestRecords  # noqa: E402
from simulator.workload import load_trace  # noqa: E402

TRACE = "synthetic:gamma?rate=20&burstiness=0.5&n=10&input=48&output=8"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-tp")
    code = main(["--strategy", "tp", "--nproc", "2", "--model", "tiny", "--trace", TRACE, "--out", str(out)])
    assert code == 0
    return out


@pytest.mark.slow  # a 2-rank world serving 10 requests on the wall clock: ~4 s
def test_tp_serves_every_request_into_the_simulators_files(served):
    assert {p.name for p in served.iterdir()} >= {"requests.parquet", "steps.parquet", "summary.json"}
    req = pd.read_parquet(served / "requests.parquet")
    steps = pd.read_parquet(served / "steps.parquet")
    summary = json.loads((served / "summary.json").read_text())
    # the simulator's columns, in its order (requests: RequestRecords.frame; steps: STEP_COLUMNS + ours)
    assert list(req.columns) == list(RequestRecords(load_trace(TRACE)).frame().columns)
    assert list(steps.columns)[:len(STEP_COLUMNS)] == list(STEP_COLUMNS)
    assert {"predicted_s", "tick_s"} <= set(steps.columns)
    assert (req["status"] == "completed").all() and len(req) == 10
    assert (req["generated_tokens"] == req["output_tokens"]).all()
    assert summary["completed"] == 10 and summary["num_requests"] == 10
    for key in ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "request_throughput", "num_prompts"):
        assert key in summary
    # every step measured and predicted; the scheduler computed each prompt once, each output token after
    assert (steps["duration_s"] > 0).all() and np.isfinite(steps["predicted_s"]).all()
    assert (steps["predicted_s"] > 0).all()
    assert steps["prefill_tokens"].sum() == req["input_tokens"].sum()
    assert steps["decode_seqs"].sum() == (req["output_tokens"] - 1).sum()
    assert summary["median_step_ms"] > 0 and summary["median_predicted_step_ms"] > 0
    # wall-clock times are consistent: issued at arrival (open loop), first token before finish
    assert np.allclose(req["issued_s"], req["arrival_s"])
    assert (req["first_token_s"] >= req["arrival_s"]).all() and (req["finish_s"] >= req["first_token_s"]).all()
    assert set(steps["mode"].astype(str)) == {"tp"}


@pytest.mark.slow  # ~3 s: DP replicas with their own schedulers, a closed loop and KV preemption
def test_dp_closed_loop_with_preemption():
    a = parse(["--strategy", "dp", "--nproc", "2", "--trace", "synthetic:batch?n=8&input=100&output=40",
               "--max-concurrency", "6", "--kv-blocks", "14"])
    summary, req, steps = run_serve(a)
    assert (req["status"] == "completed").all()
    assert set(req["engine"]) == {0, 1} and set(steps["engine"]) == {0, 1}
    assert summary["preemptions"] > 0  # 3 requests of up to 140 tokens per replica of 224 KV tokens
    assert summary["max_in_flight_requests"] <= 6
    assert np.isfinite(steps["predicted_s"]).all()


def test_scaled_spec_keeps_heads_shardable():
    spec = scaled_spec("llama-3.1-8b", layers=2, hidden_scale=0.125, world_size=2)
    assert spec.num_layers == 2 and spec.head_dim == 128
    assert spec.num_kv_heads % 2 == 0 and spec.num_heads % spec.num_kv_heads == 0
    assert spec.hidden_size == spec.num_heads * spec.head_dim
    assert scaled_spec("tiny").hidden_size == 256  # unscaled: the preset as is


def test_device_flag_cpu_cuda_and_gpu_presets(monkeypatch, capsys):
    """--device: cpu runs gloo on the CPU preset; cuda where torch sees none is one error line (exit 2);
    on a GPU the perf model's hardware is the GPU's preset by name unless --hardware names one."""
    import torch

    from kernels.serve.cli import resolve_device

    assert resolve_device(parse(["--device", "cpu"])) == ("gloo", "cpu")
    assert resolve_device(parse(["--device", "cpu", "--hardware", "h100_sxm"])) == ("gloo", "h100_sxm")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(parse([])) == ("gloo", "cpu")  # auto
    assert main(["--device", "cuda", "--nproc", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --device cuda: no CUDA device here (torch.cuda.is_available() is False)"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    assert resolve_device(parse(["--nproc", "8"])) == ("nccl", "h100_sxm")
    assert resolve_device(parse(["--nproc", "8", "--hardware", "h200_sxm"])) == ("nccl", "h200_sxm")
    with pytest.raises(ValueError, match="--nproc 9: 8 GPU"):
        resolve_device(parse(["--nproc", "9"]))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Some Future GPU")
    with pytest.raises(ValueError, match="--hardware: no preset for 'Some Future GPU'"):
        resolve_device(parse(["--device", "cuda", "--nproc", "1"]))
