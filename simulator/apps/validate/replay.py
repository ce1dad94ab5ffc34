"""Replaying one measured benchmark run (a Case) as its benchmark ran it (harness.py says how).

C clients in a closed loop, `rounds x C` measured requests; the warm-up requests finish before the
measured phase starts (aiperf and benchmark_serving both await them), so the replay starts empty
and simulates the measured phase only. Lengths are fixed (aiperf) or drawn uniformly in
[0.8 L, L] (benchmark_serving --random-range-ratio 0.8) by the synthetic `batch` generator with a seed.

A replay is a `simulate` run and nothing else: every setting is a RunSpec field with a `simulate` flag,
and `command` writes the command line that gives the same prediction bit for bit
(tests/test_validate_command.py runs a sample). The replay sees the row without its measured columns (`blind`).
"""
from __future__ import annotations

import dataclasses
import math
import re
import shlex

from simulator.run import RunSpec, run
from simulator.workload.synthetic import generate, parse_spec

from .command import command
from .harness import Harness, as_launched, harness
from .rows import Case


@dataclasses.dataclass(frozen=True)
class Replayed:
    """A case's simulated means next to the measured ones."""

    case: Case
    ttft_ms: float
    tpot_ms: float
    preemptions: int
    rejected: int
    kv_capacity_tokens: int
    command: str = ""  # the `simulate` command that gives this prediction
    unknown: str = ""  # what of the row's setup is not recorded (Harness.unknown)

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


def blind(case: Case) -> Case:
    """The row without its measured values: what a replay may see."""
    return dataclasses.replace(case, ttft_ms=math.nan, tpot_ms=math.nan)


def trace_spec(case: Case, h: Harness, seed: int = 0) -> str:
    """rounds x C requests, all ready at 0 s (the closed loop issues them C at a time, in order), as the
    synthetic spec `simulate --trace` reads."""
    n = rounds(h, case) * case.concurrency

    def span(length: int) -> str:
        lo = int(length * h.length_ratio)
        return f"{lo}-{length}" if lo < length else str(length)
    return f"synthetic:batch?n={n}&input={span(case.isl)}&output={span(case.osl)}&seed={seed}"


def run_spec(case: Case, h: Harness, **fields) -> RunSpec:
    if h.async_scheduling:  # (else the framework's own default: SGLang, TRT-LLM and vLLM >= 0.14 schedule ahead)
        fields.setdefault("async_scheduling", True)
    if h.memory_fraction is not None:
        fields.setdefault("gpu_memory_utilization", h.memory_fraction)
    if h.client_turnaround_s:
        fields.setdefault("client_turnaround_ms", h.client_turnaround_s * 1e3)
    if h.tokenize_s_per_token is not None:
        fields.setdefault("tokenize_us_per_token", round(h.tokenize_s_per_token * 1e6, 9))
    if h.moe_kernel:
        fields.setdefault("moe_kernel", h.moe_kernel)
    if h.ssm_dtype:
        fields.setdefault("ssm_dtype", h.ssm_dtype)
    if h.mtp:
        fields.setdefault("mtp", h.mtp)
    if h.fp8_scales:
        fields.setdefault("fp8_scales", h.fp8_scales)
    if h.cuda_graph_max_bs is not None:
        fields.setdefault("cuda_graph_max_bs", h.cuda_graph_max_bs)
    if h.cuda_graph_padding is not None:
        fields.setdefault("cuda_graph_padding", h.cuda_graph_padding)
    if h.moe_a2a_call_s is not None:
        fields.setdefault("moe_a2a_call_us", round(h.moe_a2a_call_s * 1e6, 9))
    if h.pd_handoff_s is not None:
        fields.setdefault("pd_handoff_ms", round(h.pd_handoff_s * 1e3, 9))
    if case.policy != "layout":  # disaggregated: the pools are the policy's arguments
        fields.setdefault("policy_args", case.policy_args)
    return RunSpec(policy=case.policy, layout=case.layout if case.policy == "layout" else None, model=case.model,
                   hardware=case.hardware, gpus=case.gpus, nodes=case.nodes, weights=case.weights,
                   kv_dtype=h.kv_dtype, engine=h.engine, max_concurrency=case.concurrency,
                   framework=h.engine.scheduler, **fields,
                   # the row's version names its own framework's release, not another's (--framework replays)
                   framework_version=release(case.version) if h.engine.scheduler == case.backend else None)


def release(version: str) -> str | None:
    """The row's backend_version where it is a release number (0.18.0, 1.1.0rc2.post2), else None (an image tag
    such as gpt-oss-dev or glm5-hopper, or blank: the framework's defaults of the version its constants describe)."""
    return version if re.match(r"\d+(\.\d+)+", version or "") else None


def replay(case: Case, seed: int = 0, framework: str | None = None, **fields) -> Replayed:
    """Simulate the row's benchmark; means over the measured requests. `framework`: replay it under
    that framework's scheduler and defaults instead of the row's own. The row is replayed as its
    benchmark launched it (`as_launched`: the Replayed carries that case), never seeing its measurements."""
    launched = as_launched(case)
    seen = blind(launched)
    h = harness(seen, framework)
    rs = run_spec(seen, h, **fields)
    spec = trace_spec(seen, h, seed)
    r = run(generate(parse_spec(spec)), rs)
    req = r.requests
    done = req[req["status"] == "completed"]
    return Replayed(launched, float(done["ttft_ms"].mean()), float(done["tpot_ms"].mean()),
                    int(req["preemptions"].sum()), int((req["status"] == "rejected").sum()),
                    int(r.summary["kv_capacity_tokens"]), command=shlex.join(command(rs, spec)), unknown=h.unknown)

