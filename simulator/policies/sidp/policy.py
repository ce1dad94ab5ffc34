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

import dataclasses
from typing import Callable

import numpy as np

from perfmodel import sidp
from perfmodel.estimate import deployment
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.memory import sidp_plan

from simulator.policies.base import EnginePlan, parse_args

MODES = ("auto", "was", "cas", "fsdp")
HYSTERESIS_DECISIONS = 16  # not published (SYSTEMS.md: "with hysteresis"): two group steps of D = 8
#   replicas must agree before the mode flips, so one replica's completion cannot flap it


def _flag(v: str) -> bool:
    if str(v).lower() in ("1", "true", "on", "yes"):
        return True
    if str(v).lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"{v!r} is not on/off")


_flag.__name__ = "on/off flag"


class Orchestrator:
    """Global WaS/CaS decision over the D replicas (mutable simulation state, one per run)."""

    def __init__(self, dp: int, b_star: int | None, hysteresis: int, fixed: str | None, b_star_fn=None):
        self.rows = np.zeros(dp)  # FFN rows (tokens) of each replica's current or last step
        self.engines: list = [None] * dp
        self.b_star, self.hysteresis, self.fixed = b_star, hysteresis, fixed
        self._b_star_fn = b_star_fn  # prof -> B*, used once the step tables (and their profile) exist
        self.mode = fixed or "was"
        self.last_mode = [self.mode] * dp  # the mode of each replica's current step or stretch
        self._streak = 0

    def profile_seen(self, prof) -> None:
        """Fix B* from the profile the replicas' step tables use (calibrated or datasheet), so the
        threshold and the step times come from the same numbers."""
        if self.b_star is None and not self.fixed:  # (a fixed mode never reads it)
            self.b_star = self._b_star_fn(prof)

    def attach(self, rank: int, engine) -> None:
        """Observe `engine`: its running batch, and its completions (which change the rows every
        other replica's CaS steps are charged for, so their decode stretches are re-planned)."""
        self.engines[rank] = engine
        inner = engine.on_finish

        def on_finish(pos):
            inner(pos)
            self._replan(lambda r: r != rank and self.last_mode[r] == "cas")
        engine.on_finish = on_finish

    def _replan(self, which) -> None:
        """End the decode stretches of the selected replicas after their step in progress (the
        engine's own mechanism for arrivals: an interrupt while a stretch may be cut short)."""
        for r, e in enumerate(self.engines):
            if e is not None and which(r) and e._stretch is not None:
                e.proc.interrupt()

    def current_rows(self) -> np.ndarray:
        """Rows per replica, 0 for replicas that are idle now."""
        idle = [e is not None and len(e.run) == 0 for e in self.engines]
        return np.where(idle, 0.0, self.rows)

    def decide(self, rank: int, tokens: int) -> str:
        self.rows[rank] = tokens
        if self.fixed:
            self.last_mode[rank] = self.fixed
            return self.fixed
        want = "was" if self.current_rows().mean() >= self.b_star else "cas"
        self._streak = self._streak + 1 if want != self.mode else 0
        if self._streak >= self.hysteresis:
            self.mode, self._streak = want, 0
            self._replan(lambda r: r != rank)  # a global switch reaches every replica's next step
        self.last_mode[rank] = self.mode
        return self.mode

    def service_rows(self, rank: int, tokens: int, stretch: bool) -> np.ndarray:
        """FFN rows the owners serve in a CaS group step: this replica's tokens; for a single step
        the others' current steps, for a decode stretch (and for replicas inside one) their running
        sequences (a neighbour's prefill is one step, not charged to a whole stretch)."""
        rows = self.current_rows()
        for r, e in enumerate(self.engines):
            if e is not None and (stretch or e._stretch is not None):
                rows[r] = float(len(e.run))
        rows[rank] = tokens
        return rows

    def context_tokens(self, rank: int, n: int) -> float:
        """Keys the next decode step of `rank` reads (its running contexts + the new tokens)."""
        e = self.engines[rank]
        return float(e.run.computed.sum() + n) if e is not None else 0.0


class SiDPStep:
    """Step-time object of one replica in one mode: time_s(*agg) and decode_affine(n), as StepTable."""

    def __init__(self, mode: str, rank: int, orch: Orchestrator, local, cfg: sidp.SiDPConfig):
        self.mode, self.rank, self.orch, self.local, self.cfg = mode, rank, orch, local, cfg
        self.spec, self.hw, self.prof, self.fw = local.spec, local.hw, local.prof, local.fw
        self._cas: dict = {}

    def _time(self, local_s: float, tokens: int, stretch: bool = False) -> float:
        if self.mode == "was":
            return float(sidp.was_step_s(local_s, self.spec, self.hw, self.cfg, self.rank, self.prof, self.fw))
        if self.mode == "fsdp":
            return float(sidp.fsdp_step_s(local_s, self.spec, self.hw, self.cfg, self.prof))
        rows = self.orch.service_rows(self.rank, tokens, stretch)
        key = tuple(rows.tolist())  # the group's FFN service depends only on the rows: memoised
        if key not in self._cas:
            self._cas[key] = sidp.cas_step_s(1.0, rows, self.rank, self.spec, self.hw, self.cfg, self.prof) - 1.0
        return local_s + self._cas[key] if local_s > 0 else 0.0

    def time_s(self, pt=0, ps=0, pairs=0.0, pkv=0.0, dn=0, dkv=0.0) -> float:
        return self._time(self.local.time_s(pt, ps, pairs, pkv, dn, dkv), pt + dn)

    def decode_affine(self, n: int) -> tuple[float, float]:
        """CaS and FSDP add a context-independent term (exact); WaS is max(compute, fetch) per layer,
        linearised over the first step of the stretch from its actual context (exact while the
        stretch stays on one side of the compute = fetch point)."""
        c0, c1 = self.local.decode_affine(n)
        k0 = self.orch.context_tokens(self.rank, n)
        t0, t1 = self._time(c0 + c1 * k0, n, True), self._time(c0 + c1 * (k0 + n), n, True)
        slope = (t1 - t0) / n
        return t0 - slope * k0, slope


@dataclasses.dataclass(frozen=True)
class SiDPMode:
    """A mode entry of an EnginePlan: called with the cluster's table(layout) -> SiDPStep."""

    mode: str
    rank: int
    orch: Orchestrator
    cfg: sidp.SiDPConfig

    def __call__(self, table_fn) -> SiDPStep:
        step = SiDPStep(self.mode, self.rank, self.orch, table_fn(ParallelLayout(tp=self.cfg.tp)), self.cfg)
        self.orch.profile_seen(step.prof)
        return step

    def __str__(self) -> str:
        return f"sidp {self.mode} (dp={self.cfg.dp}, tp={self.cfg.tp})"


@dataclasses.dataclass(frozen=True)
class SiDPPlan(EnginePlan):
    """An EnginePlan whose engine registers with the orchestrator once built."""

    attach: Callable | None = None


ARGS = {"mode": str, "dp": int, "tp": int, "slots": int, "window": int, "peak_shifting": _flag,
        "cas": str, "b_star": int, "b_star_rule": str, "hysteresis": int, "ctx": int}
B_STAR_RULES = {"crossover": sidp.b_star, "hide": sidp.hide_batch}


def _default_tp(spec, hw, gpus: int, fw, slots: int) -> int:
    """The static DP deployment's TP (the SiDP paper compares "under the same configurations");
    where that leaves fewer than two replicas, or nothing static fits, the smallest TP whose SiDP
    plan fits with at least two replicas: sharing the FFN is what lets it fit (405B bf16 on
    8 x H200: static DP needs TP8, SiDP runs 2 x TP4)."""
    try:
        tp = deployment("dp", spec, hw, gpus, fw).base.tp
        if gpus // tp >= 2:
            return tp
    except LayoutError:
        pass
    for t in (t for t in range(1, gpus // 2 + 1) if gpus % t == 0):
        try:
            ParallelLayout(tp=t).validate(spec)
        except LayoutError:
            continue
        if sidp_plan(spec, hw, gpus // t, t, slots, fw).fits:
            return t
    raise LayoutError(f"{spec.name} fits no SiDP layout of two or more replicas on {gpus} x {hw.name}")


def sidp_plans(policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """SiDP over `gpus` GPUs (SYSTEMS.md 3). Arguments: mode (auto | was | cas | fsdp; auto switches
    on B*), tp (GPUs per replica; default _default_tp: the static DP deployment's), dp (replicas,
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
    if "tp" in a:
        tp = a["tp"]
    elif layout and "tp=" in layout:
        tp = int(layout.partition("tp=")[2].split(",")[0])
    else:
        tp = _default_tp(spec, hw, gpus, fw, a.get("slots", 2))
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
    ctx = a.get("ctx", 1024)
    orch = Orchestrator(dp, a.get("b_star"), a.get("hysteresis", HYSTERESIS_DECISIONS), None if mode == "auto" else mode,
                        lambda prof: B_STAR_RULES[rule](spec, hw, cfg, ctx, prof=prof, fw=fw))
    names = ("was", "cas") if mode == "auto" else (mode,)
    return [SiDPPlan({m: SiDPMode(m, r, orch, cfg) for m in names}, lambda t, r=r: orch.decide(r, t),
                     plan.kv_capacity_tokens, tuple(range(r * tp, (r + 1) * tp)),
                     attach=lambda e, r=r: orch.attach(r, e))
            for r in range(dp)]
