"""Candidates of `simulate recommend`: every static layout that fits the N GPUs (on one node or on
several: docs/multinode.md), the dynamic policies with their main knobs, and disaggregated
prefill/decode splits. A candidate that a policy refuses is dropped with its reason."""
from __future__ import annotations

import dataclasses
import itertools

from perfmodel import memory
from perfmodel.deploy import deployment, instance_layout, layout_name
from perfmodel.disagg import Pool, pool_on
from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS
from perfmodel.layout import LayoutError, ParallelLayout
from simulator.cluster.simulate import SINGLE_NODE_POLICIES
from simulator.policies import POLICIES

KINDS = ("static", "dynamic", "disagg")
SHIFT_THRESHOLDS = (SHIFT_THRESHOLD_TOKENS // 2, SHIFT_THRESHOLD_TOKENS, SHIFT_THRESHOLD_TOKENS * 4)
# Prefill share of the GPUs: a few splits, not all, as DistServe / aiconfigurator's searches start from
# (a prompt-heavy trace wants more prefill, an output-heavy one more decode); the simulator settles it
DISAGG_SHARES = (0.25, 0.5, 0.75)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One deployment to try: the RunSpec fields it sets and the perfmodel strategy that estimates it."""

    label: str  # 'dp=4 x tp=2', 'shift:threshold=256', 'flying', 'disagg:2x(tp=2)/4x(tp=1)'
    kind: str  # static | dynamic | disagg
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
    instance memory plan leaves KV room; and (layout, reason) for those that do not. On several nodes
    (gpus > hw.gpus_per_node) an instance must sit inside one node or on whole nodes: one StepTable
    costs every instance alike (perfmodel.deploy refuses the others with the same words)."""
    ok, dropped, node = [], [], hw.gpus_per_node
    for tp, pp, sp in itertools.product(_divisors(gpus), repeat=3):
        if gpus % (tp * pp * sp):
            continue
        dp = gpus // (tp * pp * sp)
        eps = [1] + ([e for e in _divisors(dp * sp * tp) if e > 1] if spec.is_moe else [])
        for ep in eps:
            try:
                lay = ParallelLayout(tp=tp, pp=pp, sp=sp, dp=dp, ep=ep).validate(spec, gpus)
                inst = instance_layout(lay).gpus_per_instance
                if gpus > node and inst % node and node % inst:
                    raise LayoutError(f"an instance of {inst} GPUs would straddle {node}-GPU nodes unevenly")
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
    text = ",".join(f"{k}={getattr(lay, k)}" for k in ("dp", "tp", "pp", "sp", "ep") if getattr(lay, k) > 1) or "tp=1"
    degrees = tuple((k, getattr(lay, k)) for k in ("dp", "tp", "pp", "sp", "ep"))
    return Candidate(layout_name(lay), "static", "layout", text, (), text, degrees=degrees)


def dynamic_candidates(spec, hw, gpus: int, fw, prof=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Shift at a few thresholds, Flying, Seesaw and SiDP at their defaults plus Flying's and Seesaw's main
    knob variants (Seesaw and SiDP on one
    node only: docs/multinode.md); each checked by the policy's own plan builder
    (simulator.policies.POLICIES), dropped with its words when refused."""
    wanted = [Candidate(f"shift:threshold={t}", "dynamic", "shift", None, (("threshold", str(t)),), "shift", t)
              for t in SHIFT_THRESHOLDS]
    wanted += [Candidate(p, "dynamic", p, None, (), p) for p in ("flying", "seesaw", "sidp")]
    # the main knobs beyond the defaults: Flying's switching rule and its low-load TP rule (1: bind TP groups
    # only when at most one request is in flight), Seesaw's prefill layout (pure PP, or TP2 x PP) with TP decode
    for k, v in (("switching", "soft"), ("low_load", "1")):
        wanted.append(Candidate(f"flying:{k}={v}", "dynamic", "flying", None, ((k, v),), "flying"))
    for c_p in (f"pp={gpus}", f"tp=2;pp={gpus // 2}"):
        args = (("c_p", c_p), ("c_d", f"tp={gpus}"))
        wanted.append(Candidate(f"seesaw:c_p={c_p},c_d=tp={gpus}", "dynamic", "seesaw", None, args, "seesaw"))
    ok, dropped = [], []
    for c in wanted:
        try:
            if gpus > hw.gpus_per_node and c.policy in SINGLE_NODE_POLICIES:  # the simulator's refusal, early
                raise LayoutError(f"{c.policy} runs on one node ({hw.gpus_per_node} GPUs); {gpus} GPUs span several")
            if c.policy == "shift":
                deployment("shift", spec, hw, gpus, fw, c.threshold)
            POLICIES[c.policy](policy=c.policy, layout=None, spec=spec, hw=hw, gpus=gpus, fw=fw,
                               policy_args=dict(c.policy_args), prof=prof)
        except (LayoutError, ValueError) as e:
            dropped.append((c.label, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        ok.append(c)
    return ok, dropped


def disagg_candidates(spec, hw, gpus: int, fw, prof=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Prefill on DISAGG_SHARES of the GPUs, decode on the rest; each pool replicated at the smallest TP
    that holds the model (perfmodel.disagg.pool_on, the --policy dp rule), and the variants with twice
    that TP in the prefill pool (shorter prompts' TTFT) or in the decode pool (shorter steps). Each
    split is checked by the disagg policy's own plan builder (placement, memory, node boundaries)."""
    ok, dropped, seen = [], [], set()
    for share in DISAGG_SHARES:
        n_p = max(1, min(gpus - 1, int(round(gpus * share))))
        n_d = gpus - n_p
        try:
            base = (pool_on(spec, hw, n_p, fw, "prefill"), pool_on(spec, hw, n_d, fw, "decode"))
        except LayoutError as e:
            dropped.append((f"disagg:prefill {n_p} / decode {n_d} GPUs", str(e).splitlines()[0]))
            continue
        wider = [Pool(n // (2 * b.layout.tp), ParallelLayout(tp=2 * b.layout.tp)) if n % (2 * b.layout.tp) == 0
                 and b.layout.pp == b.layout.sp == 1 and b.count > 1 else None for b, n in zip(base, (n_p, n_d))]
        for p, d in (base, (wider[0], base[1]), (base[0], wider[1])):
            if p is None or d is None or (str(p), str(d)) in seen:
                continue
            seen.add((str(p), str(d)))
            args = (("decode", str(d)), ("prefill", str(p)))
            c = Candidate(f"disagg:{p}/{d}", "disagg", "disagg", None, args, "disagg")
            try:
                POLICIES["disagg"](policy="disagg", layout=None, spec=spec, hw=hw, gpus=gpus, fw=fw, policy_args=dict(args),
                                   prof=prof)
            except (LayoutError, ValueError) as e:
                dropped.append((c.label, str(e).splitlines()[0] if str(e) else type(e).__name__))
                continue
            ok.append(c)
    return ok, dropped


def generate(spec, hw, gpus: int, fw, kinds=KINDS, prof=None) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """(candidates, dropped (label, reason)). `kinds`: static, dynamic and/or disagg. `hw` is the node
    as perfmodel.deploy.cluster returns it (gpus_per_node = the node size used); `gpus` the total."""
    if gpus < 1:
        raise LayoutError(f"--gpus {gpus} must be >= 1")
    if gpus > hw.gpus_per_node and not hw.has_network:
        raise LayoutError(f"--gpus {gpus} exceeds a {hw.name} node ({hw.gpus_per_node} GPUs) and {hw.name} has no "
                          "inter-node network in its preset (nic_bw_gbs = 0)")
    cands, dropped = [], []
    if "static" in kinds:
        lays, dropped = static_layouts(spec, hw, gpus, fw)
        cands += [static_candidate(lay) for lay in lays]
    for kind, fn in (("dynamic", dynamic_candidates), ("disagg", disagg_candidates)):
        if kind in kinds and gpus > 1:
            more, why = fn(spec, hw, gpus, fw, prof)
            cands += more
            dropped += why
    return cands, dropped
