"""Measured serving runs (aiconfigurator's silicon CSV schema) read into replayable cases.

One aggregated row is one engine deployment serving a closed-loop benchmark: `silicon_concurrency`
clients, every request `isl` tokens in and `osl` out, mean TTFT and TPOT measured. A row the
simulator cannot replay yet becomes a Skip with its reason (never silently dropped).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model
from perfmodel.notes import checkpoint_format
from simulator.workload.errors import TraceError

REQUIRED = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "tp_size", "silicon_ttft_ms",
            "silicon_tpot_ms")
# the CSV's system names -> hardware presets
SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
           "gb300": "gb300", "a100_sxm": "a100"}
# weight formats (gemm_quant_mode) -> our weight dtypes. 4-bit weights on Hopper run weight-only
# (dequantised in the GEMM): gpt-oss ships MXFP4, which vLLM runs on H100 as W4A16 (Marlin/Triton).
WEIGHTS = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4", "mxfp4": "mxfp4",
           "int4_wo": "int4"}
# aiconfigurator's harness labels gpt-oss's MXFP4 experts gemm_quant_mode nvfp4: a checkpoint shipped in mxfp4
# (its config's quantization_config) runs as mxfp4 whatever 4-bit label its row carries
FP4_LABELS = ("nvfp4", "fp4")
# weight-only int4 is modelled as the experts-only W4A16 scheme of checkpoints shipped in it (Kimi-K2.5:
# compressed-tensors int4, group 32, perfmodel.modelspec.EXPERTS_ONLY); of any other model (every linear layer
# in int4) it is not, and its rows are skipped with that reason
INT4_CHECKPOINTS_ONLY = ("int4_wo",)


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured row as the simulator replays it."""

    row: int  # position in the file (0-based data row), for messages
    id: str
    backend: str
    version: str  # "" when the file has none
    model: str  # the HF id; perfmodel resolves it to a preset
    hardware: str
    weights: str
    layout: str  # one engine's layout, e.g. "tp=4" or "tp=4,ep=4"
    gpus: int
    isl: int
    osl: int
    concurrency: int
    batch_size: int  # the engine's max batch the deployment was set up for (the CSV's batch_size)
    ttft_ms: float  # measured means
    tpot_ms: float
    # disaggregated rows: policy "disagg" with its pools ((prefill, "Nx(layout)"), (decode, ...)); nodes of
    # the deployment (GPUs placed node-major, the hardware preset's gpus_per_node a node)
    policy: str = "layout"
    policy_args: tuple = ()
    nodes: int = 1
    date: str = ""  # the run's day (measured_date, YYYY-MM-DD; "" when not recorded): which launch script was in force
    workers: tuple = ()  # disaggregated: (prefill, decode) worker counts where the row records them, else ()

    @property
    def group(self) -> str:
        mode = " disagg" if self.policy == "disagg" else ""
        return f"{self.backend} {self.model.split('/')[-1]} {self.hardware}{mode}"


@dataclasses.dataclass(frozen=True)
class Skip:
    row: int
    id: str
    backend: str
    model: str
    reason: str
    group: str = ""  # the group its row would have been reported in (Case.group), "" when unknown


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip()


def _int(v, default: int = 0) -> int:
    t = _text(v)
    return int(float(t)) if t else default


def read_measurements(path) -> pd.DataFrame:
    """The CSV as strings-or-numbers; TraceError naming the file and the first missing column."""
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise TraceError(str(path), "no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise TraceError(str(path), f"not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(str(path), f"missing column(s) {missing}", field=missing[0])
    return df


def _is_moe(model: str) -> bool:
    try:
        return load_model(model).is_moe
    except ValueError:
        return False


def _layout(r: dict, pre: str = "") -> tuple[str, int]:
    """One engine's layout from the row's `<pre>tp_size` ... `<pre>moe_ep_size` columns, and its GPUs.
    Attention DP (`attention_dp_size`) is our dp: DP attention ranks, each TP-sharded, with the MoE's EP
    group spanning them (perfmodel.comm: EP over DP ranks dispatches with all_to_all)."""
    tp, pp = _int(r.get(pre + "tp_size"), 1), _int(r.get(pre + "pp_size"), 1)
    adp, ep = _int(r.get(pre + "attention_dp_size"), 1), _int(r.get(pre + "moe_ep_size"), 1)
    moe_tp = _int(r.get(pre + "moe_tp_size"))
    moe = _is_moe(_text(r.get("model_path")))
    if not _text(r.get(pre + "attention_dp_size")) and moe and moe_tp * ep > tp and moe_tp * ep % tp == 0:
        # attention DP not recorded: aiconfigurator's rows keep tp x attention_dp == moe_tp x moe_ep (its
        # ModelConfig.resolve_moe_parallelism, aiconfigurator-core 0.12.0 sdk/config.py:84-140), so a MoE
        # wider than the attention TP group spans that many attention-DP ranks (regression: vLLM
        # Qwen3-235B-A22B-FP8 tp 1 / moe_tp 2 rows were replayed on one GPU and refused: 236 GB of weights)
        adp = moe_tp * ep // tp
    if adp > 1 and ep <= 1 and moe_tp in (0, adp * tp) and moe:
        ep = adp * tp  # MoE split not recorded, or TP over every rank: vLLM's DP without --enable-expert-parallel
        # shards the MoE over all DP x TP ranks (tensor-parallel experts); costed as EP over them (same bytes per GPU)
    parts = ([f"dp={adp}"] if adp > 1 else []) + [f"tp={tp}"] + ([f"pp={pp}"] if pp > 1 else []) \
        + ([f"ep={ep}"] if ep > 1 else [])
    return ",".join(parts), adp * tp * pp


def case_of(i: int, r: dict, source: str = "<measurements>") -> Case | Skip:
    """Row `i` (a dict of the CSV's columns) as a Case, or a Skip saying why it cannot be replayed."""
    rid, backend, model = _text(r.get("id")), _text(r.get("backend")), _text(r.get("model_path"))

    disagg = _text(r.get("mode")) == "disagg"
    hw = SYSTEMS.get(_text(r.get("system")))

    def skip(reason: str) -> Skip:
        group = f"{backend} {model.split('/')[-1]} {hw or _text(r.get('system'))}" + (" disagg" if disagg else "")
        return Skip(i, rid, backend, model, reason, group)

    if hw is None:
        return skip(f"system {_text(r.get('system'))!r} has no hardware preset")
    quant = _text(r.get("gemm_quant_mode"))
    if quant not in WEIGHTS:
        return skip(f"weight format {quant!r} is not modelled")
    if quant in INT4_CHECKPOINTS_ONLY and checkpoint_format(model) != "int4":
        return skip(f"weight format {quant!r} of a model not shipped in int4 (every linear layer in int4) is not "
                    "modelled")
    policy, args, workers = "layout", (), ()
    if disagg:  # prefill and decode pools: <pre>num_workers engines of <pre>'s layout each (blank: 1)
        (pl, pg), (dl, dg) = _layout(r, "prefill_"), _layout(r, "decode_")
        pw, dw = _int(r.get("prefill_num_workers"), 1), _int(r.get("decode_num_workers"), 1)
        workers = (pw, dw) if _text(r.get("prefill_num_workers")) and _text(r.get("decode_num_workers")) else ()
        policy, args = "disagg", (("prefill", f"{pw}x({pl})"), ("decode", f"{dw}x({dl})"))
        layout, gpus = f"prefill {pw}x({pl}) decode {dw}x({dl})", pw * pg + dw * dg
        batch = _int(r.get("decode_batch_size")) * dw
    else:
        layout, gpus = _layout(r)
        batch = _int(r.get("batch_size"))
    if disagg and not _int(r.get("silicon_concurrency")):
        # agg rows fall back to batch_size, which the schema defines as the benchmark's concurrency for agg
        # (README beside the data); a disagg row's batch columns are per-worker engine limits, so a blank
        # silicon_concurrency leaves the replay without its clients (the 7 Qwen3 disagg rows of the H100 file,
        # ids "..._c_..."; replayed at decode batch x workers they were 2-3x off in TPOT: docs/fidelity.md)
        return skip("disaggregated row without silicon_concurrency: the benchmark's concurrency is not recorded")
    conc = _int(r.get("silicon_concurrency")) or batch
    try:
        isl, osl = _int(r.get("isl")), _int(r.get("osl"))
        ttft, tpot = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
    except (TypeError, ValueError) as e:
        raise TraceError(source, str(e), line=i + 2, field="isl/osl/silicon_*") from None
    for name, v in (("isl", isl), ("osl", osl), ("silicon_concurrency", conc)):
        if v < 1:
            raise TraceError(source, f"{rid}: {name}={v} must be >= 1", line=i + 2, field=name)
    if not (ttft > 0 and tpot > 0):
        raise TraceError(source, f"{rid}: measured TTFT and TPOT must be > 0", line=i + 2,
                         field="silicon_ttft_ms")
    per_node = load_hardware(hw).gpus_per_node  # (the HGX nodes the rows ran on: the preset's node)
    weights = "mxfp4" if quant in FP4_LABELS and checkpoint_format(model) == "mxfp4" else WEIGHTS[quant]
    return Case(i, rid, backend, _text(r.get("backend_version")), model, hw, weights, layout, gpus,
                isl, osl, conc, batch or conc, ttft, tpot, policy, args, -(-gpus // per_node),
                _text(r.get("measured_date"))[:10], workers)


def cases(df: pd.DataFrame, source: str = "<measurements>") -> tuple[list[Case], list[Skip]]:
    """Every row as a Case or a Skip (together: every row, in file order)."""
    got, skipped = [], []
    for i, r in enumerate(df.to_dict("records")):
        c = case_of(i, r, source)
        (got if isinstance(c, Case) else skipped).append(c)
    return got, skipped
