"""Seesaw (`--policy seesaw`, SYSTEMS.md 4): prefill under c_p, decode under c_d, KV parked in a CPU
store between the phases (simulator/policies/seesaw/engine.py runs the schedule).

One SeesawEngine spans the node: c_p and c_d must each be one instance over all GPUs (tp x pp =
gpus; the DP-filled layouts of perfmodel.seesaw are not simulated). Every time comes from perfmodel:
StepTables of c_p and c_d for the steps, perfmodel.seesaw.swap_s for the KV swaps (d2h / h2d, overlapped),
perfmodel.seesaw.reshard_s for each switch (weights of the new shards from pinned host memory, not
overlapped; recorded in switch_s); memory.plan(c_d) gives the decode KV, memory.cpu_kv_buffer_bytes
the default CPU store. Every time, the (c_p, c_d) choice included, uses the run's profile `prof`.
"""
from __future__ import annotations

import dataclasses

from perfmodel import memory, seesaw
from perfmodel.layout import LayoutError, ParallelLayout

from simulator.policies.base import EnginePlan, parse_args
from simulator.policies.seesaw.engine import SeesawEngine

REF_INPUT, REF_OUTPUT = 3000, 256  # reference job for the default (c_p, c_d): TARGETS.md's 70B input
REF_REQUESTS = 1  # its size: prefill_rate and decode_rate read only the lengths, so any count picks the same


@dataclasses.dataclass(frozen=True)
class SeesawSetup:
    """What the engine needs beyond its StepTables (built once per run)."""

    spec: object
    hw: object
    prof: object
    gpus: int
    buffer_bytes: float  # CPU KV store, whole node
    reshard_s: dict  # mode -> seconds to load that mode's weight shards
    pp: int  # c_p's pipeline depth: prompts per prefill step at least
    decode_kv_tokens: int


ARGS = {"c_p": str, "c_d": str, "cpu_buffer_gb": float, "input": int, "output": int}


def _layout(text: str, spec, gpus: int) -> ParallelLayout:
    lay = ParallelLayout.parse(text.replace(";", ",")).validate(spec)
    if lay.gpus_per_instance != gpus or lay.dp != 1 or lay.sp != 1:
        raise LayoutError(f"seesaw config {text!r}: the simulator needs tp x pp = all {gpus} GPUs")
    return lay


def seesaw_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list:
    """Seesaw over `gpus` GPUs. Arguments: c_p, c_d (layouts like 'pp=8', 'tp=4;pp=2'; default
    perfmodel.seesaw.fastest for a job of `input` x `output` tokens, 3000 x 256), cpu_buffer_gb
    (node total; default memory.cpu_kv_buffer_bytes: half the host memory)."""
    a = parse_args(policy_args, ARGS)
    job = seesaw.Job(REF_REQUESTS, a.get("input", REF_INPUT), a.get("output", REF_OUTPUT))
    whole = [lay for lay in seesaw.layouts(spec, hw, gpus, fw) if lay.gpus_per_instance == gpus]
    if not whole:
        raise LayoutError(f"{spec.name} fits no tp x pp layout over {gpus} x {hw.name}")
    c_p = _layout(a["c_p"], spec, gpus) if "c_p" in a else max(
        whole, key=lambda lay: seesaw.prefill_rate(spec, lay, hw, gpus, job, prof, fw))
    c_d = _layout(a["c_d"], spec, gpus) if "c_d" in a else max(
        whole, key=lambda lay: seesaw.decode_rate(spec, lay, hw, gpus, job, prof, fw))
    dplan = memory.plan(spec, c_d, hw, fw)
    if not dplan.fits or not memory.plan(spec, c_p, hw, fw).fits:
        raise LayoutError(f"{spec.name} does not fit seesaw c_p={c_p}, c_d={c_d} on {gpus} x {hw.name}")
    buf = a["cpu_buffer_gb"] * 1e9 if "cpu_buffer_gb" in a else memory.cpu_kv_buffer_bytes(hw, gpus=gpus) * gpus
    same = c_p == c_d
    setup = SeesawSetup(spec, hw, prof, gpus, buf,
                        {"prefill": 0.0 if same else seesaw.reshard_s(spec, c_p, hw, prof),
                         "decode": 0.0 if same else seesaw.reshard_s(spec, c_d, hw, prof)},
                        c_p.pp, dplan.kv_capacity_tokens)
    return [EnginePlan({"prefill": c_p, "decode": c_d}, lambda t: "prefill", dplan.kv_capacity_tokens,
                       tuple(range(gpus)), engine_cls=SeesawEngine, attach=lambda e: e.setup(setup))]
