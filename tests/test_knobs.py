"""One definition per shared knob (perfmodel/knobs.py): perfmodel, the simulator and the kernels read
the same Shift threshold, SiDP hysteresis and KV block, and apply the same rule at the boundary."""
import inspect

import pytest

torch = pytest.importorskip("torch")

import kernels.engines  # noqa: E402
import kernels.shift  # noqa: E402
import kernels.sidp  # noqa: E402
import perfmodel.cli  # noqa: E402
import perfmodel.deploy  # noqa: E402
import perfmodel.estimate  # noqa: E402
import simulator.apps.cli  # noqa: E402
import simulator.policies.shift  # noqa: E402
from kernels.kvcache import TokenBatch, make_cache  # noqa: E402
from kernels.model import build_model  # noqa: E402
from perfmodel import knobs, sidp  # noqa: E402
from perfmodel.framework import DEFAULT_FRAMEWORK  # noqa: E402
from perfmodel.hardware import load_hardware  # noqa: E402
from perfmodel.modelspec import load_model  # noqa: E402
from simulator.engine.config import EngineConfig  # noqa: E402
from simulator.policies.shift import shift_plans  # noqa: E402
from simulator.policies.sidp.policy import sidp_plans  # noqa: E402

N = knobs.SIDP_HYSTERESIS_DECISIONS
THR = knobs.SHIFT_THRESHOLD_TOKENS
TINY = load_model("tiny")


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_every_layer_imports_the_shift_threshold_from_knobs():
    for mod in (kernels.shift, kernels.engines, perfmodel.deploy, perfmodel.estimate, perfmodel.cli,
                simulator.policies.shift, simulator.apps.cli):
        assert mod.SHIFT_THRESHOLD_TOKENS is knobs.SHIFT_THRESHOLD_TOKENS, mod.__name__
    assert not hasattr(kernels.shift, "THRESHOLD_TOKENS")  # the kernels' old 512 is gone
    assert THR == 256  # ArcticInference's documented value; every golden was made with it
    assert _default(kernels.shift.shift_step, "threshold") == THR
    assert _default(perfmodel.deploy.deployment, "threshold_tokens") == THR
    assert _default(perfmodel.estimate.estimate, "threshold_tokens") == THR
    assert perfmodel.cli.build_parser().parse_args(["estimate"]).threshold == THR


def test_shift_threshold_boundary_is_the_same_in_every_layer():
    """A step of exactly THR tokens runs the shift (TP) config, THR + 1 the base, everywhere."""
    spec, hw = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200")
    dep = perfmodel.deploy.deployment("shift", spec, hw, 8)
    assert dep.layout_for(THR) is dep.shift and dep.layout_for(THR + 1) is dep.base
    plan = shift_plans(policy="shift", layout=None, spec=spec, hw=hw, gpus=8, fw=DEFAULT_FRAMEWORK, policy_args={})[0]
    assert (plan.choose(THR), plan.choose(THR + 1)) == ("shift", "base")
    model = build_model(TINY, seed=0)  # the kernels' rule needs only a model to run each side
    for n, want in ((THR, "shift"), (THR + 1, "base")):
        b = TokenBatch((0,), (n,), torch.zeros(n, dtype=torch.long))
        assert kernels.shift.shift_step(model, model, make_cache(model), b)[1] == want


def test_every_layer_reads_the_sidp_hysteresis_from_knobs():
    assert kernels.sidp.SIDP_HYSTERESIS_DECISIONS is knobs.SIDP_HYSTERESIS_DECISIONS
    assert kernels.engines.SIDP_HYSTERESIS_DECISIONS is knobs.SIDP_HYSTERESIS_DECISIONS
    import simulator.policies.sidp.policy as sim_sidp
    assert sim_sidp.SIDP_HYSTERESIS_DECISIONS is knobs.SIDP_HYSTERESIS_DECISIONS  # the orchestrator's default
    assert sim_sidp.SIDP_B_STAR_CONTEXT_TOKENS is knobs.SIDP_B_STAR_CONTEXT_TOKENS
    orch = sidp_plans(policy="sidp", layout=None, spec=load_model("llama-3.1-70b"), hw=load_hardware("h200"), gpus=8,
                      fw=DEFAULT_FRAMEWORK, policy_args={})[0].modes["was"].orch
    assert orch.hysteresis == N
    assert _default(kernels.sidp.choose_mode, "hysteresis") == N
    assert _default(sidp.next_mode, "decisions") == N
    assert _default(kernels.sidp.choose_mode, "b_star") is inspect.Parameter.empty  # B* has no default


def _kernel_modes(rows):
    state, out = kernels.sidp.ModeState("was"), []
    for r in rows:
        state = kernels.sidp.choose_mode(state, r, b_star=4.0)  # B* = 4 rows: a test value
        out.append(state.mode)
    return out


def test_kernels_sidp_chooser_flips_after_exactly_n_contrary_decisions():
    below = [1.0] * N
    assert _kernel_modes(below[:-1]) == ["was"] * (N - 1)
    assert _kernel_modes(below)[-1] == "cas"
    # one agreeing decision in between restarts the count
    assert _kernel_modes(below[:-1] + [4.0] + below[:-1])[-1] == "was"
    assert _kernel_modes(below[:-1] + [4.0] + below)[-1] == "cas"


def test_simulator_and_kernels_switch_on_the_same_decision():
    """The simulator's orchestrator (every replica deciding in turn) and the kernels' chooser, fed
    the same mean rows per replica, flip on the same decision: the N-th contrary one."""
    spec, hw = load_model("llama-3.1-70b"), load_hardware("h200")
    plans = sidp_plans(policy="sidp", layout=None, spec=spec, hw=hw, gpus=8, fw=DEFAULT_FRAMEWORK,
                       policy_args={"b_star": "4"})  # B* = 4: a test value
    d = len(plans)
    tokens = [4] * d + [0] * (N + 2)  # every replica at B* (WaS), then decisions that empty replica 0
    sim = [plans[i % d if i < d else 0].choose(t) for i, t in enumerate(tokens)]
    rows = [min(i + 1, d) * 4 / d for i in range(d)] + [(d - 1) * 4 / d] * (N + 2)
    assert sim == _kernel_modes(rows)
    assert sim.index("cas") == d + N - 1


def test_kv_block_is_the_same_in_every_layer():
    assert _default(make_cache, "block_tokens") == knobs.KV_BLOCK_TOKENS
    args = simulator.apps.cli.build_parser().parse_args(["--trace", "x.csv"])  # the CLI's run, vLLM by default
    assert simulator.apps.cli.run_spec("tp", args).engine.block_size == knobs.KV_BLOCK_TOKENS
    assert EngineConfig().block_size == knobs.KV_BLOCK_TOKENS
