"""The `simulate` command line of a RunSpec: what a replayed row's prediction is, as a user types it.

Every field that differs from what the flags' defaults give is written; a field no flag can set raises
(ValueError naming it), so a replay can never depend on a setting `simulate` does not offer.
tests/test_validate_command.py parses these lines back with simulate's own parser and runs a sample.
"""
from __future__ import annotations

from simulator.engine.config import EngineConfig, framework_engine
from simulator.run import RunSpec

# EngineConfig field -> (flag, how its value is written: a function, or for a bare switch the value it sets)
ENGINE_FLAGS = {
    "max_num_batched_tokens": ("--max-num-batched-tokens", str),
    "max_num_seqs": ("--max-num-seqs", str),
    "enable_chunked_prefill": ("--no-chunked-prefill", False),
    "block_size": ("--block-size", str),
    "schedule_order": ("--schedule-order", str),
    "max_waiting": ("--max-waiting", str),
    "priority_scheduling": ("--priority-scheduling", True),
    "fast_forward": ("--no-fast-forward", False),
    "dp_lockstep": ("--dp-lockstep", str),
    "reserve_full_prompt": ("--reserve-full-prompt", True),
    "max_model_len": ("--max-model-len", str),
    "enable_prefix_caching": ("--no-prefix-caching", False),
    "batch_wait_timeout_iters": ("--batch-wait-timeout-iters", str),
    "batch_wait_max_tokens_ratio": ("--batch-wait-max-tokens-ratio", repr),
    "adp_balance": ("--adp-balance", True),
    "adp_timeout_iters": ("--adp-timeout-iters", str),
    "adp_batching_wait_iters": ("--adp-batching-wait-iters", str),
}
# RunSpec field -> flag (values written with repr: floats round-trip exactly); None values are not written
SPEC_FLAGS = {
    "layout": "--layout", "model": "--model", "hardware": "--hardware", "gpus": "--gpus", "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node", "weights": "--weights", "kv_dtype": "--kv-dtype", "profile": "--profile",
    "router": "--router", "max_concurrency": "--max-concurrency", "client_turnaround_ms": "--client-turnaround-ms",
    "slo_ttft_ms": "--slo-ttft-ms", "slo_tpot_ms": "--slo-tpot-ms",
    "gpu_memory_utilization": "--gpu-memory-utilization", "step_overhead_ms": "--step-overhead-ms",
    "tokenize_us_per_token": "--tokenize-us-per-token", "framework": "--framework",
    "framework_version": "--framework-version", "moe_kernel": "--moe-kernel", "moe_a2a_call_us": "--moe-a2a-call-us",
    "pd_handoff_ms": "--pd-handoff-ms", "seq_overhead_us": "--seq-overhead-us", "hbm_gb": "--hbm-gb",
    "host_floor_us": "--host-floor-us", "host_floor_seq_us": "--host-floor-seq-us",
    "ssm_dtype": "--mamba-ssm-dtype", "fp8_scales": "--fp8-scales",
    "mtp": "--mtp", "mtp_acceptance": "--mtp-acceptance", "cuda_graph_max_bs": "--cuda-graph-max-bs",
}
SWITCHES = {"async_scheduling": "--async-scheduling", "cuda_graph_padding": "--cuda-graph-padding"}  # on / off
HANDLED = set(SPEC_FLAGS) | set(SWITCHES) | {"policy", "policy_args", "engine"}


def _text(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def command(rs: RunSpec, trace: str) -> list[str]:
    """argv of `simulate` (program name first) that runs `rs` on `trace` (a file or synthetic spec)."""
    argv = ["simulate", "--trace", trace, "--policy", rs.policy]
    plain = RunSpec()
    for field in rs.__dataclass_fields__:
        if field not in HANDLED:
            raise ValueError(f"RunSpec.{field} has no simulate flag (simulator/apps/validate/command.py)")
        v = getattr(rs, field)
        if field in SPEC_FLAGS and v is not None and (v != getattr(plain, field) or field in ("model", "hardware",
                                                                                              "gpus")):
            argv += [SPEC_FLAGS[field], _text(v)]
    for field, flag in SWITCHES.items():
        if getattr(rs, field) is not None:
            argv += [flag, "on" if getattr(rs, field) else "off"]
    for k, v in rs.policy_args:
        argv += ["--policy-arg", f"{k}={v}"]
    return argv + _engine_flags(rs.engine, framework_engine(rs.framework))


def _engine_flags(eng: EngineConfig, base: EngineConfig) -> list[str]:
    out = []
    for field in eng.__dataclass_fields__:
        v = getattr(eng, field)
        if v == getattr(base, field):
            continue
        if field not in ENGINE_FLAGS:
            raise ValueError(f"EngineConfig.{field}={v!r} has no simulate flag (simulator/apps/validate/command.py)")
        flag, how = ENGINE_FLAGS[field]
        if isinstance(how, bool):
            if v != how:
                raise ValueError(f"EngineConfig.{field}={v!r}: {flag} sets {how}, the framework's default is the other")
            out.append(flag)
        elif v is not None:
            out += [flag, how(v)]
    return out
