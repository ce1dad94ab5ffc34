"""What each policy is and which knobs (`--policy-arg KEY=VALUE`) it takes: `simulate policies`.

Data, not prose: every default below is read from the constant or dataclass field the policy itself
uses (perfmodel/knobs.py, FlyingConfig, SiDPConfig, Seesaw's reference job), never a copied number;
defaults that depend on the run (model, hardware, GPUs) are said in words. Each policy's own
`parse_args(policy_args, ALLOWED)` is the authority on the names: `tests/test_cli_discover.py` checks
that this catalog lists exactly the names each policy accepts.
"""
from __future__ import annotations

import dataclasses

from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS, SIDP_B_STAR_CONTEXT_TOKENS, SIDP_HYSTERESIS_DECISIONS
from perfmodel.sidp import SiDPConfig
from perfmodel.specdec import MTP_ACCEPTANCE
from simulator.policies import LAYOUT_POLICIES, POLICIES
from simulator.policies.flying.config import FlyingConfig, SWITCHING
from simulator.policies.seesaw.policy import REF_INPUT, REF_OUTPUT
from simulator.policies.sidp.policy import B_STAR_RULES, MODES
from simulator.policies.static import STATIC


@dataclasses.dataclass(frozen=True)
class Knob:
    """One policy argument: its name, type, default (a value, or words when it depends on the run),
    what it means and where the default comes from."""

    name: str
    type: str
    default: object
    meaning: str
    source: str
    minimum: float | None = None  # the smallest value that means something (None: any), checked up front
    maximum: float | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def check(self, policy: str, value: str) -> None:
        """ValueError (one line) unless `value` parses as this knob's type within its bounds."""
        if self.type not in ("int", "float"):
            return  # str / on/off: the policy's own parser names the choices
        bounds = " and ".join(f"{op} {b:g}" for op, b in ((">=", self.minimum), ("<=", self.maximum))
                              if b is not None)
        want = f"{'an integer' if self.type == 'int' else 'a number'}{' ' + bounds if bounds else ''}"
        try:
            v = int(value) if self.type == "int" else float(value)
        except ValueError:
            raise ValueError(f"--policy-arg {self.name}={value!r}: {policy}'s {self.name} must be {want}") from None
        if (v != v or abs(v) == float("inf") or (self.minimum is not None and v < self.minimum)
                or (self.maximum is not None and v > self.maximum)):
            raise ValueError(f"--policy-arg {self.name}={value!r}: {policy}'s {self.name} must be {want}")


def _field_default(cls, name: str):
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


_FLY = "simulator/policies/flying/config.py (FlyingConfig)"
_SIDP = "perfmodel/sidp.py (SiDPConfig)"
_SIDP_POLICY = "simulator/policies/sidp/policy.py"
_SEESAW = "simulator/policies/seesaw/policy.py"
_DISAGG = "perfmodel/disagg.py (default_pools, pools_from_args)"
_DISAGG_POLICY = "simulator/policies/disagg/policy.py (ARGS)"
_SPEC_P = MTP_ACCEPTANCE

STATIC_ABOUT = {
    "dp": "data parallel: one replica per smallest TP that holds the model, over all GPUs",
    "tp": "tensor parallel over all GPUs (one instance; on several nodes one per node, DP across them)",
    "pp": "pipeline parallel over all GPUs (one instance; on several nodes one per node, DP across them)",
    "sp": "sequence parallel over all GPUs (one instance; on several nodes one per node, DP across them)",
    "ep": "expert parallel over all GPUs, attention data parallel (MoE models only)",
    "layout": "the layout given with --layout (or layout:tp=2,pp=4 in --compare); DP fills the GPUs",
}

ABOUT = {
    **STATIC_ABOUT,
    "shift": "Shift Parallelism: base (SP x TP) for big steps, shift (TP over all GPUs) for small ones, "
             "one KV cache (SYSTEMS.md 2)",
    "sidp": "SiDP: DP replicas sharing FFN weights, switching WaS <-> CaS on the effective batch (SYSTEMS.md 3)",
    "seesaw": "Seesaw: prefill under c_p, decode under c_d, KV parked in host memory between phases (SYSTEMS.md 4)",
    "flying": "Flying Serving: DP units bound on the fly into TP groups (SYSTEMS.md 5)",
    "disagg": "disaggregated prefill/decode: a prefill pool samples each first token, the KV moves (NVLink in a "
              "node, NICs across) to a decode pool that generates the rest (DistServe, Splitwise, Mooncake, Dynamo)",
}

KNOBS: dict[str, tuple[Knob, ...]] = {
    **{p: () for p in STATIC},
    "shift": (
        Knob("threshold", "int", SHIFT_THRESHOLD_TOKENS, "a step with more batched tokens than this runs the base "
             "(SP x TP) config, else the shift (TP) config", "perfmodel/knobs.py SHIFT_THRESHOLD_TOKENS "
             "(ArcticInference's documented value)", minimum=0),
        Knob("base", "str", "chosen by memory: the smallest TP whose two weight copies leave enough KV, SP over "
             "the rest", "the base layout, e.g. sp=8 or sp=4;tp=2 (SP x TP over all GPUs; also --layout)",
             "perfmodel/deploy.py deployment('shift')"),
    ),
    "sidp": (
        Knob("mode", "str", MODES[0], f"one of {', '.join(MODES)}: auto switches WaS <-> CaS on B*", _SIDP_POLICY),
        Knob("tp", "int", "the static DP deployment's TP (or the smallest SiDP fit with 2+ replicas)",
             "GPUs per replica (also read from --layout tp=N)", "perfmodel/estimate.py sidp_default_tp", minimum=1),
        Knob("dp", "int", "gpus // tp", "replicas", _SIDP_POLICY, minimum=2),
        Knob("slots", "int", _field_default(SiDPConfig, "cache_slots"), "weight cache slots per replica", _SIDP, minimum=1),
        Knob("window", "int", _field_default(SiDPConfig, "window"), "look-ahead layers of weight prefetch", _SIDP, minimum=1),
        Knob("peak_shifting", "on/off", _field_default(SiDPConfig, "peak_shifting"),
             "stagger the replicas' weight fetches", _SIDP),
        Knob("cas", "str", _field_default(SiDPConfig, "cas_variant"),
             "CaS variant: v1, v2 (+fusion), v3 (+dummy skipping), or the what-if staggered", _SIDP),
        Knob("b_star", "int", "by b_star_rule at ctx tokens of context, with the run's profile",
             "effective batch (FFN rows per replica) at which auto mode switches", _SIDP_POLICY, minimum=0),
        Knob("b_star_rule", "str", next(iter(B_STAR_RULES)), f"one of {', '.join(B_STAR_RULES)}: crossover = "
             "where WaS stops being slower than CaS; hide = where compute hides the fetch", _SIDP_POLICY),
        Knob("hysteresis", "int", SIDP_HYSTERESIS_DECISIONS, "decisions the other mode must win running before "
             "a switch", "perfmodel/knobs.py SIDP_HYSTERESIS_DECISIONS", minimum=0),
        Knob("ctx", "int", SIDP_B_STAR_CONTEXT_TOKENS, "context tokens per sequence B* is computed at",
             "perfmodel/knobs.py SIDP_B_STAR_CONTEXT_TOKENS", minimum=0),
    ),
    "seesaw": (
        Knob("c_p", "str", "the fastest prefill tp x pp layout over all GPUs for the input x output job",
             "prefill layout, e.g. pp=8 or tp=4;pp=2", "perfmodel/seesaw.py prefill_rate"),
        Knob("c_d", "str", "the fastest decode tp x pp layout over all GPUs for the input x output job",
             "decode layout, e.g. tp=8", "perfmodel/seesaw.py decode_rate"),
        Knob("cpu_buffer_gb", "float", "half the host memory", "CPU KV store, node total (GB)",
             "perfmodel/memory.py cpu_kv_buffer_bytes", minimum=0),
        Knob("input", "int", REF_INPUT, "input tokens of the reference job that picks c_p / c_d",
             _SEESAW + " REF_INPUT (TARGETS.md's 70B input)", minimum=1),
        Knob("output", "int", REF_OUTPUT, "output tokens of the reference job that picks c_p / c_d",
             _SEESAW + " REF_OUTPUT", minimum=1),
    ),
    "flying": (
        Knob("switching", "str", _field_default(FlyingConfig, "switching"),
             f"when busy units join a TP group, one of {', '.join(SWITCHING)}: hard = after their current step, "
             "sequential = once drained, soft = drained, an idle unit serving the TP requests meanwhile", _FLY),
        Knob("switch_ms", "float", _field_default(FlyingConfig, "switch_ms"),
             "cost of a live switch (set_TP_mode / reset_TP_mode)", _FLY + " LIVE_SWITCH_MS (TARGETS.md)", minimum=0),
        Knob("restart", "str", _field_default(FlyingConfig, "restart"),
             "live: switch_ms per switch; cold: cold_restart_s (the static comparison)", _FLY),
        Knob("cold_restart_s", "float", _field_default(FlyingConfig, "cold_restart_s"),
             "cost of a cold restart into a new static TP", _FLY + " COLD_RESTART_S (TARGETS.md, low end)", minimum=0),
        Knob("priority_tp", "int", _field_default(FlyingConfig, "priority_tp"),
             "requests with priority below this run TP (lower = more urgent, as vLLM)", _FLY),
        Knob("priority_width", "int", _field_default(FlyingConfig, "priority_width"),
             "units per priority TP group; 0 = half the node", _FLY, minimum=0),
        Knob("low_load", "int", _field_default(FlyingConfig, "low_load"),
             "in-flight requests below which new requests run TP over all units; 0 = the number of units", _FLY, minimum=0),
    ),
    "disagg": (
        Knob("prefill", "str", "half the GPUs (rounded down), laid out as --policy dp (one TP instance where "
             "they hold one replica); the GPUs left when only decode is given",
             "prefill pool: N x (instance layout), e.g. 2x(tp=2) or 1x(tp=2;pp=2)", _DISAGG),
        Knob("decode", "str", "the other half, laid out the same way; the GPUs left when only prefill is given",
             "decode pool: N x (instance layout), e.g. 1x(tp=4)", _DISAGG),
        Knob("decode_max_seqs", "int", "the run's --max-num-seqs",
             "requests one decode instance (under attention DP: one DP rank) runs at once; a full pool holds "
             "requests, their first token waiting (TRT-LLM max_batch_size, SGLang max-running-requests)",
             _DISAGG_POLICY, minimum=1),
        Knob("prefill_max_seqs", "int", "the run's --max-num-seqs",
             "requests one prefill instance (DP rank) batches in a step", _DISAGG_POLICY, minimum=1),
        Knob("prefill_max_tokens", "int", "the run's --max-num-batched-tokens",
             "tokens one prefill instance (DP rank) runs in a step", _DISAGG_POLICY, minimum=1),
        Knob("prefill_memory_fraction", "float", "the framework's own rule (--gpu-memory-utilization etc.)",
             "the prefill pool's engine memory setting in its framework's meaning: vLLM --gpu-memory-utilization, "
             "SGLang --mem-fraction-static (fractions of the GPU's memory for weights + KV), TRT-LLM "
             "free_gpu_memory_fraction (of what the weights leave free)", "simulator/policies/disagg/policy.py", minimum=0, maximum=1),
        Knob("decode_memory_fraction", "float", "the framework's own rule (--gpu-memory-utilization etc.)",
             "the decode pool's engine memory setting, as prefill_memory_fraction", "simulator/policies/disagg/policy.py", minimum=0, maximum=1),
        Knob("decode_routing", "str", "least_loaded",
             "which decode instance a request waits for: least_loaded (any with room, the ideal router) or "
             "round_robin (the next decode worker in turn, its FIFO even while another has room: Dynamo's "
             "default --router-mode)", "simulator/policies/disagg/coordinator.py (ROUTING)"),
        Knob("decode_mtp", "int", "none (no speculative decoding)",
             "draft tokens per decode step (MTP / EAGLE chain): each step costs d draft passes + a verify pass "
             "of 1 + d tokens per request and emits 1 + p + ... + p^d tokens", "perfmodel/specdec.py", minimum=0),
        Knob("mtp_acceptance", "float", _SPEC_P,
             "probability p that a draft token is accepted once its predecessors were (needs decode_mtp); the "
             "default is fitted on random-token benchmark prompts, real text accepts more (DeepSeek-V3: 0.85-0.9)",
             "perfmodel/specdec.py (MTP_ACCEPTANCE, fitted: docs/fidelity.md)", minimum=0, maximum=1),
    ),
}


def check_policy_args(policy: str, pairs) -> None:
    """Refuse, before any run, a knob value outside its declared type and bounds (a negative threshold
    would run every step in base mode): ValueError naming the knob. Unknown names are the policy's to refuse."""
    knobs = {k.name: k for k in KNOBS.get(policy, ())}
    for key, value in pairs:
        if key in knobs:
            knobs[key].check(policy, str(value).strip())


def knob_names(policy: str) -> tuple[str, ...]:
    """The policy arguments `policy` accepts (KeyError for an unknown policy)."""
    return tuple(k.name for k in KNOBS[policy])


def catalog() -> list[dict]:
    """Every policy of simulator.policies.POLICIES: name, what it is, whether it reads --layout, knobs."""
    return [{"policy": p, "about": ABOUT.get(p, ""), "layout": LAYOUT_POLICIES.get(p),
             "knobs": [k.as_dict() for k in KNOBS.get(p, ())]} for p in POLICIES]


def format_catalog(rows: list[dict]) -> str:
    """The catalog as text: a policy per paragraph, a knob per line."""
    lines = []
    for r in rows:
        lines.append(f"{r['policy']}: {r['about']}" + (f" (--layout: {r['layout']})" if r["layout"] else ""))
        if not r["knobs"]:
            lines.append("  no policy arguments")
        for k in r["knobs"]:
            d = k["default"]
            d = ("on" if d else "off") if isinstance(d, bool) else d
            lines.append(f"  {k['name']} ({k['type']}, default {d}): {k['meaning']} [{k['source']}]")
    return "\n".join(lines)
