"""Multi-node clusters (issue 18 item 3): ranks placed node-major, collectives whose group spans nodes
costed hierarchically (perfmodel/network.py), deployments over 2 x 8 H100, and the CLI's --nodes."""
import dataclasses
import json

import numpy as np
import pytest

from perfmodel import ops
from perfmodel.comm import Call, group_span, placed, step_calls
from perfmodel.cost import _collective_s
from perfmodel.deploy import cluster, deployment, instance_layout
from perfmodel.framework import DEFAULT_FRAMEWORK as FW
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import load_model
from simulator.apps.cli import main

H100 = load_hardware("h100")
S = np.array([64e3, 16e6])  # bytes: a decode step's all-reduce (custom kernel range) and a prefill's
LAT, NIC = H100.nic_latency_us * 1e-6, H100.nic_bw_gbs * 1e9  # 5 us, 50 GB/s per GPU (h100_sxm.toml)
SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--profile", "none",
         "--trace", "synthetic:poisson?n=40&rate=4&input=512&output=32"]


def _alpha_beta(op: str, size, g: int):
    """The datasheet alpha-beta time of a single-node collective over g ranks, written out."""
    c = H100.collectives[op]
    return c.alpha_us * 1e-6 + size * (g - 1) / g / (c.busbw_gbs * 1e9)


def test_tp8_all_reduce_inside_a_node_costs_as_before():
    call = Call("all_reduce", 8, S, 1, "attn_out")
    lay = ParallelLayout(tp=8)
    assert placed(call, lay, 8) is call  # one node: the Call as it was
    before = ops.all_reduce_time_s(S, 8, H100, None, custom=FW.custom_all_reduce)
    np.testing.assert_array_equal(_collective_s(call, lay, H100, None, FW), before)


def test_all_reduce_spanning_two_nodes_is_hierarchical_and_slower():
    # the same TP=8 group on 2 nodes of 4: reduce_scatter over 4 + ring all_reduce of S/4 over 2 NICs
    # (2 steps of 5 us, 2 x 1/2 of S/4 over 50 GB/s) + all_gather over 4
    hw4 = dataclasses.replace(H100, gpus_per_node=4)
    call, lay = Call("all_reduce", 8, S, 3, "attn_out"), ParallelLayout(tp=8)
    assert (placed(call, lay, 4).nodes, placed(call, lay, 4).per_node) == (2, 4)
    hand = _alpha_beta("reduce_scatter", S, 4) + (2 * LAT + S / 4 / NIC) + _alpha_beta("all_gather", S, 4)
    got = _collective_s(call, lay, hw4, None, FW)
    np.testing.assert_allclose(got, 3 * hand, rtol=1e-12)
    assert np.all(got > _collective_s(call, lay, H100, None, FW))
    # TP=16 over 2 x 8: 8 ranks a node, 1/8 of the bytes per NIC
    hand16 = _alpha_beta("reduce_scatter", S, 8) + 2 * LAT + S / 8 / NIC + _alpha_beta("all_gather", S, 8)
    call16 = Call("all_reduce", 16, S, 1, "attn_out")
    np.testing.assert_allclose(_collective_s(call16, ParallelLayout(tp=16), H100, None, FW), hand16, rtol=1e-12)


def test_all_to_all_and_send_recv_across_nodes():
    # EP=16 on 2 x 8: half of each rank's send buffer leaves the node over its NIC, the other half
    # (an all-to-all among the 8 ranks of the node) runs over NVLink at the same time
    call = Call("all_to_all", 16, S, 1, "moe_dispatch", "ep")
    lay = instance_layout(ParallelLayout(dp=16, ep=16))
    hand = np.maximum(LAT + S * 8 / 16 / NIC, _alpha_beta("all_to_all", S / 2, 8))
    np.testing.assert_allclose(_collective_s(call, lay, H100, None, FW), hand, rtol=1e-12)
    pp = Call("send_recv", 2, S, 1, "pp_stage", "pp")
    np.testing.assert_allclose(_collective_s(pp, ParallelLayout(tp=8, pp=2), H100, None, FW), LAT + S / NIC)


def _spans(lay: ParallelLayout, kind: str, g: int = 8) -> set:
    """Node counts of every `kind` group of the whole layout, ranks placed node-major."""
    return {len({r // g for r in grp}) for grp in lay.groups(kind)}


def test_placement_on_two_nodes_of_eight():
    dp_tp = ParallelLayout(dp=2, tp=8)  # a TP=8 instance per node, DP across the nodes
    assert _spans(dp_tp, "tp") == {1} and _spans(dp_tp, "dp") == {2}
    assert group_span(instance_layout(dp_tp), "tp", 8, 8) == (1, 8)
    tp_pp = ParallelLayout(tp=8, pp=2)  # a stage per node: only the stage send crosses
    assert _spans(tp_pp, "tp") == {1} and _spans(tp_pp, "pp") == {2}
    assert group_span(tp_pp, "tp", 8, 8) == (1, 8) and group_span(tp_pp, "pp", 2, 8) == (2, 1)
    spec = load_model("llama-3.3-70b", weights="fp8")
    nodes = {c.where: placed(c, tp_pp, 8).nodes for c in step_calls(spec, tp_pp, np.array([64.0]), np.array([8.0]))}
    assert nodes["attn_out"] == 1 and nodes["pp_stage"] == 2
    ep = ParallelLayout(dp=16, ep=16)  # one expert group over both nodes, 8 ranks in each
    assert _spans(ep, "ep") == {2}
    assert group_span(instance_layout(ep), "ep", 16, 8) == (2, 8)


def test_deployments_on_sixteen_gpus():
    spec = load_model("llama-3.3-70b", weights="fp8")
    assert str(deployment("tp", spec, H100, 16).base) == "dp=2,tp=8"  # TP fills a node, DP over nodes
    assert str(deployment("tp=16", spec, H100, 16).base) == "tp=16"  # asked for by name: spans the NICs
    sh = deployment("shift", spec, H100, 16)
    assert (sh.instances, sh.shift.tp, sh.base.tp * sh.base.sp) == (2, 8, 8)  # a Shift engine per node
    with pytest.raises(LayoutError, match="no inter-node network"):
        deployment("tp", spec, load_hardware("a10"), 16)
    with pytest.raises(LayoutError, match="straddle"):
        deployment("tp=2,pp=3", spec, H100, 12)
    hw6, gpus = cluster(H100, nodes=2, gpus_per_node=6)
    assert (hw6.gpus_per_node, gpus) == (6, 12)
    assert cluster(H100)[0] is H100  # one default node: the preset itself
    with pytest.raises(LayoutError, match="exceeds the 8 GPUs"):
        cluster(H100, gpus=16)


def test_cli_two_nodes_runs_and_rerun_reproduces(capsys, tmp_path):
    from simulator.rerun import main as rerun_main

    out = tmp_path / "run"
    assert main([*SMALL, "--nodes", "2", "--policy", "tp", "--format", "json", "--out", str(out)]) == 0
    summ = json.loads(capsys.readouterr().out)
    assert summ["gpus"] == 16 and summ["engines"] == 2 and summ["layout"] == "dp=2 x tp=8"
    assert (summ["config"]["run_spec"]["nodes"], summ["config"]["run_spec"]["gpus_per_node"]) == (2, None)
    assert rerun_main([str(out)]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["--hardware", "a10", "--nodes", "2", "--policy", "tp"], "a10 has no inter-node network"),
    (["--gpus", "16", "--policy", "tp"], "exceeds the 8 GPUs of 1 x 8-GPU h100_sxm node; add --nodes 2"),
    (["--nodes", "2", "--gpus-per-node", "9", "--policy", "tp"], "1 to 8 GPUs"),
    (["--nodes", "2", "--policy", "seesaw"], "seesaw runs on one node"),
])
def test_cli_multinode_bad_input_one_line_exit_2(capsys, argv, needle):
    assert main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_shift_and_flying_per_node():
    from simulator.run import RunSpec, run, workload

    wl = workload("poisson?n=40&rate=4&input=512&output=32")
    for policy in ("shift", "flying"):
        r = run(wl, RunSpec(policy=policy, model="llama-3.1-8b", hardware="h100", profile="none", gpus=16, nodes=2))
        assert r.summary["completed"] == 40
        groups = [e["gpus"] for e in r.result.engines]
        assert all(g[0] // 8 == g[-1] // 8 for g in groups)  # every engine inside one node
