"""What a policy hands the cluster: one EnginePlan per engine, and typed policy arguments."""
from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class EnginePlan:
    """One engine: its modes (name -> per-instance layout), mode rule, KV capacity and GPUs, and what a
    dynamic policy adds (its own engine factory, its front door, a hook on the built engine)."""

    modes: dict
    choose: Callable[[int], str]
    kv_capacity_tokens: int
    gpus: tuple
    note: str = ""  # a substitution the policy made by design (the CLI prints it; summary.json `notes`)
    # an engine of the policy's own kind, built by this factory (keywords env, index, runner, ec, budget,
    # max_seqs, kv_capacity_tokens, recs, steps, finished: simulator/cluster/simulate.py), else an Engine;
    # such an engine reports its completions itself (disagg's prefill instances end no request)
    engine_cls: Callable | None = None
    # the policy's own front door: it places requests itself (Flying, disagg); fits(pos), and dispatch(pos,
    # at_boundary) -> None, or the reason no engine of the policy can ever hold the request (the cluster rejects it)
    front: object = None
    attach: Callable | None = None  # called with the engine once built: a dynamic policy observing its engines
    # an engine of a non-static policy that steps with its attention-DP siblings as a static policy's do (the cluster
    # groups consecutive such engines by their layout's dp under EngineConfig.dp_lockstep "ep" or "all"): disagg's
    # prefill instances, plain Engines that nothing re-plans
    lockstep: bool = False


def parse_args(policy_args: dict, allowed: dict) -> dict:
    """Typed policy arguments: unknown names or bad values raise ValueError naming them."""
    out = {}
    for k, v in policy_args.items():
        if k not in allowed:
            raise ValueError(f"unknown policy argument {k!r}: allowed {', '.join(sorted(allowed)) or 'none'}")
        try:
            out[k] = allowed[k](v)
        except ValueError:
            raise ValueError(f"policy argument {k}={v!r} is not a valid {allowed[k].__name__}") from None
    return out
