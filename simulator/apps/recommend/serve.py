"""The serving command lines of a recommended deployment: vLLM, SGLang, TRT-LLM, and what needs a plugin."""
from __future__ import annotations

import json
from pathlib import Path

from perfmodel.disagg import parse_pool
from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import load_model
from simulator.apps.recommend.support import why_not

# ArcticInference flags: --ulysses-sequence-parallel-size, --enable-shift-parallel, --shift-parallel-threshold
# (snowflakedb/ArcticInference docs/shift-parallel.rst; default threshold 256, as perfmodel.knobs)
PLUGIN = {
    "shift": "Shift Parallelism needs Snowflake ArcticInference (pip install arctic-inference; vLLM plugin): "
             "vllm serve MODEL --ulysses-sequence-parallel-size SP --enable-shift-parallel "
             "--shift-parallel-threshold T",
    "sp": "Ulysses sequence parallelism needs Snowflake ArcticInference (vLLM plugin): "
          "--ulysses-sequence-parallel-size SP",
    "sidp": "SiDP is a research prototype: no upstream vLLM / SGLang / TRT-LLM flag, so no command",
    "seesaw": "Seesaw is a research prototype: no upstream vLLM / SGLang / TRT-LLM flag, so no command",
    "flying": "Flying Serving is a research prototype: no upstream vLLM / SGLang / TRT-LLM flag, so no command",
}


def hf_name(model: str) -> str:
    """The Hugging Face id of a preset (its config's _name_or_path), else the name as given."""
    path = Path(__file__).resolve().parents[3] / "perfmodel" / "models" / f"{model}.json"
    try:
        return json.loads(path.read_text()).get("_name_or_path") or model
    except (OSError, ValueError):
        return model


def degrees_of(row: dict, gpus: int) -> dict:
    """dp, tp, pp, sp, ep of a ranked row (static: its layout; dynamic: the deployment it names first)."""
    deg = dict(row.get("degrees") or {})
    if deg:
        return deg
    text = (row.get("deployment") or "").split("/")[0].split("(")[0]
    text = text.split(":")[-1].replace(" x ", ",").replace(" ", "")
    try:
        lay = ParallelLayout.parse(text)
    except LayoutError:
        lay = ParallelLayout(tp=gpus)
    dp = max(lay.dp, gpus // lay.gpus_per_instance)
    return {"dp": dp, "tp": lay.tp, "pp": lay.pp, "sp": lay.sp, "ep": lay.ep}


# Disaggregated serving, one process per instance plus a router (docs pages by name): vLLM "NixlConnector
# Usage Guide" (docs.vllm.ai features/nixl_connector_usage; "Disaggregated Prefilling (experimental)"),
# SGLang "PD Disaggregation" (docs.sglang.io advanced_features/pd_disaggregation), TRT-LLM "Disaggregated
# Serving in TensorRT LLM" (tech blog 5; examples/disaggregated/README.md: trtllm-serve disaggregated -c)
NIXL = """'{"kv_connector":"NixlConnector","kv_role":"kv_both"}'"""
DISAGG_NOTE = ("disaggregated prefill/decode is a multi-process deployment: {np} prefill and {nd} decode server(s), "
               "each on its own GPUs, and a proxy/router in front; docs: vLLM 'NixlConnector Usage Guide', SGLang "
               "'PD Disaggregation', TRT-LLM 'Disaggregated Serving' (examples/disaggregated)")


def disagg_commands(row: dict, m: str) -> dict:
    """Prefill and decode servers (one per pool instance, ports counted up) and the router, per framework."""
    a = row.get("policy_args") or {}
    p, d = parse_pool(a["prefill"], "prefill"), parse_pool(a["decode"], "decode")
    notes = [DISAGG_NOTE.format(np=p.count, nd=d.count)]
    flags = {}
    for role, pool in (("prefill", p), ("decode", d)):  # each pool instance's layout (its dp: attention DP)
        lay = pool.layout
        v, g, t, n = parallel_flags(lay.tp, lay.pp, lay.dp, lay.sp, lay.ep)
        t_flags, _, t_comment = t.partition("  # ")
        flags[role] = (v, g.partition("  # ")[0], t_flags)
        notes += [f"{role}: {x}" for x in n] + ([f"{role} TRT-LLM: {t_comment}"] if t_comment else [])
    (vp, gp, tp_), (vd, gd, td) = flags["prefill"], flags["decode"]
    vllm = (f"prefill x{p.count}: vllm serve {m} {vp} --port 8100 "
            f"--kv-transfer-config {NIXL}; decode x{d.count}: vllm serve {m} {vd} "
            f"--port 8200 --kv-transfer-config {NIXL}; proxy: python "
            "toy_proxy_server.py --port 8000 --prefiller-hosts P_HOSTS --prefiller-ports 8100 --decoder-hosts "
            "D_HOSTS --decoder-ports 8200 (vLLM tests/v1/kv_connector/nixl_integration)")
    sglang = (f"prefill x{p.count}: python -m sglang.launch_server --model-path {m} --disaggregation-mode prefill "
              f"{gp} --disaggregation-transfer-backend nixl --port 30000; decode x{d.count}: python -m "
              f"sglang.launch_server --model-path {m} --disaggregation-mode decode {gd} "
              "--disaggregation-transfer-backend nixl --port 30001; router: python -m sglang_router.launch_router "
              "--pd-disaggregation --prefill http://P_HOST:30000 --decode http://D_HOST:30001")
    trt = (f"context x{p.count}: trtllm-serve {m} {tp_} --port 8001 --extra_llm_api_options "
           f"ctx.yaml; generation x{d.count}: trtllm-serve {m} {td} --port 8002 "
           "--extra_llm_api_options gen.yaml (both: cache_transceiver_config backend UCX or "
           "NIXL); then: trtllm-serve disaggregated -c disagg.yaml (context_servers / generation_servers: "
           f"num_instances {p.count} / {d.count} and their urls)")
    return {"vllm": vllm, "sglang": sglang, "trtllm": trt, "note": "; ".join(notes)}


def _multinode_note(d: dict, gpus: int, per_node: int) -> str | None:
    """How a static layout runs on several nodes (docs/multinode.md: instances inside a node or on whole nodes)."""
    if gpus <= per_node:
        return None
    nodes = -(-gpus // per_node)
    inst = d.get("tp", 1) * d.get("pp", 1) * d.get("sp", 1)
    if inst <= per_node:  # vLLM "Data Parallel Deployment": one launch per node, the head's address shared
        return (f"{nodes} nodes: run the vLLM line on each node with --data-parallel-size-local "
                f"{d.get('dp', 1) // nodes} --data-parallel-address HEAD_IP (the others add --headless "
                "--data-parallel-start-rank R); SGLang/TRT-LLM: one server per instance behind a router")
    return (f"{nodes} nodes: an instance spans {inst // per_node} nodes (TP/PP over the NICs): vLLM runs it on a "
            "Ray cluster (--distributed-executor-backend ray, 'Parallelism and Scaling' docs); SGLang: --nnodes "
            "--node-rank --dist-init-addr; TRT-LLM: mpirun / trtllm-llmapi-launch over the nodes")


def commands(row: dict, model: str, gpus: int, gpus_per_node: int | None = None, framework: str | None = None) -> dict:
    """{'vllm': ..., 'sglang': ..., 'trtllm': ..., 'note': ...} for the winner `row` on `gpus` GPUs in all
    (nodes of `gpus_per_node`; None: one node). A framework that cannot serve the row's policy / layout
    (simulator.apps.recommend.support) gets None, and its reason in 'unservable'. With `framework` (the one
    simulated): 'framework' and 'simulated', that framework's command (None: it has none)."""
    out = _commands(row, hf_name(model), gpus, gpus_per_node)
    deg = degrees_of(row, gpus) if row.get("policy") != "disagg" else {}
    extra = _redundant_note(model, deg.get("ep", 1))
    if extra:
        out["note"] = "; ".join([out["note"], *extra] if out.get("note") else extra)
    out["unservable"] = {}
    for fw in ("vllm", "sglang", "trtllm"):
        why = why_not(row.get("policy", "layout"), deg, fw)
        if why:
            out[fw], out["unservable"][fw] = None, why
    if framework:
        out["framework"], out["simulated"] = framework, out.get(framework)
    return out


def _commands(row: dict, m: str, gpus: int, gpus_per_node: int | None) -> dict:
    if row.get("policy") == "disagg":
        return disagg_commands(row, m)
    d = degrees_of(row, gpus)
    tp, pp, dp, sp, ep = d.get("tp", 1), d.get("pp", 1), d.get("dp", 1), d.get("sp", 1), d.get("ep", 1)
    policy = row.get("policy", "layout")
    if policy == "shift":  # the deployment's base is SP x TP; the plugin serves it with the shift config beside
        thr = row.get("policy_args", {}).get("threshold", SHIFT_THRESHOLD_TOKENS)
        vllm = (f"vllm serve {m} --tensor-parallel-size {tp} --ulysses-sequence-parallel-size {sp} "
                f"--enable-shift-parallel --shift-parallel-threshold {thr}")
        sglang = trt = None  # no Shift in SGLang / TRT-LLM (simulator.apps.recommend.support)
        ep_notes = []
    else:
        v, g, t, ep_notes = parallel_flags(tp, pp, dp, sp, ep)
        vllm, sglang, trt = f"vllm serve {m} {v}", f"python -m sglang.launch_server --model-path {m} {g}", \
            f"trtllm-serve {m} {t}"
    notes = ([PLUGIN[policy]] if policy in PLUGIN else []) + ep_notes
    multi = _multinode_note(d, gpus, gpus_per_node or gpus)
    if multi:
        notes.append(multi)
    if sp > 1 and policy != "shift":
        notes.append(PLUGIN["sp"] + "; SGLang / TRT-LLM have no SP: no command for them")
    return {"vllm": vllm, "sglang": sglang, "trtllm": trt, "note": "; ".join(notes) or None}


def _redundant_note(model, ep: int) -> list:
    """Where EP does not divide the experts, the spare expert slots the layout was costed with
    (perfmodel.layout.ParallelLayout.expert_slots) and how each framework is told about them."""
    if ep <= 1 or not model:
        return []
    try:
        experts = load_model(model).num_experts
    except ValueError:
        return []
    slots = ParallelLayout(dp=ep, ep=ep).expert_slots(experts) * ep if experts else 0
    if not experts or slots == experts:
        return []
    return [f"ep={ep} does not divide the {experts} experts: costed with {slots} expert slots, {slots - experts} "
            f"redundant (TRT-LLM: moe_config.load_balancer.num_slots: {slots}; SGLang: --ep-num-redundant-experts "
            f"{slots - experts}; vLLM: --enable-eplb with {slots - experts} redundant experts)"]


def parallel_flags(tp: int, pp: int, dp: int, sp: int, ep: int) -> tuple:
    """(vllm, sglang, trtllm flags, notes) of a layout. With EP, the layout is one of two kinds
    (perfmodel.comm.ep_replicated): EP inside each instance's TP group (ep <= tp: every rank holds every
    token) or EP across attention-DP ranks (ep > tp: ep // tp DP ranks of tp GPUs form one EP group, and
    dp // (ep // tp) such groups serve as replicas). Each engine spells them differently:
      vLLM: --enable-expert-parallel makes EP = TP x DP (all of the engine's GPUs), so ep < tp or replicas
            of an EP group cannot be asked for (noted);
      SGLang: attention DP is --tp <EP group GPUs> --dp <DP ranks> --enable-dp-attention, plain --dp is
            replicas;
      TRT-LLM: --ep_size inside --tp_size; attention DP is `enable_attention_dp: true` in the
            --extra_llm_api_options YAML (no CLI flag)."""
    notes = []
    attn_dp = ep // tp if ep > tp else 1  # DP ranks inside one EP group
    replicas = max(1, dp // attn_dp)  # instances serving side by side
    vllm = f"--tensor-parallel-size {tp} --pipeline-parallel-size {pp} --data-parallel-size {dp}"
    if sp > 1:
        vllm += f" --ulysses-sequence-parallel-size {sp}"
    if ep > 1:
        vllm += " --enable-expert-parallel"
        if tp * dp != ep:
            notes.append(f"vLLM's --enable-expert-parallel spans all TP x DP ranks: EP {tp * dp} there, not {ep}")
    if attn_dp > 1:
        sglang = f"--tp {tp * attn_dp} --dp {attn_dp} --enable-dp-attention --ep-size {ep}"
    else:
        sglang = f"--tp {tp * sp} --dp {dp}" + (f" --ep-size {ep}" if ep > 1 else "")
    if pp > 1:
        sglang += f" --pp-size {pp}"
    trt = f"--tp_size {tp * sp * attn_dp} --pp_size {pp}" + (f" --ep_size {ep}" if ep > 1 else "")
    if attn_dp > 1:
        trt += "  # with enable_attention_dp: true in --extra_llm_api_options"
    if replicas > 1:
        if attn_dp > 1:  # (SGLang's plain --dp serves replicas itself)
            sglang += f"  # x {replicas} replicas behind a router"
        trt += f"  # x {replicas} replicas behind a load balancer (trtllm-serve has no data-parallel flag)"
    return vllm, sglang, trt, notes
