"""Disaggregated prefill/decode (issue 18 item 4): perfmodel.disagg's KV transfer by hand, the simulated
pools (every request completes, TTFT covers prefill + transfer, decode-side backpressure), bad pool syntax,
the closed form against the simulator at low load, determinism."""
import numpy as np
import pandas as pd
import pytest

from perfmodel import disagg
from perfmodel.deploy import Deployment
from perfmodel.estimate import estimate, ttft_s
from perfmodel.framework import DEFAULT_FRAMEWORK, vllm_default_limits
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.memory import plan
from perfmodel.modelspec import load_model
from simulator import load_trace, run
from simulator.apps.cli import main
from simulator.apps.cli_items import compare_items
from simulator.engine.loop import Engine
from simulator.run import RunSpec

H100 = load_hardware("h100")
L8B = load_model("llama-3.1-8b", weights="bf16", kv="bf16")
SMALL = dict(model="llama-3.1-8b", hardware="h100", weights="bf16", profile="none")
TP1, TP2, TP4 = ParallelLayout(tp=1), ParallelLayout(tp=2), ParallelLayout(tp=4)


def _pools(p, d):
    return (("prefill", p), ("decode", d))


# ---- perfmodel.disagg: the transfer by hand -------------------------------------------------------

def test_kv_transfer_bytes_and_time_by_hand():
    per_token = 2 * 32 * 8 * 128 * 2  # K and V x 32 layers x 8 KV heads x head dim 128 x 2 B (bf16)
    assert per_token == 131_072
    nbytes = 1000 * per_token  # 131,072,000 B for a 1,000-token prompt, whatever the prefill layout
    for p, d in ((TP1, TP1), (TP2, TP4), (TP4, TP1)):
        assert disagg.kv_transfer_bytes(L8B, 1000, p, d) == nbytes
    # decode tp=16 > 8 KV heads: every head on 2 GPUs, each needs its copy
    assert disagg.kv_transfer_bytes(L8B, 1000, TP1, ParallelLayout(tp=16)) == 2 * nbytes
    # one node: NVLink 450 GB/s per GPU per direction (h100 preset), 2 us; min(P, D) GPUs in parallel
    assert disagg.kv_transfer_time_s(L8B, 1000, TP1, TP1, H100, False) == pytest.approx(nbytes / 450e9 + 2e-6)
    assert disagg.kv_transfer_time_s(L8B, 1000, TP2, TP4, H100, False) == pytest.approx(nbytes / (2 * 450e9) + 2e-6)
    assert nbytes / 450e9 + 2e-6 == pytest.approx(293.27e-6, abs=1e-8)
    # across nodes: one 50 GB/s NDR NIC per GPU (h100 preset), 5 us
    assert disagg.kv_transfer_time_s(L8B, 1000, TP1, TP1, H100, True) == pytest.approx(nbytes / 50e9 + 5e-6)
    assert disagg.kv_transfer_time_s(L8B, 1000, TP4, TP2, H100, True) == pytest.approx(nbytes / 100e9 + 5e-6)
    with pytest.raises(LayoutError, match="no inter-node network"):
        disagg.kv_transfer_time_s(L8B, 1000, TP1, TP1, load_hardware("a10"), True)


def test_placement_node_major_prefill_first():
    p, d = disagg.parse_pool("2x(tp=4)"), disagg.parse_pool("1x(tp=8)")
    pg, dg = disagg.placement(p, d, H100, 16)
    assert pg == [tuple(range(4)), tuple(range(4, 8))] and dg == [tuple(range(8, 16))]
    assert not disagg.cross_node(pg[0], pg[1], H100) and disagg.cross_node(pg[1], dg[0], H100)
    with pytest.raises(LayoutError, match="straddles"):
        disagg.placement(disagg.parse_pool("3x(tp=2)"), disagg.parse_pool("1x(tp=4)"), H100, 16)
    with pytest.raises(LayoutError, match="no inter-node network"):
        disagg.pools_from_args(L8B, load_hardware("a10"), 16, DEFAULT_FRAMEWORK, "8x(tp=1)", "1x(tp=1)")


def test_pools_on_two_nodes_hand_over_through_the_nics():
    wl = load_trace("synthetic:poisson?n=30&rate=2&input=1000&output=20&seed=1")
    req = run(wl, RunSpec(policy="disagg", gpus=16, nodes=2, policy_args=_pools("8x(tp=1)", "1x(tp=1)"), **SMALL)).requests
    assert (req["status"] == "completed").all()
    np.testing.assert_allclose(req["kv_transfer_ms"], 1e3 * (1000 * 131_072 / 50e9 + 5e-6), rtol=1e-9)


# ---- syntax ---------------------------------------------------------------------------------------

def test_pool_syntax():
    assert disagg.parse_pool("2x(tp=4)") == disagg.Pool(2, TP4)
    assert disagg.parse_pool("1x(tp=2;pp=2)") == disagg.parse_pool("1 x (tp=2,pp=2)") == \
        disagg.Pool(1, ParallelLayout(tp=2, pp=2))
    assert disagg.parse_pool("tp=8") == disagg.Pool(1, ParallelLayout(tp=8))
    assert disagg.parse_pool("2xtp=4") == disagg.parse_pool("2*(tp=4)") == disagg.Pool(2, TP4)
    assert compare_items("tp,disagg:prefill=2x(tp=2,pp=2),decode=1x(tp=4)") == [
        ("tp", None, ()), ("disagg", None, (("prefill", "2x(tp=2,pp=2)"), ("decode", "1x(tp=4)")))]
    assert disagg.parse_pool("1x(dp=16,ep=16)").engines == 16  # attention DP: one engine per DP rank
    for bad in ("2x(tp=4", "2y(tp=4)", "x(tp=4)", "2x()", "2x(tq=4)", "0x(tp=4)", "2x(dp=2,ep=3)"):
        with pytest.raises(LayoutError) as e:
            disagg.parse_pool(bad, "prefill")
        assert str(e.value).startswith(f"prefill={bad!r}: ") and "\n" not in str(e.value), bad


@pytest.mark.parametrize("args, says", [
    (["--policy-arg", "prefill=2x(tp=4"], "expected N x (layout)"),
    (["--policy-arg", "prefill=2x(tp=1)", "--policy-arg", "decode=1x(tp=2)"], "need 2 (prefill 2x(tp=1)) + 2"),
    (["--policy-arg", "prefil=1x(tp=1)"], "unknown policy argument 'prefil'"),
])
def test_bad_pools_one_error_line(capsys, args, says):
    argv = ["--model", "llama-3.1-8b", "--hardware", "h100", "--profile", "none", "--gpus", "3",
            "--trace", "synthetic:poisson?n=5&rate=4&input=128&output=8", "--policy", "disagg", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and says in err and "\n" not in err, err


# ---- the simulated pools --------------------------------------------------------------------------

def test_every_request_completes_and_ttft_covers_prefill_and_transfer():
    wl = load_trace("synthetic:poisson?n=150&rate=8&input=64-3000&output=0-300&seed=4")
    r = run(wl, RunSpec(policy="disagg", gpus=4, policy_args=_pools("2x(tp=1)", "1x(tp=2)"), **SMALL))
    req, s = r.requests, r.summary
    assert s["completed"] == len(wl) and s["rejected"] == 0
    assert s["total_output_tokens"] == int(wl.requests["output_tokens"].sum())
    assert set(req["prefill_engine"]) == {0, 1} and set(req.loc[req.output_tokens > 1, "engine"]) == {2}
    dec = req[req.output_tokens > 1]
    want = [disagg.kv_transfer_time_s(L8B, int(n), TP1, TP2, H100, False) for n in dec.input_tokens]
    np.testing.assert_allclose(dec["kv_transfer_ms"], 1e3 * np.array(want), rtol=1e-9)
    dep = Deployment("disagg", TP1, plan(L8B, TP1, H100))
    lim = vllm_default_limits(H100)
    alone = np.array([ttft_s(dep, L8B, H100, int(n), lim) for n in dec.input_tokens])  # the prompt alone
    assert (dec["ttft_ms"].to_numpy() >= 1e3 * alone + dec["kv_transfer_ms"].to_numpy() - 1e-6).all()
    assert req.loc[req.output_tokens <= 1, "kv_transfer_ms"].isna().all()  # ends at its prefill


def test_backpressure_decode_kv_full_requests_wait_none_dropped(monkeypatch):
    holds = []
    real_hold = Engine.hold
    monkeypatch.setattr(Engine, "hold", lambda self, *a, **k: (holds.append(self.index), real_hold(self, *a, **k)))
    wl = load_trace("synthetic:poisson?n=80&rate=40&input=2000&output=300&seed=1")
    # 26 GB per GPU: one tp=1 instance holds 44,544 tokens, 19 requests of 2,300 (decode reserves them whole)
    r = run(wl, RunSpec(policy="disagg", gpus=2, hbm_gb=26, policy_args=_pools("1x(tp=1)", "1x(tp=1)"), **SMALL))
    req, s, steps = r.requests, r.summary, r.steps
    cap = {e["index"]: e["kv_capacity_tokens"] for e in r.result.engines}
    assert cap[1] < 20 * 2300
    assert s["completed"] == 80 and s["rejected"] == 0 and s["total_output_tokens"] == 80 * 300
    assert (req["kv_wait_ms"] > 0).sum() > 20  # they waited for decode KV, holding theirs on the prefill side
    assert holds and set(holds) == {0}  # the prefill instance stalled while its KV was parked
    dec = steps[steps["engine"] == 1]
    assert dec["kv_used_tokens"].max() <= cap[1] and dec["decode_seqs"].max() <= cap[1] // 2300


def test_rejects_what_no_decode_instance_holds():
    wl = load_trace("synthetic:poisson?n=3&rate=1&input=60000&output=100&seed=1")
    r = run(wl, RunSpec(policy="disagg", gpus=2, hbm_gb=26, policy_args=_pools("1x(tp=1)", "1x(tp=1)"), **SMALL))
    assert r.summary["rejected"] == 3
    assert r.requests["reject_reason"].str.startswith("disagg: longer than a ").all()


def test_closed_form_agrees_with_the_simulator_at_low_load():
    wl = load_trace("synthetic:poisson?n=6&rate=0.05&input=1000&output=100&seed=2")  # 20 s apart: alone
    pools = _pools("1x(tp=1)", "1x(tp=2)")
    req = run(wl, RunSpec(policy="disagg", gpus=3, policy_args=pools, **SMALL)).requests
    row = disagg.estimate_row(L8B, H100, 3, 1000, 100, None, DEFAULT_FRAMEWORK, vllm_default_limits(H100),
                              L8B.max_model_len, "1x(tp=1)", "1x(tp=2)")
    assert req["ttft_ms"].median() == pytest.approx(row["ttft_ms"], rel=0.05)
    assert req["tpot_ms"].median() == pytest.approx(row["tpot_ms"], rel=0.05)
    est = estimate("disagg", L8B, H100, 2, 1000, 100)  # perfmodel estimate's row, default pools
    assert est["layout"] == "prefill 1x(tp=1) / decode 1x(tp=1)" and est["ttft_ms"] > 0 and est["tpot_ms"] > 0


def test_same_seed_same_output():
    wl = load_trace("synthetic:gamma?rate=12&burstiness=0.5&n=120&input=64-2048&output=1-200&seed=7")
    spec = RunSpec(policy="disagg", gpus=4, **SMALL)
    a, b = run(wl, spec), run(wl, spec)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)


def test_fast_forward_same_as_step_by_step():
    from simulator.engine.config import EngineConfig

    wl = load_trace("synthetic:poisson?n=150&rate=30&input=64-4000&output=0-300&seed=5")
    a = run(wl, RunSpec(policy="disagg", gpus=4, **SMALL)).requests
    b = run(wl, RunSpec(policy="disagg", gpus=4, engine=EngineConfig(fast_forward=False), **SMALL)).requests
    # (first tokens leave at decode step boundaries, so they carry the same float sums as the finishes)
    np.testing.assert_allclose(a["first_token_s"], b["first_token_s"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(a["finish_s"], b["finish_s"], rtol=0, atol=1e-9)  # closed-form sums vs step sums
