"""SiDP's run-time parts: the Orchestrator (global WaS/CaS decision over the D replicas, with
hysteresis) and each replica's step-time object, which passes the local StepTable's time through
perfmodel.sidp (the policy computes no time itself). The orchestrator observes its engines only
through their public interface: finish hooks, cut, num_running, in_stretch, context_tokens.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from perfmodel import sidp
from perfmodel.layout import ParallelLayout
from simulator.engine.runner import DecodeLine


class Orchestrator:
    """Global WaS/CaS decision over the D replicas (mutable simulation state, one per run).

    A replica's decode stretch (closed form, simulator/engine/stretch.py) stands for the decisions of
    its steps only while they cannot change anything: the mode is settled (no switch pending) and
    the rows that decide it and that CaS steps are charged for are those of the stretch's first step.
    So the orchestrator allows no stretch while a switch is pending (each step's decision counts
    towards the hysteresis, as step by step), and cuts the stretches in progress after their current
    step whenever a replica's rows change (a decision with other tokens, a replica going idle): they
    re-plan from the new rows, exactly when a step-by-step run would first see them."""

    def __init__(self, dp: int, b_star: int | None, hysteresis: int, fixed: str | None):
        self.engines: list = [None] * dp
        self.b_star, self.hysteresis, self.fixed = b_star, hysteresis, fixed
        self.mode = fixed or "was"
        self.last_mode = [self.mode] * dp  # the mode of each replica's current step or stretch
        self.streak = 0  # decisions running the other side has won
        # FFN rows (tokens) of each replica's current or last step, 0 once it is idle (its last completion):
        # what the effective batch and the other replicas' CaS steps count
        self.rows = np.zeros(dp)

    def attach(self, rank: int, engine) -> None:
        """Observe `engine`: its completions (a replica going idle counts 0 rows from then on)."""
        self.engines[rank] = engine
        engine.add_finish_hook(lambda pos: self._finished(rank))

    def _finished(self, rank: int) -> None:
        if self.engines[rank].num_running == 0 and self.rows[rank] != 0:
            self.rows[rank] = 0.0
            self._rows_changed(rank)

    def _rows_changed(self, rank: int) -> None:
        """Replica `rank`'s effective rows changed: the others' CaS steps are charged for new rows, and
        under auto mode the effective batch that decides the mode moved."""
        self._replan(lambda r: r != rank and (self.last_mode[r] == "cas" or not self.fixed))

    def _replan(self, which) -> None:
        """End the decode stretches of the selected replicas after their step in progress (the
        engine's own mechanism for arrivals; not at a boundary: a step ending now still runs on)."""
        for r, e in enumerate(self.engines):
            if e is not None and which(r) and e.in_stretch:
                e.cut(at_boundary=False)

    def settled(self) -> bool:
        """No switch pending: the next decisions on the same rows keep the mode (a stretch may stand
        for them)."""
        return bool(self.fixed) or self.streak == 0

    def decide(self, rank: int, tokens: int) -> str:
        if self.rows[rank] != tokens:  # (an idle replica's first step changes its rows from 0)
            self.rows[rank] = tokens
            self._rows_changed(rank)
        if self.fixed:
            self.last_mode[rank] = self.fixed
            return self.fixed
        want = "was" if self.rows.mean() >= self.b_star else "cas"
        mode, self.streak = sidp.next_mode(self.mode, self.streak, want, self.hysteresis)  # shared with kernels
        if mode != self.mode:
            self.mode = mode
            self._replan(lambda r: r != rank)  # a global switch reaches every replica's next step
        self.last_mode[rank] = self.mode
        return self.mode

    def service_rows(self, rank: int, tokens: int) -> np.ndarray:
        """FFN rows the owners serve in a CaS group step: this replica's tokens and every other
        replica's current step's (idle ones 0); a stretch is cut whenever these change."""
        rows = self.rows.copy()
        rows[rank] = tokens
        return rows


class SiDPStep:
    """Step-time object of one replica in one mode: step_s(agg) and decode_line(n, k0, steps)."""

    def __init__(self, mode: str, rank: int, orch: Orchestrator, local, cfg: sidp.SiDPConfig):
        self.mode, self.rank, self.orch, self.local, self.cfg = mode, rank, orch, local, cfg
        self.spec, self.hw, self.prof, self.fw = local.spec, local.hw, local.prof, local.fw
        self._cas: dict = {}

    def _time(self, local_s: float, tokens: int) -> float:
        if self.mode == "was":
            return float(sidp.was_step_s(local_s, self.spec, self.hw, self.cfg, self.rank, self.prof, self.fw))
        if self.mode == "fsdp":
            return float(sidp.fsdp_step_s(local_s, self.spec, self.hw, self.cfg, self.prof))
        rows = self.orch.service_rows(self.rank, tokens)
        key = tuple(rows.tolist())  # the group's FFN service depends only on the rows: memoised
        if key not in self._cas:
            self._cas[key] = sidp.cas_step_s(1.0, rows, self.rank, self.spec, self.hw, self.cfg, self.prof) - 1.0
        return local_s + self._cas[key] if local_s > 0 else 0.0

    def step_s(self, agg) -> float:
        """Seconds of one step of aggregates `agg` (a StepAgg) in this mode, now."""
        return self._time(self.local.step_s(agg), agg.prefill_tokens + agg.decode_seqs)

    def decode_line(self, n: int, k0: float, steps: int) -> DecodeLine:
        """DecodeLine(c0, c1, steps) of the next decode steps of n sequences from k0 keys. CaS and FSDP add a
        context-independent term to the local line (exact); WaS is max(compute, fetch) per layer, convex
        in the keys: the line through the first two steps is exact until the compute = fetch point,
        so the stretch stops before it (found by bisection on the exact time). One step while a mode
        switch is pending (every step's decision counts towards the hysteresis)."""
        if not self.orch.settled():
            steps = 1
        local = self.local.decode_affine(n)
        lc0, lc1 = local.c0_s, local.c1_s_per_key
        t0, t1 = self._time(lc0 + lc1 * k0, n), self._time(lc0 + lc1 * (k0 + n), n)
        slope = (t1 - t0) / n
        c0 = t0 - slope * k0
        if steps > 2:
            def exact(j: int) -> bool:  # step j of the stretch on the line (rounding aside)
                keys = k0 + j * n
                t = self._time(lc0 + lc1 * keys, n)
                return abs(c0 + slope * keys - t) <= 1e-12 * max(abs(t), 1e-30)
            if not exact(steps - 1):
                lo, hi = 1, steps - 1  # step lo on the line, step hi off it
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if exact(mid) else (lo, mid)
                steps = hi  # steps 0 .. hi - 1
        return DecodeLine(c0, slope, steps)


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
