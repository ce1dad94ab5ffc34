"""The one run path: (workload, RunSpec) -> Run (summary, request and step tables).

The CLI, sweeps, notebooks and benchmarks all call `run`, so a run means the same thing
everywhere: the same profile default (the hardware's calibrated profile; `profile="none"` for the
datasheet roofline), the same summary keys, and `kv_capacity_tokens` = the KV capacity of the whole
deployment in tokens (the sum over its engines; `max_request_tokens` is the largest one engine holds).
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import math
from pathlib import Path

import pandas as pd

from perfmodel.calibration.profile import resolve_profile
from perfmodel.deploy import cluster, layout_name
from perfmodel.framework import (DEFAULT_FRAMEWORK, check_knobs, for_hardware, framework_preset, with_async,
                                 with_deployment, with_knobs)
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.formats import check_kv_dtype
from perfmodel.hfconfig import SSM_DTYPE_BYTES
from perfmodel.specdec import MTP_ACCEPTANCE, SpecDecode
from perfmodel.modelspec import default_weights, load_model
from perfmodel.notes import checkpoint_format, datasheet_line, run_notes
from simulator import make_callable
from simulator.cluster.simulate import SimConfig, SimResult, simulate
from simulator.engine.config import EngineConfig, framework_engine
from simulator.policies import LAYOUT_POLICIES
from simulator.policies.catalog import check_policy_args
from simulator.results.metrics import summarize
from simulator.run_record import (DETAIL_KEYS, WORKLOAD_ARGS, file_sha256, max_in_flight, peak_second,  # noqa: F401
                                  run_config, vllm_keys, workload_recipe, workload_sha256)
from simulator.workload import load_trace
from simulator.workload.synthetic import generate, parse_spec


def check_client_turnaround(ms, max_concurrency: int, name: str = "--client-turnaround-ms") -> None:
    """A client turnaround is a number of ms >= 0, and only a closed loop has one (ValueError, one line)."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms < float("inf"):
        raise ValueError(f"{name} {ms!r} must be a number >= 0")
    if ms and max_concurrency <= 0:
        raise ValueError(f"{name} {ms} needs a closed loop (--max-concurrency C): an open loop's requests "
                         f"arrive at the trace's times, not after a client's turnaround")


MAX_SPAN_S = 1e8  # ~3 years from the first request to the last: public traces span weeks (BurstGPT 121 days)


def check_span(wl) -> None:
    """ValueError (one line) for a workload whose arrivals span more than MAX_SPAN_S: a timestamp in the
    wrong unit (1e15 s asked the per-second and per-window tables for petabytes), before any work."""
    t = wl.requests["arrival_s"].to_numpy(float)
    if len(t) and t.max() - t.min() > MAX_SPAN_S:
        i = int(t.argmax())
        rid = wl.requests["request_id"].iat[i] if "request_id" in wl.requests else i
        raise ValueError(f"{getattr(wl, 'source', 'trace')}: request_id {rid}: field 'arrival_s': {t[i]:g} s is "
                         f"{t.max() - t.min():g} s after the first request, more than {MAX_SPAN_S:g} s (~3 years): "
                         "a timestamp in the wrong unit?")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything a run is set up with besides the workload (the CLI's flags, a sweep's axes)."""

    policy: str = "shift"
    model: str = "llama-3.3-70b"  # preset, HF id or config.json
    hardware: str = "h200"
    gpus: int = 8  # GPUs the deployment uses in all, placed node-major: at most nodes x gpus_per_node
    weights: str | None = None  # None: the checkpoint's format, else fp8 where the hardware has fp8, else bf16
    kv_dtype: str = "bf16"
    fp8_scales: str | None = None  # fp8 activation scales (perfmodel.formats.FP8_SCALES); None: the checkpoint's
    # hybrid linear attention's recurrent state dtype (SGLang --mamba-ssm-dtype): None, the config's mamba_ssm_dtype
    ssm_dtype: str | None = None
    # speculative decoding in an aggregated engine (TRT-LLM speculative_config MTP num_nextn_predict_layers, SGLang
    # EAGLE steps): draft tokens a step (0: off) and the acceptance of each (None: perfmodel.specdec.MTP_ACCEPTANCE)
    mtp: int = 0
    mtp_acceptance: float | None = None
    profile: str | None = None  # None: the hardware's calibrated profile; "none": datasheet; a name or path
    layout: str | None = None
    policy_args: tuple = ()  # (("threshold", "256"), ...): dicts are accepted and sorted into pairs
    engine: EngineConfig = EngineConfig()
    router: str = "least-tokens"
    max_concurrency: int = 0
    # closed loop: ms from a response's end to the client handing its slot to the next request (the
    # benchmark client's own loop; not in any TTFT). 0: at once (benchmark_serving's asyncio loop)
    client_turnaround_ms: float = 0.0
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    gpu_memory_utilization: float | None = None  # None: the framework's (vLLM's 0.9)
    step_overhead_ms: float | None = None  # None: the framework's (0 when its loop schedules ahead: framework.py)
    # None: the framework's front-end tokenization per prompt token (perfmodel/framework.py, measured); 0: none
    tokenize_us_per_token: float | None = None
    # the framework's loop schedules step n+1 while step n runs (vLLM --async-scheduling; TRT-LLM's and
    # SGLang's overlap schedulers): None, the framework's default (vLLM >= 0.14, TRT-LLM, SGLang: on)
    async_scheduling: bool | None = None
    hbm_gb: float | None = None  # None: the preset's HBM (what the driver reports for H100 / H200); else this many GB
    # a deployment's settings beyond the framework's defaults (perfmodel.framework.with_deployment): a fused-MoE
    # kernel family ("marlin": vLLM's VLLM_MXFP4_USE_MARLIN=1), the host cost of each inter-node DeepEP
    # normal-mode all_to_all, and a disaggregated request's KV-transfer-end -> first-token handoff. None: the
    # framework's (default kernels, 0, 0)
    moe_kernel: str | None = None
    moe_a2a_call_us: float | None = None
    pd_handoff_ms: float | None = None
    seq_overhead_us: float | None = None  # None: the framework's (0); Framework.seq_overhead_s says what it is
    # the host floor of an overlapped loop, per step and per sequence (Framework.host_floor_s, host_floor_seq_s).
    # None: the framework's (0, but TRT-LLM 1.0's fitted preset)
    host_floor_us: float | None = None
    host_floor_seq_us: float | None = None
    # CUDA graphs (perfmodel.graphs): the largest captured batch (SGLang --cuda-graph-max-bs, TRT-LLM
    # cuda_graph_config max_batch_size) and whether steps are padded to a captured size (TRT-LLM enable_padding,
    # SGLang's padding unless --disable-cuda-graph-padding). None: the framework's defaults
    cuda_graph_max_bs: int | None = None
    cuda_graph_padding: bool | None = None
    # serving framework (vllm, sglang, trtllm): its scheduler (engine.scheduler) and memory rule/loop
    # (perfmodel.framework.FRAMEWORKS). None: the engine's scheduler says which
    framework: str | None = None
    framework_version: str | None = None  # where a default changed (vLLM >= 0.14: async scheduling)
    nodes: int = 1  # nodes of the cluster (> 1 needs a preset with an inter-node network; docs/multinode.md)
    gpus_per_node: int | None = None  # None: the preset's; fewer models a partly used node

    def __post_init__(self):
        check_knobs(self.gpu_memory_utilization, self.step_overhead_ms, self.tokenize_us_per_token)
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name}={v} must be a positive number of ms")
        if self.mtp < 0:
            raise ValueError(f"mtp={self.mtp} must be >= 0 (the draft tokens a step)")
        if self.mtp_acceptance is not None and not self.mtp:
            raise ValueError("mtp_acceptance needs mtp >= 1 (the draft tokens a step: --mtp N)")
        if self.mtp:
            SpecDecode(self.mtp, self.mtp_acceptance if self.mtp_acceptance is not None else MTP_ACCEPTANCE)  # bounds
        if self.ssm_dtype is not None and self.ssm_dtype not in SSM_DTYPE_BYTES:
            raise ValueError(f"ssm_dtype={self.ssm_dtype!r} not one of {sorted(SSM_DTYPE_BYTES)}")
        with_deployment(DEFAULT_FRAMEWORK, self.moe_kernel, self.moe_a2a_call_us, self.pd_handoff_ms,
                        self.seq_overhead_us, self.cuda_graph_max_bs, self.cuda_graph_padding, self.host_floor_us,
                        self.host_floor_seq_us)  # or one line
        if self.hbm_gb is not None and (isinstance(self.hbm_gb, bool) or not isinstance(self.hbm_gb, (int, float))
                                        or not 0 < self.hbm_gb < float("inf")):
            raise ValueError(f"hbm_gb={self.hbm_gb!r} must be a finite number > 0 (GB the driver reports per GPU)")
        check_client_turnaround(self.client_turnaround_ms, self.max_concurrency)
        if self.framework is None:
            object.__setattr__(self, "framework", self.engine.scheduler)
        framework_preset(self.framework, self.framework_version)  # known name and version, or one line
        if self.engine.scheduler != self.framework:
            if self.engine != EngineConfig():
                raise ValueError(f"framework {self.framework!r} with an engine scheduled by "
                                 f"{self.engine.scheduler!r}: give one (framework_engine builds the engine)")
            object.__setattr__(self, "engine", framework_engine(self.framework))
        if isinstance(self.policy_args, dict):
            object.__setattr__(self, "policy_args", tuple((k, str(v)) for k, v in self.policy_args.items()))
        check_policy_args(self.policy, self.policy_args)  # a knob's type and bounds, before any work


@dataclasses.dataclass
class Run:
    """One finished run: the summary (vLLM benchmark keys + ours), per-request and per-step frames."""

    summary: dict  # summary.json: vLLM's result-file keys, ours, and `config` (what rerun needs)
    requests: object  # pandas DataFrame, one row per request
    steps: object  # pandas DataFrame, one row per step or fast-forwarded stretch
    result: SimResult  # the records and engine facts behind them


@functools.lru_cache(maxsize=16)
def model_spec(model: str, weights: str, kv_dtype: str, fp8_scales: str | None = None):
    return load_model(model, weights=weights, kv=kv_dtype, fp8_scales=fp8_scales)


@functools.lru_cache(maxsize=16)
def hardware_and_profile(hardware: str, profile: str | None):
    """The hardware preset and the profile a run uses (None for the datasheet roofline)."""
    hw = load_hardware(hardware)
    return hw, resolve_profile(hw, profile)


def workload(spec_text: str):
    """A synthetic workload from a spec string, e.g. 'onoff?n=300&input=4096&output=250'."""
    return generate(parse_spec(spec_text if spec_text.startswith("synthetic:") else "synthetic:" + spec_text))


class _Batched:
    """A progress callback told in batches (a progress bar's update costs ~2 us; a run ends ~1e5
    requests a second)."""

    EVERY = 256

    def __init__(self, progress):
        self.progress, self.pending = progress, 0

    def __call__(self, n: int) -> None:
        self.pending += n
        if self.pending >= self.EVERY:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.progress(self.pending)
            self.pending = 0


def deployment_name(engines: list) -> str:
    """The whole deployment from a SimResult's engines: 'dp=4 x tp=2', 'tp=8', Shift's 'base: sp=8 /
    shift: tp=8', SiDP's 'dp=4 x tp=2 (was / cas)', Flying's every binding ('dp: dp=8 x tp=1 / tp2: ...')."""
    gpus = sum(len(e["gpus"]) for e in engines)
    names = {}
    for mode, text in engines[0]["modes"].items():
        try:
            lay = ParallelLayout.parse(text)
        except LayoutError:  # not a layout: the mode names itself
            names[mode] = text
            continue
        names[mode] = layout_name(dataclasses.replace(lay, dp=max(lay.dp, gpus // lay.gpus_per_instance)))
    if len(set(names.values())) == 1:  # one deployment; modes that are not its layout are listed after it
        name = next(iter(names.values()))  # (mode names it already states are not repeated: disagg's)
        modes = [m for m, text in engines[0]["modes"].items() if m != text and m not in name]
        return f"{name} ({' / '.join(modes)})" if modes else name
    return " / ".join(f"{m}: {n}" for m, n in names.items())


# issue 36's 1 GB: collecting a 1M-request run's garbage before framing lowers the half-load CLI's peak from
# 0.96-1.06 GB (allocator-dependent) to 0.91 GB (benchmarks/overload_speed.py --cli-loads 0.5)
GC_AFTER_REQUESTS = 100_000


def run(wl, rs: RunSpec, progress=None, framework=None, *, workload_args=None, detail: bool = False) -> Run:
    """Simulate workload `wl` as `rs` says; `progress(n)` hears of every request that ends. `framework`:
    the perfmodel Framework (None: rs.framework's preset) whose gpu_memory_utilization and
    step_overhead_s rs.gpu_memory_utilization and rs.step_overhead_ms (when set) replace.
    `workload_args`: how `wl` was built (a dict or the CLI's argparse Namespace with the keys of
    WORKLOAD_ARGS: trace, trace_format, read options, transforms), recorded in summary["config"] so
    that `simulator.rerun` rebuilds it; without it the workload is its trace (`wl.source`) as read.
    `detail`: fill vLLM's per-request lists (input_lens, ttfts, ...; vLLM's --save-detailed), else null."""
    custom_framework = framework is not None
    check_span(wl)
    framework = framework or framework_preset(rs.framework, rs.framework_version)
    if rs.layout and rs.policy not in LAYOUT_POLICIES:  # it would run its own layout under the one asked for
        raise LayoutError(f"--policy {rs.policy} chooses its own layout and does not take --layout {rs.layout}; "
                          f"run it with --policy layout --layout {rs.layout} (shift reads --layout as its base, "
                          f"sidp its tp)")
    hw, prof = hardware_and_profile(rs.hardware, rs.profile)
    if rs.hbm_gb is not None:
        hw = dataclasses.replace(hw, hbm_bytes=float(rs.hbm_gb) * 1e9)
    hw, _ = cluster(hw, rs.nodes, rs.gpus_per_node, rs.gpus)  # rs.gpus fits nodes x gpus_per_node, or one line
    # default: the checkpoint's own format where its config declares one (mxfp4, fp8), else fp8 where the GPU
    # has fp8 tensor cores, else bf16 (perfmodel.modelspec.default_weights). fp8 on a GPU without them runs
    # as vLLM runs it there, weight-only W8A16 (fp8 bytes, bf16 compute: perfmodel.ops.compute_dtype)
    weights = rs.weights or default_weights(rs.model, hw.has_fp8)
    spec = model_spec(rs.model, weights, rs.kv_dtype, rs.fp8_scales)
    if rs.ssm_dtype is not None and spec.num_linear_layers:  # (a dense model has no recurrent state to set)
        spec = dataclasses.replace(spec, linear_state_bytes=SSM_DTYPE_BYTES[rs.ssm_dtype])
    check_kv_dtype(rs.kv_dtype, hw, framework.name)
    framework = with_deployment(framework, rs.moe_kernel, rs.moe_a2a_call_us, rs.pd_handoff_ms, rs.seq_overhead_us,
                                rs.cuda_graph_max_bs, rs.cuda_graph_padding, rs.host_floor_us, rs.host_floor_seq_us)
    framework = with_async(with_knobs(framework, rs.gpu_memory_utilization, rs.step_overhead_ms,
                                      rs.tokenize_us_per_token), rs.async_scheduling, rs.step_overhead_ms)
    framework = for_hardware(framework, hw)
    if framework.reserve_rule and rs.engine.max_num_batched_tokens:  # SGLang >= 0.5.3 reserves by its chunk size
        framework = dataclasses.replace(framework, chunk_tokens=rs.engine.max_num_batched_tokens)
    cfg = SimConfig(policy=rs.policy, layout=rs.layout, gpus=rs.gpus, policy_args=rs.policy_args, engine=rs.engine,
                    router=rs.router, max_concurrency=rs.max_concurrency, framework=framework,
                    client_turnaround_s=float(rs.client_turnaround_ms) / 1e3,
                    spec_decode=SpecDecode(rs.mtp, rs.mtp_acceptance if rs.mtp_acceptance is not None
                                           else MTP_ACCEPTANCE) if rs.mtp else None)
    tick = _Batched(progress) if progress is not None else None
    res = simulate(wl, spec, hw, cfg, prof, progress=tick)
    if tick is not None:
        tick.flush()
    if len(wl) >= GC_AFTER_REQUESTS:  # the run's simpy graph (engines, processes, step tables) is cyclic garbage
        gc.collect()  # now: freed before the frames are built, not at some later collection (~60 ms at 1M requests)
    steps = res.steps.frame(final=True)  # (first, its rows released: a lower peak before the requests' frame)
    req = res.requests.frame()
    summ = summarize(req, steps, res.engines, rs.slo_ttft_ms, rs.slo_tpot_ms)
    notes = list(dict.fromkeys(e["note"] for e in res.engines if e.get("note")))
    # what the numbers rest on (perfmodel.notes, as `perfmodel estimate` says it): a profile section the run
    # needs and the profile lacks, a profile fitted for another GPU, a default weight format not the checkpoint's,
    # a framework version outside the cited ones
    notes += run_notes(prof, hw, spec, weights, rs.weights is not None, rs.gpus, checkpoint_format(rs.model),
                       rs.framework, rs.framework_version)
    if prof is None and rs.profile is None:  # (no calibrated profile for this GPU: a datasheet run, not asked for)
        notes.append(f"{hw.name} has no calibrated profile: {datasheet_line(hw)}")
    if getattr(wl, "failed_dropped", 0):  # (--drop-failed: never replayed, so counted here, not silently gone)
        summ["dropped_failed_requests"] = int(wl.failed_dropped)
        notes.append(f"{wl.failed_dropped} request(s) the trace marks failed were dropped at load (--drop-failed): "
                     f"not among num_requests")
    summ.update(policy=rs.policy, layout=deployment_name(res.engines), notes=notes,
                engines=len(res.engines), model=spec.name, hardware=hw.name, gpus=rs.gpus, weights=weights,
                kv_dtype=rs.kv_dtype, profile=getattr(prof, "name", None) or "datasheet",
                trace=getattr(wl, "source", ""), kv_capacity_tokens=res.kv_capacity_tokens,
                max_request_tokens=max(e["kv_capacity_tokens"] for e in res.engines),
                max_model_len=res.max_model_len, framework=rs.framework, framework_version=rs.framework_version,
                gpu_memory_utilization=framework.gpu_memory_utilization,
                step_overhead_ms=round(1e3 * framework.step_overhead_s, 9),  # as given: 0.3, not 0.30000000000000004
                tokenize_us_per_token=round(1e6 * framework.tokenize_s_per_token, 9),
                async_scheduling=framework.schedule_ahead)
    recipe = workload_recipe(wl, workload_args)
    summ.update(vllm_keys(req, rs, recipe, detail))
    summ["max_in_flight_requests"] = max_in_flight(req)
    summ["config"] = run_config(wl, rs, recipe, prof, framework if custom_framework else None)
    return Run(summ, req, steps, res)


def run_summary(wl, policy: str, *, frames: bool = False, **setup):
    """`run` for notebooks, tests and benchmarks: the summary (with frames, also the request and
    step frames). `setup`: RunSpec fields, e.g. model=, gpus=, profile="none", policy_args={...}."""
    r = run(wl, RunSpec(policy=policy, **setup))
    return (r.summary, r.requests, r.steps) if frames else r.summary


def compare(workload, policies, **setup):
    """One run per policy on the same workload, as a pandas DataFrame of summaries (one row per
    policy, indexed by it). `workload`: a Workload, or a trace file / bundled name / synthetic spec
    for `load_trace`; `policies`: names, or 'layout:tp=2,pp=4' for the layout policy with its layout
    (as `simulate --compare`); `setup`: RunSpec fields, e.g. model=, gpus=, profile="none"."""
    wl = load_trace(workload) if isinstance(workload, (str, Path)) else workload
    recipe = {"trace": str(workload)} if isinstance(workload, (str, Path)) else None
    rows, labels = [], []
    for item in [policies] if isinstance(policies, str) else policies:
        policy, _, layout = str(item).partition(":")
        fields = dict(setup, policy=policy, **({"layout": layout} if layout else {}))
        rows.append(run(wl, RunSpec(**fields), workload_args=recipe).summary)
        labels.append(str(item))
    return pd.DataFrame(rows, index=pd.Index(labels, name="policy"))


def run_spec_from_config(d: dict) -> RunSpec:
    """The RunSpec a summary's config["run_spec"] records (JSON lists back to tuples)."""
    d = dict(d)
    d["engine"] = EngineConfig(**d["engine"])
    d["policy_args"] = tuple(tuple(p) for p in d.get("policy_args") or ())
    return RunSpec(**d)


make_callable(__name__, "run")  # `from simulator import run` gives this module, callable as run(...)
