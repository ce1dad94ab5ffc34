"""SiDP policy (`--policy sidp`): D DP engines sharing FFN weights, WaS <-> CaS by an orchestrator.

Each engine is one replica (tp GPUs). Its step time is the local step (a StepTable of the replica's
layout, as if it held every weight) passed through perfmodel.sidp: WaS adds the exposed weight
fetches, CaS swaps its own FFN for the owners' fused GEMMs and activation round trips (using every
replica's rows of the moment), FSDP adds blocking all-gathers. One Orchestrator shared by the D
engines picks the mode globally from the effective batch (mean FFN rows per replica, idle replicas
counting 0) against B*, switching only after the other side has won `hysteresis` decisions running.
KV capacity per replica: perfmodel.memory.sidp_plan (W_attn + W_ffn/D + cache slots).
"""
from __future__ import annotations

from perfmodel import sidp
from perfmodel.estimate import SIDP_CACHE_SLOTS, sidp_default_tp
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.knobs import SIDP_B_STAR_CONTEXT_TOKENS, SIDP_HYSTERESIS_DECISIONS
from perfmodel.memory import sidp_plan

from simulator.policies.base import EnginePlan, parse_args

from .orchestrator import Orchestrator, SiDPMode

MODES = ("auto", "was", "cas", "fsdp")


def _flag(v: str) -> bool:
    if str(v).lower() in ("1", "true", "on", "yes"):
        return True
    if str(v).lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"{v!r} is not on/off")


_flag.__name__ = "on/off flag"


ARGS = {"mode": str, "dp": int, "tp": int, "slots": int, "window": int, "peak_shifting": _flag,
        "cas": str, "b_star": int, "b_star_rule": str, "hysteresis": int, "ctx": int}
B_STAR_RULES = {"crossover": sidp.b_star, "hide": sidp.hide_batch}


def sidp_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """SiDP over `gpus` GPUs (SYSTEMS.md 3). Arguments: mode (auto | was | cas | fsdp; auto switches
    on B*), tp (GPUs per replica; default perfmodel.estimate.sidp_default_tp: the static DP deployment's), dp (replicas,
    default gpus // tp), slots (weight cache slots, 2), window (look-ahead layers, 1), peak_shifting
    (on), cas (v1 | v2 | v3: +fusion, +dummy skipping; v3; or the what-if `staggered`, see
    perfmodel.sidp.cas_step_s), b_star (rows; default by b_star_rule at `ctx` tokens of context,
    1024, with the replicas' profile), b_star_rule (crossover: where WaS stops being slower than
    CaS, perfmodel.sidp.b_star, the default; hide: where compute hides the fetch, SYSTEMS.md's
    wording, perfmodel.sidp.hide_batch), hysteresis (decisions, 16)."""
    a = parse_args(policy_args, ARGS)
    mode = a.get("mode", "auto")
    if mode not in MODES:
        raise ValueError(f"policy argument mode={mode!r}: one of {', '.join(MODES)}")
    note = ""
    if layout:  # (a replica is tp GPUs: any other axis would be dropped without a word; 2026-12-03 QA)
        extra = [k for k in ("pp", "sp", "ep") if getattr(ParallelLayout.parse(layout), k) > 1]
        if extra:
            raise LayoutError(f"sidp: --layout {layout}: a SiDP replica is tp GPUs only, no {', '.join(extra)} "
                              f"(--layout tp=N or --policy-arg tp=N)")
    if "tp" in a:
        tp = a["tp"]
    elif layout and "tp=" in layout:
        tp = int(layout.partition("tp=")[2].split(",")[0])
        note = f"sidp: --layout {layout} read for its tp only (tp={tp} per replica)"
    else:
        tp = sidp_default_tp(spec, hw, gpus, fw, a.get("slots", SIDP_CACHE_SLOTS))
        note = (f"sidp: default tp={tp} per replica (the static DP deployment's, or the smallest SiDP fit with 2+ "
                "replicas); --policy-arg tp=... sets it")
    rule = a.get("b_star_rule", "crossover")
    if rule not in B_STAR_RULES:
        raise ValueError(f"policy argument b_star_rule={rule!r}: one of {', '.join(B_STAR_RULES)}")
    dp = a.get("dp", gpus // tp)
    if dp * tp > gpus:
        raise LayoutError(f"SiDP dp={dp} x tp={tp} needs {dp * tp} GPUs but only {gpus} are given")
    ParallelLayout(tp=tp).validate(spec)
    cfg = sidp.SiDPConfig(dp=dp, tp=tp, cache_slots=a.get("slots", 2), window=a.get("window", 1),
                          peak_shifting=a.get("peak_shifting", True), cas_variant=a.get("cas", "v3"))
    plan = sidp_plan(spec, hw, dp, tp, cfg.cache_slots, fw)
    if not plan.fits:
        raise LayoutError(f"{spec.name} does not fit SiDP dp={dp}, tp={tp} on {hw.name}: "
                          f"{(plan.weight_bytes_per_gpu + plan.extra_bytes_per_gpu) / 1e9:.1f} GB per GPU")
    b_star = a.get("b_star")
    if b_star is None and mode == "auto":  # from the run's profile: threshold and step times agree
        b_star = B_STAR_RULES[rule](spec, hw, cfg, a.get("ctx", SIDP_B_STAR_CONTEXT_TOKENS), prof=prof, fw=fw)
    orch = Orchestrator(dp, b_star, a.get("hysteresis", SIDP_HYSTERESIS_DECISIONS), None if mode == "auto" else mode)
    names = ("was", "cas") if mode == "auto" else (mode,)
    # each replica's engine registers with the orchestrator once built
    return [EnginePlan({m: SiDPMode(m, r, orch, cfg) for m in names}, lambda t, r=r: orch.decide(r, t),
                       plan.kv_capacity_tokens, tuple(range(r * tp, (r + 1) * tp)), note,
                       attach=lambda e, r=r: orch.attach(r, e))
            for r in range(dp)]
