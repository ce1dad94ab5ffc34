"""`recommend`: generate candidates, bound them in closed form, simulate the survivors, rank."""
from __future__ import annotations

import importlib.util
import time

from perfmodel.deploy import cluster
from perfmodel.framework import framework_preset
from perfmodel.layout import LayoutError
from perfmodel.modelspec import default_weights
from simulator.apps.recommend import candidates as cand_mod
from simulator.apps.recommend.prune import bounds as closed_form_bounds
from simulator.apps.recommend.rank import finish_row, rank, search
from simulator.apps.recommend.serve import commands
from simulator.apps.recommend.support import keep as servable
from simulator.run import hardware_and_profile, model_spec
from simulator.apps.sweep.executors import EXECUTORS


class NoFit(LayoutError):
    """The model fits no candidate deployment (the CLI's exit 2)."""


def recommend(wl, *, model: str, hardware: str, gpus: int | None, slo_ttft_ms: float, slo_tpot_ms: float,
              framework: str = "vllm", weights: str | None = None, profile: str | None = None,
              slo_percentile: float = 90.0, kinds=cand_mod.KINDS, gpu_hour_usd: float | None = None,
              workers: int = 1, prune: bool = True, log=None, nodes: int = 1, gpus_per_node: int | None = None,
              executor: str = "local", research: bool = True) -> dict:
    """The summary dict: met, winner, ranking (every simulated candidate, best first), pruned,
    dropped, counts, commands, wall_s. Raises NoFit when no candidate fits. `gpus`: the GPUs used in
    all (None: every GPU of `nodes` x `gpus_per_node`, or 8 on one node; perfmodel.deploy.cluster's rule).
    `executor`: 'local' (processes here) or 'ray' (simulator.apps.sweep.executors.run_ray). Only candidates
    `framework` can serve are simulated (simulator.apps.recommend.support: no Shift / SP outside vLLM), plus,
    with `research`, the research policies (Flying, Seesaw, SiDP: no framework's command). The library
    explores them by default; the CLI only with --research, since it prints a framework's command."""
    t0 = time.perf_counter()
    log = log or (lambda s: None)
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: one of {', '.join(EXECUTORS)}")
    if executor == "ray" and importlib.util.find_spec("ray") is None:  # before any work, one line (exit 2)
        raise ValueError("--executor ray needs Ray, which is not installed: pip install 'parallelism-sim[ray]'")
    hw, prof = hardware_and_profile(hardware, profile)
    hw, gpus = cluster(hw, nodes, gpus_per_node, gpus)  # the node size used and the total; bad sizes raise
    w = weights or default_weights(model, hw.has_fp8)  # as simulate (perfmodel.modelspec.default_weights)
    spec = model_spec(model, w, "bf16")
    fw = framework_preset(framework)
    cands, dropped = cand_mod.generate(spec, hw, gpus, fw, kinds, prof)
    cands, unservable = servable(cands, framework, research)
    dropped += unservable
    for label, why in dropped:
        log(f"dropped {label}: {why}")
    if not cands:
        why = "; ".join(sorted({r for _, r in dropped}))[:300]
        raise NoFit(f"{spec.name} ({w}) fits no {'/'.join(kinds)} deployment {framework} can serve on {gpus} x {hw.name}"
                    f"{f' ({nodes} nodes)' if nodes > 1 else ''}: {why}")
    b, failed = closed_form_bounds(cands, wl, spec, hw, gpus, fw, prof, slo_ttft_ms, slo_tpot_ms, slo_percentile)
    for label, why in failed.items():
        log(f"dropped {label}: closed form refuses it: {why}")
        dropped.append((label, why))
    cands = [c for c in cands if c.label in b]
    arr = wl.requests["arrival_s"]
    span = float(arr.max() - arr.min()) or 1.0
    task = dict(workload=wl, model=model, hardware=hardware, gpus=gpus, nodes=nodes, gpus_per_node=gpus_per_node,
                weights=w, profile=profile, framework=framework, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
                pct=slo_percentile)
    by_label = {c.label: c for c in cands}

    def finish(row):
        c = by_label[row["label"]]
        row.update(kind=c.kind, policy=c.policy, policy_args=dict(c.policy_args),
                   **({"degrees": dict(c.degrees)} if c.degrees else {}))
        bd = b[c.label]
        row.update(bound_good=bd.good_bound, unloaded_ttft_ms=bd.unloaded_ttft_ms, unloaded_tpot_ms=bd.unloaded_tpot_ms)
        return finish_row(row, span, gpus, slo_percentile, gpu_hour_usd, slo_ttft_ms, slo_tpot_ms)

    rows, pruned = search(cands, b, task, workers, finish, prune, log, executor)
    for label, why in [(r["label"], r["error"]) for r in rows if "error" in r]:
        log(f"dropped {label}: the simulator refuses it: {why}")
        dropped.append((label, why))
    ranking = rank(rows)
    reasons = {}
    for why in pruned.values():
        reasons[why] = reasons.get(why, 0) + 1
    winner = ranking[0] if ranking else None
    counts = {"generated": len(cands) + len(failed), "dropped": len(dropped), "pruned": len(pruned),
              "pruned_by_reason": reasons, "simulated": len(rows)}
    log(f"candidates: {counts['generated']} generated, {len(pruned)} pruned {reasons}, {len(rows)} simulated")
    closest = [] if winner is None or winner["met"] else sorted(
        ranking, key=lambda r: (max(r["ttft_miss_ms"], r["tpot_miss_ms"]), r["label"]))[:3]
    return {"met": bool(winner and winner["met"]), "winner": winner, "ranking": ranking,
            "closest": closest, "pruned": pruned, "dropped": [{"label": l, "reason": r} for l, r in dropped],
            "counts": counts, "commands": commands(winner, model, gpus, hw.gpus_per_node, framework) if winner else None,
            "slo": {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "percentile": slo_percentile},
            "setup": {"model": spec.name, "hardware": hw.name, "gpus": gpus, "nodes": nodes,
                      "gpus_per_node": hw.gpus_per_node, "weights": w, "framework": framework, "executor": executor, "research": research,
                      "trace": getattr(wl, "source", ""), "requests": len(wl), "trace_span_s": span},
            "wall_s": time.perf_counter() - t0}
