"""SiDP (SYSTEMS.md 3) in perfmodel.sidp and `--policy sidp` (issue #6 acceptance).

Llama-3.1-70B bf16 on 8 x H200: static DP needs TP=2 (4 replicas); SiDP defaults to the same
configuration (4 replicas of TP=2, the paper's "under the same configurations"), dp=8 x tp=1 on request.
"""
import functools
import numpy as np
import pytest

from perfmodel import memory, sidp
from perfmodel.batch import decode_batch
from perfmodel.cost import step_cost
from perfmodel.framework import DEFAULT_FRAMEWORK
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import load_model
from simulator import run as sim_run
from simulator.run import workload

run_summary = functools.partial(sim_run.run_summary, profile="none")  # datasheet roofline, as docs/policies.md

MODEL = dict(model="llama-3.1-70b", weights="bf16")
SPEC, HW = load_model("llama-3.1-70b"), load_hardware("h200")
TAIL = "batch?n=12&input=1024&output=64-512&seed=3"  # 3 requests per replica: a tail


def _sidp(wl, frames=False, **args):
    return run_summary(wl, "sidp", policy_args=args, frames=frames, **MODEL)


def test_kv_capacity_gain_equals_memory_plan():
    wl = workload("batch?n=8&input=512&output=8")
    static = 4 * memory.plan(SPEC, ParallelLayout(tp=2), HW).kv_capacity_tokens
    assert run_summary(wl, "dp", **MODEL)["kv_capacity_tokens"] == pytest.approx(static, rel=1e-3)
    for args, dp, tp in (({}, 4, 2), ({"tp": 1}, 8, 1)):
        got = _sidp(wl, **args)["kv_capacity_tokens"] / static
        want = dp * memory.sidp_plan(SPEC, HW, dp, tp).kv_capacity_tokens / static
        assert got == pytest.approx(want, rel=1e-3), args  # engine rounds capacity to KV blocks
    # the paper: "up to 1.8x" usable KV under the same configuration (DP4 x TP2 here)
    assert 1.3 < _sidp(wl)["kv_capacity_tokens"] / static < 1.8


def test_default_layout_is_the_static_dp_one_or_the_smallest_sidp_that_fits():
    """70B bf16: the static DP deployment's 4 x TP2. 405B bf16 needs TP8 statically (one replica),
    so SiDP takes the smallest TP whose shared-FFN plan fits with two or more replicas: 2 x TP4."""
    from perfmodel.deploy import deployment
    from simulator.policies.sidp.policy import sidp_plans

    fw = DEFAULT_FRAMEWORK
    plans = sidp_plans(policy="sidp", layout=None, spec=SPEC, hw=HW, gpus=8, fw=fw, policy_args={})
    assert len(plans) == 4 and all(len(p.gpus) == 2 for p in plans)
    big = load_model("llama-3.1-405b", weights="bf16")
    with pytest.raises(LayoutError, match="needs tp=8 per replica"):  # one replica: static DP refuses
        deployment("dp", big, HW, 8, fw)
    assert not memory.plan(big, ParallelLayout(tp=4), HW, fw).fits
    plans = sidp_plans(policy="sidp", layout=None, spec=big, hw=HW, gpus=8, fw=fw, policy_args={})
    assert len(plans) == 2 and all(len(p.gpus) == 4 and p.kv_capacity_tokens > 0 for p in plans)


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
    for cfg in (sidp.SiDPConfig(), sidp.SiDPConfig(dp=4, tp=2)):
        assert sidp.b_star(SPEC, HW, cfg, ctx=4096) < sidp.b_star(SPEC, HW, cfg, ctx=1024)  # attention helps
        assert sidp.hide_batch(SPEC, HW, cfg, ctx=4096) < sidp.hide_batch(SPEC, HW, cfg, ctx=1024)


def test_staggered_cas_what_if_costs_the_local_step_plus_round_trips():
    """The what-if CaS (owners concurrent, no fusion): local step + 2 sends per remote layer, which
    undercuts lockstep CaS once the fused GEMM is compute-bound and never beats the local step."""
    cfg, lock = sidp.SiDPConfig(dp=4, tp=2, cas_variant="staggered"), sidp.SiDPConfig(dp=4, tp=2)
    rows, local = np.full(4, 512.0), 0.1
    got = sidp.cas_step_s(local, rows, 1, SPEC, HW, cfg)
    remote = SPEC.num_layers - sidp.owned_layers(SPEC, 4, 1)
    assert remote == 60 and got > local
    msg = (got - local) / (2 * remote)
    assert 1e-6 < msg < 1e-3  # one send of 512 x 8192 x 2 B / 2 GPUs: microseconds, not the GEMM
    assert got < sidp.cas_step_s(local, rows, 1, SPEC, HW, lock)


def test_b_star_comes_from_the_profile_of_the_step_tables():
    """The orchestrator's B* is computed with the run's profile, the one the replicas' step times
    use (policies receive the profile like every other part)."""
    from perfmodel.calibration.profile import load_profile
    from perfmodel.knobs import SIDP_B_STAR_CONTEXT_TOKENS
    from simulator.policies.sidp.policy import sidp_plans

    cal, fw, cfg = load_profile("h200_sxm"), DEFAULT_FRAMEWORK, sidp.SiDPConfig(dp=4, tp=2)
    orch = sidp_plans(policy="sidp", layout=None, spec=SPEC, hw=HW, gpus=8, fw=fw, policy_args={},
                      prof=cal)[0].modes["was"].orch
    assert orch.b_star == sidp.b_star(SPEC, HW, cfg, SIDP_B_STAR_CONTEXT_TOKENS, prof=cal)
    datasheet = sidp_plans(policy="sidp", layout=None, spec=SPEC, hw=HW, gpus=8, fw=fw,
                           policy_args={})[0].modes["was"].orch
    assert datasheet.b_star == sidp.b_star(SPEC, HW, cfg, SIDP_B_STAR_CONTEXT_TOKENS) != orch.b_star


@pytest.mark.parametrize("dp,tp", [(8, 1), (4, 2), (2, 4)])
def test_b_star_is_the_was_cas_crossover(dp, tp):
    """B* is where WaS stops being slower than CaS (every replica at the batch): checked one row
    either side against the two step models, and it lies below the compute-hides-fetch point."""
    cfg, ctx = sidp.SiDPConfig(dp=dp, tp=tp), 2048

    def was_minus_cas(b):
        local = float(step_cost(SPEC, ParallelLayout(tp=tp), HW, decode_batch(np.array([float(b)]), ctx)).total_s[0])
        return float(sidp.was_step_s(local, SPEC, HW, cfg)) - sidp.cas_step_s(local, np.full(dp, float(b)), 0, SPEC, HW, cfg)

    b = sidp.b_star(SPEC, HW, cfg, ctx=ctx)
    assert was_minus_cas(b) <= 0 < was_minus_cas(b - 1)
    assert 1 < b < sidp.hide_batch(SPEC, HW, cfg, ctx=ctx)


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
    on = _sidp(wl, mode="was", tp=1)["total_token_throughput"]
    off = _sidp(wl, mode="was", tp=1, peak_shifting="off")["total_token_throughput"]
    assert on > 1.2 * off


@pytest.mark.xfail(strict=True, reason="perf model: SiDP 4 x TP2 holds 2.55M KV tokens, 1.64x the same "
                   "configuration but only 1.06x DP2 x TP4 (2.41M; TP8 2.85M), and a WaS step cannot cost less "
                   "than its NVLink fetch (94 ms): 0.96x of the best static at 4K prompts, 0.92x at 1K; only the "
                   "ideal what-if CaS (cas=staggered) reaches 1.01x / 1.00x; see docs/policies.md")
@pytest.mark.parametrize("prompt,floor", [(4096, 1.0), (1024, 0.95)])
def test_offline_throughput_vs_best_static(prompt, floor):
    """Issue #6: on a long-context offline job SiDP beats the best DP x TP layout (4K prompts) and is
    within 5% of it at 1K prompts. 3000 requests at t=0: each replica turns its KV over many times,
    so the run is the steady state of an offline job, not one admission wave."""
    wl = workload(f"batch?n=3000&input={prompt}&output=16-496&seed=0")
    best = max(run_summary(wl, "layout", layout=f"tp={t}", **MODEL)["total_token_throughput"] for t in (2, 4, 8))
    assert _sidp(wl)["total_token_throughput"] > floor * best
