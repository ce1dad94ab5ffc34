"""SiDP (SYSTEMS.md 3) in perfmodel.sidp and `--policy sidp` (issue #6 acceptance).

Llama-3.1-70B bf16 on 8 x H200: static DP needs TP=2 (4 replicas); SiDP runs 8 one-GPU replicas.
"""
import numpy as np
import pytest

from perfmodel import memory, sidp
from perfmodel.framework import DEFAULT_FRAMEWORK
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from simulator.policies_eval import run_summary, workload

MODEL = dict(model="llama-3.1-70b", weights="bf16")
SPEC, HW = load_model("llama-3.1-70b"), load_hardware("h200")
TAIL = "batch?n=12&input=1024&output=64-512&seed=3"  # fewer requests than 2 per replica: a tail


def _sidp(wl, frames=False, **args):
    return run_summary(wl, "sidp", policy_args=args, frames=frames, **MODEL)


def test_kv_capacity_gain_equals_memory_plan():
    wl = workload("batch?n=8&input=512&output=8")
    got = _sidp(wl)["kv_capacity_tokens"] / run_summary(wl, "dp", **MODEL)["kv_capacity_tokens"]
    want = (8 * memory.sidp_plan(SPEC, HW, 8).kv_capacity_tokens
            / (4 * memory.plan(SPEC, ParallelLayout(tp=2), HW).kv_capacity_tokens))
    assert got == pytest.approx(want, rel=1e-3) and got > 1.3  # engine rounds capacity to KV blocks


def test_was_regimes():
    cfg = sidp.SiDPConfig()
    f = sidp.fetch_s(SPEC, HW, cfg)
    L, R = SPEC.num_layers, SPEC.num_layers - sidp.owned_layers(SPEC, 8)
    over = DEFAULT_FRAMEWORK.step_overhead_s
    big, small = over + L * 10 * f, over + L * 0.1 * f  # per-layer compute 10 f and 0.1 f
    assert sidp.was_step_s(big, SPEC, HW, cfg) == pytest.approx(big + f)  # fetches hidden but the first
    assert sidp.was_step_s(small, SPEC, HW, cfg) == pytest.approx(over + (L - R) * 0.1 * f + R * f + f)
    one_slot = sidp.SiDPConfig(cache_slots=1)
    assert sidp.was_step_s(big, SPEC, HW, one_slot) == pytest.approx(big + R * f)  # no overlap
    assert sidp.fetch_s(SPEC, HW, sidp.SiDPConfig(peak_shifting=False)) == pytest.approx(7 * f, rel=1e-3)


def test_cas_variants_and_b_star():
    rows = np.array([4, 4, 0, 0, 0, 0, 0, 0])
    t = {v: sidp.cas_step_s(0.05, rows, 0, SPEC, HW, sidp.SiDPConfig(cas_variant=v)) for v in sidp.CAS_VARIANTS}
    assert t["v1"] > t["v2"] > t["v3"]
    cfg = sidp.SiDPConfig()
    assert sidp.b_star(SPEC, HW, cfg, ctx=4096) < sidp.b_star(SPEC, HW, cfg, ctx=1024)  # attention helps hide


@pytest.fixture(scope="module")
def offline():
    """A long-context offline job: 4K-token prompts, all at t=0, more requests than fit at once."""
    return workload("batch?n=600&input=4096&output=16-496&seed=0")


def test_tail_switches_to_cas_with_mode_timeline(offline):
    s, _, steps = _sidp(offline, frames=True)
    assert s["mode_switches"] >= 1 and set(s["time_in_mode_s"]) == {"was", "cas"}
    first, last = steps.sort_values("start_s")["mode"].iloc[[0, -1]]
    assert (first, last) == ("was", "cas")


def test_ablation_ordering_on_the_tail():
    """SiDP paper: FSDP-style 33 s > CaS v1 25 s > v2 19 s > v3 12 s on the same tail workload."""
    wl = workload(TAIL)
    dur = {"fsdp": _sidp(wl, mode="fsdp")["duration"]}
    for v in ("v1", "v2", "v3"):
        dur[v] = _sidp(wl, mode="cas", cas=v)["duration"]
    assert dur["fsdp"] > dur["v1"] > dur["v2"] > dur["v3"], dur


def test_peak_shifting_on_beats_off_at_dp8():
    wl = workload("batch?n=200&input=4096&output=16&seed=1")
    on = _sidp(wl, mode="was")["total_token_throughput"]
    off = _sidp(wl, mode="was", peak_shifting="off")["total_token_throughput"]
    assert on > 1.2 * off


@pytest.mark.xfail(strict=True, reason="perf model: SiDP's decode-only steps (KV-bound, ~60 seqs per replica) "
                   "are fetch-bound in WaS (3.1 ms/layer over NVLink vs ~0.6 ms compute) and owner-serialised "
                   "in CaS, so the 4K offline job runs at ~0.7x of the best static (DP2xTP4); see docs/policies.md")
def test_long_context_offline_beats_best_static(offline):
    best = max(run_summary(offline, "layout", layout=f"tp={t}", **MODEL)["total_token_throughput"] for t in (2, 4, 8))
    assert _sidp(offline)["total_token_throughput"] > best
