"""Issue 33, findings 10 and 11 and the replay flags: replay sends the trace's prefill-only rows (0 output
tokens) so that they complete as in the simulator; replay takes simulate's --sample / --rate-scale with
simulate's meaning; compare refuses runs of another model or trace unless --force."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from fake_openai_server import FakeServer  # noqa: E402  (pytest puts tests/ on sys.path)
from simulator.apps.comparison.cli import main as compare_main  # noqa: E402
from simulator.apps.replay.cli import main as replay_main  # noqa: E402
from simulator.run import RunSpec, run  # noqa: E402
from simulator.run_record import workload_sha256  # noqa: E402
from simulator.workload.cli import add_trace_args, workload_from_args  # noqa: E402

TRACE = "burstgpt.csv"  # rows 4 and 24 of its first 30 have 0 output tokens


class VllmLikeServer(FakeServer):
    """The fake server, refusing max_tokens < 1 as vLLM does (SamplingParams: 'max_tokens must be at least 1')."""

    def __init__(self):
        super().__init__(ttft_s=0.0, tpot_s=0.0, model="meta-llama/Llama-3.1-8B-Instruct")

    async def completions(self, request):
        body = await request.json()  # (aiohttp keeps the body read: the parent reads it again)
        if int(body.get("max_tokens", 16)) < 1:
            self.bodies.append(body)
            return web.json_response({"error": {"message": f"max_tokens must be at least 1, got {body['max_tokens']}."}},
                                     status=400)
        return await super().completions(request)


def simulate_workload(*flags):
    import argparse

    return workload_from_args(add_trace_args(argparse.ArgumentParser()).parse_args(["--trace", TRACE, *flags]))


def replay(tmp_path, name, *flags) -> tuple[int, object, list]:
    import pandas as pd

    with VllmLikeServer() as srv:
        rc = replay_main(["--url", srv.url, "--trace", TRACE, "--out", str(tmp_path / name), "--ignore-timestamps",
                          *flags])
        bodies = list(srv.bodies)
    req = pd.read_parquet(tmp_path / name / "requests.parquet") if rc in (0, 1) else None
    return rc, req, bodies


def test_prefill_only_rows_complete_as_in_the_simulator(tmp_path):
    rc, req, bodies = replay(tmp_path, "r", "--limit", "30")
    assert rc == 0
    zero = req["requested_output_tokens"].to_numpy() == 0
    assert zero.sum() == 2 and min(b["max_tokens"] for b in bodies) == 1  # was: max_tokens 0, refused (HTTP 400)
    assert (req["status"] == "completed").all()  # was: 2 rejected
    z = req[zero]
    assert (z["output_tokens"] == 0).all() and z["ttft_ms"].isna().all() and (z["e2el_ms"] > 0).all()
    # the simulator on the same 30 requests: the same ones completed, the same output counts
    wl = simulate_workload()
    wl = wl.replace(requests=wl.requests.iloc[:30].reset_index(drop=True))
    sim = run(wl, RunSpec(model="llama-3.1-8b", hardware="h100", gpus=1, policy="layout", layout="tp=1")).requests
    assert list(sim["request_id"]) == list(req["request_id"])
    assert (sim["status"].to_numpy() == req["status"].to_numpy()).all()
    assert (sim["output_tokens"].to_numpy() == req["output_tokens"].to_numpy()).all()
    assert sim.loc[zero, "ttft_ms"].isna().all()


def test_replay_takes_simulates_sample_and_rate_scale(tmp_path):
    rc, req, _ = replay(tmp_path, "s", "--sample", "12", "--seed", "3", "--rate-scale", "2")
    assert rc == 0
    wl = simulate_workload("--sample", "12", "--seed", "3", "--rate-scale", "2")
    assert list(req["request_id"]) == list(wl.requests["request_id"])  # the same random 12 as simulate's
    summ = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summ["config"]["workload"]["requests_sha256"] == workload_sha256(wl)
    rate2 = wl.requests["arrival_s"].to_numpy()
    assert np.allclose(rate2 * 2, simulate_workload("--sample", "12", "--seed", "3").requests["arrival_s"])


def test_old_time_scale_still_works_and_both_are_refused(tmp_path, capsys):
    rc, req, _ = replay(tmp_path, "t", "--limit", "3", "--time-scale", "0.5")
    assert rc == 0 and len(req) == 3
    rc, _, _ = replay(tmp_path, "u", "--time-scale", "0.5", "--rate-scale", "2")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: give --rate-scale K (simulate's flag) or the deprecated --time-scale 1/K, not both"]


def simulated(tmp_path, name, model, trace):
    from simulator.apps.cli import main as simulate_main

    out = tmp_path / name
    assert simulate_main(["--trace", trace, "--model", model, "--hardware", "h100", "--gpus", "1",
                          "--out", str(out)]) == 0
    return out


def test_compare_refuses_another_model_or_trace(tmp_path, capsys):
    rc, _, _ = replay(tmp_path, "rep", "--sample", "10")
    assert rc == 0
    same = simulated(tmp_path, "same", "llama-3.1-8b", TRACE)
    other_model = simulated(tmp_path, "m", "qwen3-32b", TRACE)
    other_trace = simulated(tmp_path, "t", "llama-3.1-8b", "synthetic:gamma?rate=5&n=10&input=64&output=8")
    capsys.readouterr()
    for sim, words in ((other_model, "different models: 'meta-llama/Llama-3.1-8B-Instruct' measured, "
                                     "'qwen3-32b' simulated"), (other_trace, "different traces: burstgpt.csv")):
        assert compare_main([str(tmp_path / "rep"), str(sim)]) == 2  # was: 0 and a full table
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and words in err[0] and "--force" in err[0]
    assert compare_main([str(tmp_path / "rep"), str(other_model), "--force", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "warning: different models" in out.err and json.loads(out.out)["mismatch"]
    # the same model (preset vs its HF id) and trace file, another sample: compared, with a warning
    assert compare_main([str(tmp_path / "rep"), str(same)]) == 0
    assert "the same trace with other transforms" in capsys.readouterr().err
