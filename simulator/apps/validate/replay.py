"""Replaying one measured benchmark run (a Case) as its benchmark ran it (harness.py says how).

C clients in a closed loop, `rounds x C` measured requests; the warm-up requests finish before the
measured phase starts (aiperf and benchmark_serving both await them), so the replay starts empty
and simulates the measured phase only. Lengths are fixed (aiperf) or drawn uniformly in
[0.8 L, L] with a seeded generator (benchmark_serving --random-range-ratio 0.8).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from perfmodel.framework import framework_preset
from simulator.run import RunSpec, run
from simulator.workload.workload import make_workload

from .harness import Harness, as_launched, harness
from .rows import Case

# Host time per engine step the GPU waits on (scheduling, input preparation, sampling), per framework
# loop; fitted on the H100 rows (docs/fidelity.md lists the fit). vLLM with async scheduling (the
# InferenceX rows: --async-scheduling) overlaps it with the GPU's step, so none is exposed.
# (SGLang and TRT-LLM keep their preset's, perfmodel.framework.FRAMEWORKS: not fitted)
STEP_OVERHEAD_MS = {"vllm": 2.0, "vllm-async": 0.0}


@dataclasses.dataclass(frozen=True)
class Replayed:
    """A case's simulated means next to the measured ones."""

    case: Case
    ttft_ms: float
    tpot_ms: float
    preemptions: int
    rejected: int
    kv_capacity_tokens: int
    # every recipe that ran at a twin row's concurrency, replayed (twins.py assigns one; () elsewhere)
    alternatives: tuple = ()

    @property
    def ttft_rel_err(self) -> float:
        return self.ttft_ms / self.case.ttft_ms - 1.0

    @property
    def tpot_rel_err(self) -> float:
        return self.tpot_ms / self.case.tpot_ms - 1.0


# measured requests replayed at most (20 x 512: every aggregated row in full); rows of C in the thousands
# (wide-EP disagg rows, C up to 4916) replay fewer rounds, at least 2 (a closed loop's means settle in a few)
MAX_REQUESTS = 10240


def rounds(h: Harness, case: Case) -> int:
    """Measured rounds of C requests replayed: the benchmark's, capped at MAX_REQUESTS in all."""
    return max(2, min(h.rounds, MAX_REQUESTS // max(case.concurrency, 1)))


def workload_of(case: Case, h: Harness, seed: int = 0):
    """rounds x C requests, all ready at 0 s: the closed loop issues them C at a time, in order."""
    n = rounds(h, case) * case.concurrency
    if h.length_ratio < 1.0:
        rng = np.random.default_rng(seed)
        isl = rng.integers(int(case.isl * h.length_ratio), case.isl + 1, n)
        osl = rng.integers(int(case.osl * h.length_ratio), case.osl + 1, n)
    else:
        isl, osl = np.full(n, case.isl), np.full(n, case.osl)
    return make_workload({"arrival_s": np.zeros(n), "input_tokens": isl, "output_tokens": osl},
                         source=f"benchmark:{case.id}")


def run_spec(case: Case, h: Harness, **fields) -> RunSpec:
    loop = h.engine.scheduler + ("-async" if h.async_scheduling else "")
    if loop in STEP_OVERHEAD_MS:
        fields.setdefault("step_overhead_ms", STEP_OVERHEAD_MS[loop])
    if h.async_scheduling:  # (else the framework's own default: SGLang and TRT-LLM schedule ahead)
        fields.setdefault("async_scheduling", True)
    if h.memory_fraction is not None:
        fields.setdefault("gpu_memory_utilization", h.memory_fraction)
    if h.client_turnaround_s:
        fields.setdefault("client_turnaround_ms", h.client_turnaround_s * 1e3)

    if case.policy != "layout":  # disaggregated: the pools are the policy's arguments
        fields.setdefault("policy_args", case.policy_args)
    return RunSpec(policy=case.policy, layout=case.layout if case.policy == "layout" else None, model=case.model,
                   hardware=case.hardware, gpus=case.gpus, nodes=case.nodes,
                   weights=case.weights, kv_dtype=h.kv_dtype, engine=h.engine, max_concurrency=case.concurrency,
                   hbm_gb=h.hbm_gb, **fields)


def replay(case: Case, seed: int = 0, framework: str | None = None, choice: int = 0, **fields) -> Replayed:
    """Simulate the row's benchmark; means over the measured requests. `framework`: replay it under
    that framework's scheduler and defaults instead of the row's own. The row is replayed as its
    benchmark launched it (`as_launched`, recipe `choice`: the Replayed carries that case)."""
    case = as_launched(case, choice)
    h = harness(case, framework)
    rs = run_spec(case, h, **fields)
    # the harness's non-default MoE kernels, CUDA-graph sizes, DeepEP mode and PD handoff on the framework preset
    changes = {k: v for k, v in (("moe_kernel", h.moe_kernel or None), ("cuda_graph_sizes", h.cuda_graph_sizes),
                                 ("moe_a2a_call_s", h.moe_a2a_call_s), ("pd_handoff_s", h.pd_handoff_s),
                                 ("tokenize_s_per_token", h.tokenize_s_per_token))
               if v is not None}
    fw = dataclasses.replace(framework_preset(rs.framework, rs.framework_version), **changes) if changes else None
    r = run(workload_of(case, h, seed), rs, framework=fw)
    req = r.requests
    done = req[req["status"] == "completed"]
    return Replayed(case, float(done["ttft_ms"].mean()), float(done["tpot_ms"].mean()),
                    int(req["preemptions"].sum()), int((req["status"] == "rejected").sum()),
                    int(r.summary["kv_capacity_tokens"]))
