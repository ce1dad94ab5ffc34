"""SiDP's run-time parts: the Orchestrator (global WaS/CaS decision over the D replicas, with
hysteresis) and each replica's step-time object, which passes the local StepTable's time through
perfmodel.sidp (the policy computes no time itself). The orchestrator observes its engines only
through their public interface: finish hooks, cut_stretch, num_running, in_stretch, context_tokens.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from perfmodel import sidp
from perfmodel.layout import ParallelLayout


class Orchestrator:
    """Global WaS/CaS decision over the D replicas (mutable simulation state, one per run)."""

    def __init__(self, dp: int, b_star: int | None, hysteresis: int, fixed: str | None):
        self.rows = np.zeros(dp)  # FFN rows (tokens) of each replica's current or last step
        self.engines: list = [None] * dp
        self.b_star, self.hysteresis, self.fixed = b_star, hysteresis, fixed
        self.mode = fixed or "was"
        self.last_mode = [self.mode] * dp  # the mode of each replica's current step or stretch
        self.streak = 0  # decisions running the other side has won

    def attach(self, rank: int, engine) -> None:
        """Observe `engine`: its running batch, and its completions (which change the rows every
        other replica's CaS steps are charged for, so their decode stretches are re-planned)."""
        self.engines[rank] = engine
        engine.add_finish_hook(lambda pos: self._replan(lambda r: r != rank and self.last_mode[r] == "cas"))

    def _replan(self, which) -> None:
        """End the decode stretches of the selected replicas after their step in progress (the
        engine's own mechanism for arrivals; not at a boundary: a step ending now still runs on)."""
        for r, e in enumerate(self.engines):
            if e is not None and which(r):
                e.cut_stretch(at_boundary=False)

    def current_rows(self) -> np.ndarray:
        """Rows per replica, 0 for replicas that are idle now."""
        idle = [e is not None and e.num_running == 0 for e in self.engines]
        return np.where(idle, 0.0, self.rows)

    def decide(self, rank: int, tokens: int) -> str:
        self.rows[rank] = tokens
        if self.fixed:
            self.last_mode[rank] = self.fixed
            return self.fixed
        want = "was" if self.current_rows().mean() >= self.b_star else "cas"
        mode, self.streak = sidp.next_mode(self.mode, self.streak, want, self.hysteresis)  # shared with kernels
        if mode != self.mode:
            self.mode = mode
            self._replan(lambda r: r != rank)  # a global switch reaches every replica's next step
        self.last_mode[rank] = self.mode
        return self.mode

    def service_rows(self, rank: int, tokens: int, stretch: bool) -> np.ndarray:
        """FFN rows the owners serve in a CaS group step: this replica's tokens; for a single step
        the others' current steps, for a decode stretch (and for replicas inside one) their running
        sequences (a neighbour's prefill is one step, not charged to a whole stretch)."""
        rows = self.current_rows()
        for r, e in enumerate(self.engines):
            if e is not None and (stretch or e.in_stretch):
                rows[r] = float(e.num_running)
        rows[rank] = tokens
        return rows

    def context_tokens(self, rank: int, n: int) -> float:
        """Keys the next decode step of `rank` reads (its running contexts + the new tokens)."""
        e = self.engines[rank]
        return float(e.context_tokens + n) if e is not None else 0.0


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
        return SiDPStep(self.mode, self.rank, self.orch, table_fn(ParallelLayout(tp=self.cfg.tp)), self.cfg)

    def __str__(self) -> str:
        return f"dp={self.cfg.dp},tp={self.cfg.tp}"  # the deployment; the mode is its name in the plan
