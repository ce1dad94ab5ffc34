"""Replay a request script on one strategy inside a world and compare with the single-device model.

Runs on every rank; returns plain data (per step: mode, rows produced, max |logit difference|
against the reference, bytes counted per (op, where), the perf-model steps run) so that a test
or the launcher can check parity and bytes without sharing tensors between processes.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import torch

from perfmodel.comm import step_calls
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model

from . import comm, scenario
from .dist import WorkerError, device, groups_created, spawn
from .engines import build
from .kvcache import make_cache, run_step
from .model import build_model

_REFERENCE: dict = {}  # (spec, seed, script key) -> [{sid: logits}] per step


def make_spec(model: str = "tiny", **overrides):
    """A preset ModelSpec, optionally reshaped (e.g. num_kv_heads=1 for the KV-replication path)."""
    spec = load_model(model)
    return dataclasses.replace(spec, **overrides) if overrides else spec


def reference(spec, steps, seed: int = 0, dtype=torch.float32, key=None) -> list[dict]:
    """Logits of the single-device model on every step: [{sid: (V,)}]."""
    key = (spec, seed, dtype, key) if key is not None else None
    if key in _REFERENCE:
        return _REFERENCE[key]
    model = build_model(spec, seed, dtype, device=device())
    cache = make_cache(model, num_blocks=128)
    out = [run_step(model, cache, b) for b in steps]
    if key is not None:
        _REFERENCE[key] = out
    return out


def requests_of(name: str, world_size: int) -> tuple:
    return {"mixed": scenario.MIXED, "even": scenario.EVEN, "seesaw": scenario.seesaw(),
            "dp": scenario.dp_requests(world_size), "flying": flying_requests(world_size)}[name]


def flying_requests(world_size: int) -> tuple:
    """DP requests on every engine (steps 0-2), a TP request over all engines while they pause
    (steps 3-6: hard preemption), DP again (7-9), then both together (10-11)."""
    dp = tuple(scenario.Request(i, 5 + 2 * i, 9, paused=tuple(range(3, 7))) for i in range(world_size))
    tp = (scenario.Request(100, 13, 6, arrive=3, paused=(7, 8, 9)),)
    sub = (scenario.Request(101, 6, 4, arrive=7),) if world_size >= 4 else ()
    return dp + tp + sub


def flying_placement(world_size: int) -> dict:
    """Request 100 on all engines; on 4+ engines request 101 on the aligned pair [2, 3]."""
    return {100: (0, world_size), **({101: (2, 2)} if world_size >= 4 else {})}


def run_check(rank: int, world_size: int, strategy: str, model: str = "tiny", script: str = "mixed",
              spec_overrides: dict | None = None, seed: int = 0, check: bool = True, dtype: str = "float32",
              **opts) -> dict:
    """Replay `script` on `strategy`; per step the parity and byte facts of this rank."""
    spec = make_spec(model, **(spec_overrides or {}))
    steps = scenario.script(requests_of(script, world_size), spec.vocab_size, seed)
    if strategy == "flying":
        opts.setdefault("placement", flying_placement(world_size))
    if strategy == "seesaw":
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()  # the node's shared memory
        opts.setdefault("store_path", f"{shm}/kernels-seesaw-{os.getppid()}-{opts.pop('run_id', 0)}")
    ref = reference(spec, steps, seed, getattr(torch, dtype), key=(script, world_size)) if check else None
    dev = device()
    step_fn = build(strategy, spec, rank, world_size, seed=seed, dtype=getattr(torch, dtype), **opts)
    out = []
    try:
        for i, b in enumerate(steps):
            b = dataclasses.replace(b, tokens=b.tokens.to(dev))
            t0 = time.perf_counter()
            with comm.counting() as recs:
                res = step_fn(b)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            diff = max([float((res.logits[s].double().cpu() - ref[i][s].double().cpu()).abs().max())
                        for s in res.logits] or [0.0]) if check else float("nan")
            out.append({"mode": res.mode, "rows": sorted(res.logits), "seqs": list(b.seq_ids),
                        "lens": list(b.lens), "tokens": b.num_tokens, "max_diff": diff, "time_s": dt,
                        "bytes": comm.bytes_by_where(recs), "parts": res.parts, **res.facts})
        if strategy == "seesaw":
            comm.barrier()  # every rank is done with the store
    finally:
        if strategy == "seesaw" and rank == 0 and os.path.exists(opts["store_path"]):
            os.unlink(opts["store_path"])
    return {"steps": out, "info": _info(strategy, step_fn)}


def _info(strategy: str, step_fn) -> dict:
    """Strategy-specific facts the tests assert (slots, zero-copy views, KV block sizes)."""
    if strategy == "sidp" and step_fn.sidp is not None:
        rt = step_fn.sidp
        return {"slots": len(rt.slots), "max_inflight": rt.max_inflight, "owned": sorted(rt.packed),
                "order": rt.order}
    if strategy == "flying":
        f = step_fn.flying
        cache = f.cache
        return {"pool": sorted(f.pool), "groups_at_build": f.groups_at_build, "groups_at_end": groups_created(),
                "block_tokens": {sid: cache.block_tokens(sid) for sid in cache.tables},
                "heads": {sid: cache.heads[sid][0] for sid in cache.tables}}
    return {}


COMM_OPS = ("all_reduce", "all_gather", "all_to_all", "send_recv")  # what perfmodel.comm models


def expected_bytes(spec, parts, rank: int, act_bytes: float = 4.0) -> dict:
    """{(op, where): bytes} that perfmodel.comm.step_calls gives for the steps `parts` on `rank`.
    step_calls describes the busiest GPU; on a pipeline only the first stage embeds, only the last
    gathers logits and every stage but the last sends."""
    out: dict = {}
    for layout, tokens, seqs, m in parts:
        stage = layout.coords(rank)["pp"] if layout.pp > 1 else 0
        for c in step_calls(spec, layout, tokens, seqs, act_bytes, m):
            if (c.where == "embedding" and stage != 0) or (c.where == "logits" and stage != layout.pp - 1) \
                    or (c.where == "pp_stage" and stage == layout.pp - 1):
                continue
            key = (c.op, c.where)
            out[key] = out.get(key, 0.0) + float(c.size_bytes) * c.calls
    return out


def run_checks(rank: int, world_size: int, checks: dict) -> dict:
    """Run named checks ({name: kwargs of run_check}) one after another in this world."""
    out = {}
    for name, kw in checks.items():
        try:
            out[name] = run_check(rank, world_size, **kw)
        except Exception as e:
            e.add_note(f"in check {name!r} ({kw})")
            raise
    return out


def suite(world_size: int) -> dict:
    """The parity and bytes suite for one world size: {check name: run_check kwargs}."""
    L, w = ParallelLayout, world_size
    s = {
        "tp": dict(strategy="tp"),
        "pp": dict(strategy="pp"),
        "sp": dict(strategy="sp"),  # w=4 > 2 KV heads: Algorithm 1 with SP_AA=2, SP_AG=2
        "sp_kv1": dict(strategy="sp", spec_overrides={"num_kv_heads": 1}),  # SP_AA=1: all_gather only
        "tpsp": dict(strategy="tpsp"),
        "dp": dict(strategy="dp", script="dp"),
        "moe_tp": dict(strategy="tp", model="tiny-moe", script="even"),
        "ep": dict(strategy="ep", model="tiny-moe", script="even"),
        "ep_fp64": dict(strategy="ep", model="tiny-moe", script="even", dtype="float64"),
        "ep_dp": dict(strategy="ep", model="tiny-moe", script="even", layout=L(dp=w, ep=w)),
        "ep_tp": dict(strategy="ep", model="tiny-moe", script="even", layout=L(tp=w, ep=w)),  # EP inside TP
        "shift": dict(strategy="shift", threshold=8),
        "shift_fp64": dict(strategy="shift", threshold=8, dtype="float64"),  # fp32 gaps are rounding only
        "shift_wrong_order": dict(strategy="shift", threshold=8, order=list(range(w))[::-1]),
        # 8 layers: fewer WaS slots than remote layers (2 of 4 at D=2, 3 of 6 at D=4)
        "sidp_was": dict(strategy="sidp", mode="was", spec_overrides={"num_layers": 8}),
        "sidp_cas": dict(strategy="sidp", mode="cas", spec_overrides={"num_layers": 8}),
        # test values: B* between the mixed script's decode (<= 1.5 rows per replica) and prefill steps
        # (>= 3), and a streak of 1 (the script is shorter than knobs.SIDP_HYSTERESIS_DECISIONS)
        "sidp_switch": dict(strategy="sidp", mode="auto", b_star=2.4, hysteresis=1, spec_overrides={"num_layers": 8}),
        "seesaw": dict(strategy="seesaw", script="seesaw", run_id=1),
        "flying": dict(strategy="flying", script="flying"),
    }
    if w >= 4:
        s.update({
            "pp_tp": dict(strategy="pp", layout=L(tp=2, pp=2)),
            # EP inside TP with ep < tp: experts over 2 EP ranks, each TP-sharded over 2 (moe_tp)
            "ep_moe_tp": dict(strategy="ep", model="tiny-moe", script="even", layout=L(tp=4, ep=2)),
            "tpsp_kv4": dict(strategy="tpsp", spec_overrides={"num_kv_heads": 4}),  # fused QKV all_to_all
            "shift_tpsp": dict(strategy="shift", threshold=8, layout=L(sp=2, tp=2)),  # SP_TP = [0, 2, 1, 3]
            "shift_tpsp_wrong_order": dict(strategy="shift", threshold=8, layout=L(sp=2, tp=2), order=[0, 1, 2, 3]),
            "seesaw_tp2pp2": dict(strategy="seesaw", script="seesaw", layout=L(tp=2, pp=2), run_id=2),
            # replicas of TP2 (the simulator's default SiDP layout for 70B bf16 on 8 x H200)
            "sidp_tp_was": dict(strategy="sidp", mode="was", layout=L(dp=2, tp=2), spec_overrides={"num_layers": 8}),
            "sidp_tp_cas": dict(strategy="sidp", mode="cas", layout=L(dp=2, tp=2), spec_overrides={"num_layers": 8}),
        })
    return s


_WORLDS: dict = {}


def world_results(world_size: int) -> list:
    """Every rank's results of suite(world_size), computed once per process in one spawned world."""
    if world_size not in _WORLDS:
        try:
            _WORLDS[world_size] = spawn(run_checks, world_size, suite(world_size))
        except WorkerError as e:
            _WORLDS[world_size] = e
    if isinstance(_WORLDS[world_size], Exception):
        raise _WORLDS[world_size]
    return _WORLDS[world_size]
