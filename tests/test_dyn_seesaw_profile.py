"""Seesaw decides and times with the run's profile (issue 13): the (c_p, c_d) choice, the re-shards
and the KV swaps use the same profile as its step tables.

Llama-3.1-70B bf16 on 8 x H100, Seesaw's default reference job (3,000 in / 256 out): the shipped
h100_sxm profile's decode rates pick c_d = TP8, the datasheet roofline's TP4 x PP2. The shipped
profiles measure no host copies, so PROF adds h2d / d2h curves (test values: a 25 GB/s host link
with a 10 us floor, slower than the datasheet's) to show that re-shards and swaps follow it too.
A policy given no profile (cluster.simulate before it passed prof=) fails every test here.
"""
import dataclasses

import numpy as np
import pytest

from perfmodel import seesaw
from perfmodel.calibration.collectives import Curve
from perfmodel.calibration.profile import default_profile
from perfmodel.framework import DEFAULT_FRAMEWORK
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from perfmodel.steptable import StepTable
from simulator.cluster.simulate import SimConfig, simulate
from simulator.policies.seesaw.policy import REF_INPUT, REF_OUTPUT, seesaw_plans
from simulator.run import workload

SPEC, HW = load_model("llama-3.1-70b", weights="bf16"), load_hardware("h100")
SIZES = np.array([1e3, 1e6, 1e9, 1e11])
HOST_LINK = Curve({"size_bytes": SIZES, "time_us": 10.0 + SIZES / 25e3})  # 25 GB/s + 10 us: test values
PROF = dataclasses.replace(default_profile(HW), name="h100_sxm+host-copies", copies={"h2d": HOST_LINK, "d2h": HOST_LINK})
C_P, C_D = ParallelLayout(pp=8), ParallelLayout(tp=8)  # what perfmodel.seesaw picks with PROF
PROMPT = 3000
BUFFER_GB = 10  # CPU store of 10 prompts' KV (0.98 GB each): 4 prefill/decode cycles for 40 requests


@pytest.fixture(scope="module")
def steps():
    wl = workload(f"batch?n=40&input={PROMPT}&output=256")
    res = simulate(wl, SPEC, HW, SimConfig(policy="seesaw", policy_args=(("cpu_buffer_gb", str(BUFFER_GB)),)), PROF)
    assert res.engines[0]["modes"] == {"prefill": str(C_P), "decode": str(C_D)}
    return res.steps.frame()


def test_the_profile_changes_the_choice_here():
    """A case where it matters: calibrated and datasheet rates pick different decode configs."""
    job = seesaw.Job(1, REF_INPUT, REF_OUTPUT)
    whole = [lay for lay in seesaw.layouts(SPEC, HW, 8) if lay.gpus_per_instance == 8]
    for prof, c_d in ((PROF, C_D), (None, ParallelLayout(tp=4, pp=2))):
        assert max(whole, key=lambda lay: seesaw.decode_rate(SPEC, lay, HW, 8, job, prof)) == c_d
        assert max(whole, key=lambda lay: seesaw.prefill_rate(SPEC, lay, HW, 8, job, prof)) == C_P
    plans = [seesaw_plans(policy="seesaw", layout=None, spec=SPEC, hw=HW, gpus=8, fw=DEFAULT_FRAMEWORK, policy_args={},
                           prof=p)[0] for p in (PROF, None)]
    modes = [(p.modes["prefill"], p.modes["decode"]) for p in plans]
    assert modes[0] == (C_P, C_D) != modes[1]


def test_reshards_are_timed_with_the_profile(steps):
    sw = steps[steps["switch_s"] > 0]
    assert set(sw["mode"]) == {"prefill", "decode"}  # out to c_d and back to c_p
    for mode, lay in (("decode", C_D), ("prefill", C_P)):
        want = seesaw.reshard_s(SPEC, lay, HW, PROF)
        assert want != pytest.approx(seesaw.reshard_s(SPEC, lay, HW), rel=1e-3)  # the datasheet's differs
        assert sw.loc[sw["mode"] == mode, "switch_s"].tolist() == pytest.approx([want] * (sw["mode"] == mode).sum(),
                                                                               rel=1e-12)


def test_kv_pulls_are_timed_with_the_profile(steps):
    """A cycle's first decode stretch pulls its prompts' KV from the CPU store, overlapped with its
    first step only: perfmodel.seesaw.decode_stretch_s with the profile's h2d curve."""
    first = steps[(steps["mode"] == "decode") & (steps["steps"] > 0)].iloc[0]
    n, k, keys = int(first["decode_seqs"]), int(first["steps"]), float(first["decode_kv_tokens"])
    c0, c1 = StepTable(SPEC, C_D, HW, PROF).decode_affine(n)
    want = seesaw.decode_stretch_s(c0, c1, keys, n, k, n * PROMPT, SPEC, HW, 8, PROF)
    assert first["duration_s"] == pytest.approx(want, rel=1e-12)
    datasheet_pull = seesaw.decode_stretch_s(c0, c1, keys, n, k, n * PROMPT, SPEC, HW, 8)
    assert want != pytest.approx(datasheet_pull, rel=1e-3)


def test_swap_out_overlaps_prefill_compute():
    """prefill_step_s: the longer of compute and the swap-out paces the step; nothing to swap is free."""
    swap = seesaw.swap_s("d2h", 10 * PROMPT, SPEC, HW, 8, PROF)
    assert swap == pytest.approx(float(HOST_LINK.time_s(seesaw.kv_bytes(SPEC, 10 * PROMPT) / 8)), rel=1e-12)
    assert seesaw.prefill_step_s(0.5 * swap, 10 * PROMPT, SPEC, HW, 8, PROF) == swap
    assert seesaw.prefill_step_s(2.0 * swap, 10 * PROMPT, SPEC, HW, 8, PROF) == 2.0 * swap
    assert seesaw.swap_s("h2d", 0, SPEC, HW, 8, PROF) == 0.0
