"""Every constant the validation FITTED on measured rows: what it is, the rows its script fits it on, the rows it
acts on, the values its script tries and its prior (the value without any fit). `simulate validate --holdout`
refits each on the rows outside a held-out group (holdout.py); benchmarks/fit_*.py print each fit.

A constant is set through the RunSpec field `field` (in that field's unit), the way `simulate`'s flag sets it,
so a refit value is a plain `simulate` setting.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

from perfmodel.framework import (TRTLLM_HOST_FLOOR_S, TRTLLM_HOST_FLOOR_SEQ_S, TRTLLM_HOST_FLOOR_VERSIONS,
                                 VLLM_SYNC_STEP_OVERHEAD_S)

from . import harness as H
from .recipes import TRTLLM_DSR1_H100
from .rows import Case


@dataclasses.dataclass(frozen=True)
class Fit:
    """One FITTED constant of the validation."""

    name: str  # where it lives (module.CONSTANT)
    script: str  # the script that fits it and prints the sweep
    field: str  # the RunSpec field that sets it (simulate's flag), in that field's unit
    grid: tuple  # values the script tries
    prior: float  # the value with no fit (the framework's assumption or 0): what a group with no fit rows gets
    metric: str  # "ttft" or "tpot": the error it is fitted on (median absolute relative error)
    fit_rows: Callable  # Case -> bool: the rows its script fits it on
    acts_on: Callable  # Case -> bool: the rows whose replay it changes
    fitted: Callable  # () -> the value in force (read from the constant, in the field's unit)


def _aic_vllm(c: Case) -> bool:
    return c.policy == "layout" and c.backend == "vllm" and H.source_of(c) == "aic"


def _aic(c: Case) -> bool:
    return c.policy == "layout" and H.source_of(c) == "aic"


def trtllm_host_floor(c: Case) -> bool:
    """An aggregated TRT-LLM row of a version the host floor's preset covers (TRT-LLM 1.0: the aiperf rows)."""
    m = re.match(r"(\d+)\.(\d+)", c.version or "")  # ("" or a build name such as gpt-oss-dev: none)
    return c.policy == "layout" and c.backend == "trtllm" and m is not None \
        and (int(m.group(1)), int(m.group(2))) in TRTLLM_HOST_FLOOR_VERSIONS


def _sglang_srt(c: Case) -> bool:
    return c.backend == "sglang" and H.source_of(c) == "srt"


def _plain_dep16_only(c: Case) -> bool:
    """A TRT-LLM DeepSeek disagg row whose concurrency only one recipe ran, a plain one (no MTP) decoding on DEP16
    workers."""
    recs = TRTLLM_DSR1_H100.get((c.isl, c.osl, c.concurrency)) if c.backend == "trtllm" else None
    if c.policy != "disagg" or c.hardware != "h100" or not recs or len(recs) > 1:
        return False
    return recs[0].gen_attention_dp and recs[0].mtp == 0


FITS = (
    Fit("perfmodel.framework.VLLM_SYNC_STEP_OVERHEAD_S", "benchmarks/fit_step_overhead.py", "step_overhead_ms",
        (1.0, 1.5, 2.0, 2.5, 3.0), 1.0, "tpot", _aic_vllm, _aic_vllm, lambda: VLLM_SYNC_STEP_OVERHEAD_S * 1e3),
    Fit("simulator.apps.validate.harness.AIPERF_TURNAROUND_S", "benchmarks/fit_client_turnaround.py",
        "client_turnaround_ms", (0.0, 5.0, 10.0, 15.0, 20.0), 0.0, "ttft", _aic_vllm, _aic,
        lambda: H.AIPERF_TURNAROUND_S * 1e3),
    Fit("simulator.apps.validate.harness.SGLANG_PD_HANDOFF_S", "benchmarks/fit_pd_handoff.py", "pd_handoff_ms",
        (0.0, 70.0, 100.0, 140.0, 180.0), 0.0, "ttft", lambda c: _sglang_srt(c) and c.concurrency == 1, _sglang_srt,
        lambda: H.SGLANG_PD_HANDOFF_S * 1e3),
    Fit("perfmodel.framework.TRTLLM_HOST_FLOOR_S", "benchmarks/fit_host_floor.py", "host_floor_us",
        (0.0, 1000.0, 2000.0, 3000.0, 4000.0), 0.0, "tpot", trtllm_host_floor, trtllm_host_floor,
        lambda: TRTLLM_HOST_FLOOR_S * 1e6),
    Fit("perfmodel.framework.TRTLLM_HOST_FLOOR_SEQ_S", "benchmarks/fit_host_floor.py", "host_floor_seq_us",
        (0.0, 40.0, 60.0, 80.0, 100.0), 0.0, "tpot", trtllm_host_floor, trtllm_host_floor,
        lambda: TRTLLM_HOST_FLOOR_SEQ_S * 1e6),
    Fit("simulator.apps.validate.harness.DEEPEP_NORMAL_CALL_S", "benchmarks/fit_deepep_call.py", "moe_a2a_call_us",
        (0.0, 100.0, 150.0, 200.0, 250.0), 0.0, "tpot", _plain_dep16_only,
        lambda c: c.backend == "trtllm" and H.source_of(c) == "srt", lambda: H.DEEPEP_NORMAL_CALL_S * 1e6),
)
