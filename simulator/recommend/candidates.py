"""Candidates of `simulate recommend`: every static layout that fits N GPUs of one node, plus the
dynamic policies with their main knobs. A candidate that a policy refuses is dropped with its reason."""
from __future__ import annotations

import dataclasses
import itertools

from perfmodel import memory
from perfmodel.deploy import deployment, instance_layout
from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS
from perfmodel.layout import LayoutError, ParallelLayout

KINDS = ("static", "dynamic")
SHIFT_THRESHOLDS = (SHIFT_THRESHOLD_TOKENS // 2, SHIFT_THRESHOLD_TOKENS, SHIFT_THRESHOLD_TOKENS * 4)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One deployment to try: the RunSpec fields it sets and the perfmodel strategy that estimates it."""

    label: str  # 'dp=4 x tp=2', 'shift:threshold=256', 'flying'
    kind: str  # static | dynamic
    policy: str  # RunSpec.policy
    layout: str | None = None  # RunSpec.layout (static: the instance layout, dp explicit)
    policy_args: tuple = ()  # RunSpec.policy_args
    strategy: str = ""  # perfmodel.estimate strategy name or layout text
    threshold: int = SHIFT_THRESHOLD_TOKENS  # shift only
    degrees: tuple = ()  # (("dp", 4), ("tp", 2), ...) of a static layout

    def as_dict(self) -> dict:
        return {"label": self.label, "kind": self.kind, "policy": self.policy, "layout": self.layout,
                "policy_args": dict(self.policy_args), **({"degrees": dict(self.degrees)} if self.degrees else {})}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def static_layouts(spec, hw, gpus: int, fw) -> tuple[list[ParallelLayout], list[tuple[str, str]]]:
    """Every (dp, tp, pp, sp, ep) on exactly `gpus` GPUs (dp fills them) that validates and whose
    instance memory plan leaves KV room; and (layout, reason) for those that do not."""
    ok, dropped = [], []
    for tp, pp, sp in itertools.product(_divisors(gpus), repeat=3):
        if gpus % (tp * pp * sp):
            continue
        dp = gpus // (tp * pp * sp)
        eps = [1] + ([e for e in _divisors(dp * sp * tp) if e > 1] if spec.is_moe else [])
        for ep in eps:
            try:
                lay = ParallelLayout(tp=tp, pp=pp, sp=sp, dp=dp, ep=ep).validate(spec, gpus)
                plan = memory.plan(spec, instance_layout(lay), hw, fw)
            except LayoutError as e:
                dropped.append((_name(tp, pp, sp, dp, ep), str(e)))
                continue
            if not plan.fits:
                dropped.append((_name(tp, pp, sp, dp, ep), f"weights {plan.weight_bytes_per_gpu / 1e9:.1f} GB per "
                                f"GPU vs {plan.usable_bytes_per_gpu / 1e9:.1f} GB usable"))
                continue
            ok.append(lay)
    return ok, dropped


def _name(tp, pp, sp, dp, ep) -> str:
    pairs = (("dp", dp), ("tp", tp), ("pp", pp), ("sp", sp), ("ep", ep))
    return ",".join(f"{k}={v}" for k, v in pairs if v > 1) or "tp=1"


def static_candidate(lay: ParallelLayout) -> Candidate:
    from perfmodel.deploy import layout_name

    text = ",".join(f"{k}={getattr(lay, k)}" for k in ("dp", "tp", "pp", "sp", "ep") if getattr(lay, k) > 1) or "tp=1"
    degrees = tuple((k, getattr(lay, k)) for k in ("dp", "tp", "pp", "sp", "ep"))
    return Candidate(layout_name(lay), "static", "layout", text, (), text, degrees=degrees)


def dynamic_candidates(spec, hw, gpus: int, fw, prof=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Shift at a few thresholds, Flying, Seesaw and SiDP at their defaults; each checked by the
    policy's own plan builder (simulator.policies.POLICIES), dropped with its words when refused."""
    from simulator.policies import POLICIES

    wanted = [Candidate(f"shift:threshold={t}", "dynamic", "shift", None, (("threshold", str(t)),), "shift", t)
              for t in SHIFT_THRESHOLDS]
    wanted += [Candidate(p, "dynamic", p, None, (), p) for p in ("flying", "seesaw", "sidp")]
    ok, dropped = [], []
    for c in wanted:
        try:
            if c.policy == "shift":
                deployment("shift", spec, hw, gpus, fw, c.threshold)
            POLICIES[c.policy](c.policy, None, spec, hw, gpus, fw, dict(c.policy_args), prof)
        except (LayoutError, ValueError) as e:
            dropped.append((c.label, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        ok.append(c)
    return ok, dropped


def generate(spec, hw, gpus: int, fw, kinds=KINDS, prof=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """(candidates, dropped (label, reason)). `kinds`: static and/or dynamic."""
    if gpus < 1 or gpus > hw.gpus_per_node:
        raise LayoutError(f"--gpus {gpus}: a {hw.name} node has 1 to {hw.gpus_per_node} GPUs (recommend searches "
                          f"one node; several: simulate --nodes N --compare ...)")
    cands, dropped = [], []
    if "static" in kinds:
        lays, dropped = static_layouts(spec, hw, gpus, fw)
        cands += [static_candidate(lay) for lay in lays]
    if "dynamic" in kinds and gpus > 1:
        dyn, why = dynamic_candidates(spec, hw, gpus, fw, prof)
        cands += dyn
        dropped += why
    return cands, dropped
