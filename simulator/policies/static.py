"""Static policies (dp, tp, pp, sp, ep, layout): one fixed instance layout per engine, resolved through
the same perfmodel.deploy.deployment() as `perfmodel estimate`, so both tools agree on layouts."""
from __future__ import annotations

from perfmodel.deploy import deployment, instance_layout
from perfmodel.layout import LayoutError

from simulator.policies.base import EnginePlan, parse_args

STATIC = ("dp", "tp", "pp", "sp", "ep", "layout")


def static_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """dp/tp/pp/sp/ep over all GPUs, or `--policy layout --layout L` (DP fills the remaining GPUs);
    another static policy given a layout stops (it would run one thing under another's name)."""
    parse_args(policy_args, {})
    if policy == "layout" and not layout:
        raise LayoutError("--policy layout needs --layout, e.g. --layout tp=2,pp=4")
    if policy != "layout" and layout:  # a policy runs the layout it names, or the run stops
        raise LayoutError(f"--policy {policy} with --layout {layout}: {policy} chooses its own layout; "
                          f"run the layout with --policy layout --layout {layout}")
    dep = deployment(layout if policy == "layout" else policy, spec, hw, gpus, fw)
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit {dep.describe()} on {hw.name}: "
                          f"{dep.plan.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU vs "
                          f"{dep.plan.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    inst = instance_layout(dep.base)
    per = inst.gpus_per_instance
    mode = str(inst)
    return [EnginePlan({mode: inst}, lambda t, m=mode: m, dep.plan.kv_capacity_tokens,
                       tuple(range(i * per, (i + 1) * per))) for i in range(dep.instances)]
