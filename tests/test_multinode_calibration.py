"""Measured multi-node collective curves (issue: calibration from measured multi-node tables where
present): the `nodes` column, "group@nodes" curves in the profile, their use for exactly that placement
by perfmodel.network, and the validation of such rows. Synthetic rows, CPU only."""
import csv
import dataclasses

import numpy as np
import pytest

from perfmodel import network, ops
from perfmodel.calibration import collectives as coll
from perfmodel.calibration.calibrate import calibrate, write_profile
from perfmodel.calibration.profile import from_dict, load_profile
from perfmodel.calibration.readers import read_measurements_any
from perfmodel.calibration.validate import validate
from perfmodel.comm import Call, placed
from perfmodel.cost import _collective_s
from perfmodel.framework import DEFAULT_FRAMEWORK as FW
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.measurements import COLUMNS, append_rows, read_measurements

H100 = load_hardware("h100_sxm")  # 8 GPUs a node, NICs 50 GB/s / 5 us per GPU (datasheet)
SIZES = 2.0 ** np.arange(10, 31, 2)  # bytes: 1 KiB .. 1 GiB, every 4x (the curves' nodes)
SLOW = 3.0  # the "measured" 2-node curve is this many times the hierarchical datasheet model


def _tp16(size) -> Call:
    """TP=16 all-reduce placed on 2 x 8 GPUs (node-major): nodes 2, 8 ranks per node."""
    return placed(Call("all_reduce", 16, np.asarray(size, dtype=float), 1, "attn_out"), ParallelLayout(tp=16), 8)


def _datasheet_16at2(size):
    return network.spanning_time_s(_tp16(size), H100)  # no profile: NVLink alpha-beta legs + NIC ring


def _rows(multinode: bool = True) -> list[dict]:
    """all_reduce rows: groups 2, 4, 8 on one node at the datasheet alpha-beta, and (multinode) the
    16-rank group over 2 nodes at SLOW x the hierarchical datasheet composition."""
    rows = []
    for g in (2, 4, 8):
        t_us = ops.collective_time_s("all_reduce", SIZES, g, H100) * 1e6
        rows += [dict(op="all_reduce", dtype="bf16", size_bytes=int(s), group_size=g, backend="nccl", nodes=1,
                      median_us=f"{t:.6g}") for s, t in zip(SIZES, t_us)]
    if multinode:
        t_us = SLOW * _datasheet_16at2(SIZES) * 1e6
        rows += [dict(op="all_reduce", dtype="bf16", size_bytes=int(s), group_size=16, backend="nccl", nodes=2,
                      median_us=f"{t:.6g}") for s, t in zip(SIZES, t_us)]
    return rows


def _calibrated(tmp_path, rows, hw=H100, name="m.csv"):
    path = tmp_path / name
    append_rows(path, rows)
    meas = read_measurements_any(path)
    return meas, calibrate(meas, hw, split_mode="all")


def test_two_node_curve_is_stored_beside_the_single_node_ones(tmp_path):
    _, d = _calibrated(tmp_path, _rows())
    assert list(d["collectives"]["all_reduce"]) == ["2", "4", "8", "16@2"]
    assert "collectives_multinode" in d["provenance"]["fits"]
    path = tmp_path / "p.json"
    write_profile(d, path)
    prof = load_profile(path)  # the JSON round trip
    assert sorted(prof.collectives["all_reduce"]) == [2, 4, 8]  # single-node interpolation never sees 16@2
    assert list(prof.spanning["all_reduce"]) == [(16, 2)]
    assert "16@2" in prof.describe("all_reduce")
    assert prof.spanning_time_s("all_reduce", SIZES, 16, 4) is None  # no other node count
    assert prof.spanning_time_s("all_reduce", SIZES, 32, 2) is None  # nor group size
    assert prof.spanning_time_s("all_gather", SIZES, 16, 2) is None


def test_tp16_over_two_nodes_costs_the_measured_curve(tmp_path):
    _, d = _calibrated(tmp_path, _rows())
    prof = from_dict(d)
    call = _tp16(SIZES)
    assert (call.nodes, call.per_node) == (2, 8)
    got = network.spanning_time_s(call, H100, prof)
    np.testing.assert_allclose(got, SLOW * _datasheet_16at2(SIZES), rtol=1e-3)  # the curve's 4 digits
    # between measured sizes: log-log interpolation of the measured curve (up to 6% above it at the
    # latency-bandwidth knee), still ~3x the datasheet model
    mid = np.sqrt(SIZES[:-1] * SIZES[1:])
    np.testing.assert_allclose(network.spanning_time_s(_tp16(mid), H100, prof) / _datasheet_16at2(mid), SLOW,
                               rtol=0.1)
    # the cost model's own path (perfmodel.cost) takes it too; an empty message costs nothing
    np.testing.assert_allclose(_collective_s(call, ParallelLayout(tp=16), H100, prof, FW), got, rtol=1e-12)
    assert float(network.spanning_time_s(_tp16([0.0]), H100, prof)[0]) == 0.0


def test_single_node_times_are_unchanged_by_a_multinode_curve(tmp_path):
    _, with_16 = _calibrated(tmp_path, _rows(), name="with.csv")
    _, without = _calibrated(tmp_path, _rows(multinode=False), name="without.csv")
    a, b = from_dict(with_16), from_dict(without)
    s = np.geomspace(100.0, 4e9, 50)
    for g in (2, 3, 4, 6, 8):
        np.testing.assert_array_equal(a.collective_time_s("all_reduce", s, g), b.collective_time_s("all_reduce", s, g))
    for g in (12, 16):  # outside the single-node range: None (datasheet), not blended with the 16@2 curve
        assert a.collective_time_s("all_reduce", s, g) is None
    assert not b.spanning


@pytest.mark.parametrize("gpus_per_node,tp,per_node", [(8, 32, 8), (4, 16, 4)])
def test_other_placements_stay_hierarchical(tmp_path, gpus_per_node, tp, per_node):
    """TP=32 over 4 x 8, and 16 ranks placed 4 per node on 4 nodes: not the measured 2 x 8 placement."""
    _, d = _calibrated(tmp_path, _rows())
    prof = from_dict(d)
    hw = dataclasses.replace(H100, gpus_per_node=gpus_per_node)
    call = placed(Call("all_reduce", tp, SIZES, 1, "attn_out"), ParallelLayout(tp=tp), gpus_per_node)
    assert (call.nodes, call.per_node) == (4, per_node)
    np.testing.assert_array_equal(network.spanning_time_s(call, hw, prof), network.spanning_time_s(call, hw))


def test_an_unaligned_placement_does_not_use_the_curve(tmp_path):
    """16 ranks on 2 nodes but 10 on the fullest one: not the 8 + 8 of the measurement."""
    prof = from_dict(_calibrated(tmp_path, _rows())[1])
    call = Call("all_reduce", 16, SIZES, 1, "attn_out", nodes=2, per_node=10)
    np.testing.assert_array_equal(network.spanning_time_s(call, H100, prof), network.spanning_time_s(call, H100))


def test_validate_compares_multinode_rows_on_their_own(tmp_path):
    meas, d = _calibrated(tmp_path, _rows())
    rows = {(r["op"], r["subset"]): r for r in validate(meas, from_dict(d), H100)}
    multi = rows[("all_reduce", "nodes>1")]
    assert multi["rows"] == len(SIZES) and multi["median_abs_rel_err"] < 1e-3
    # datasheet: the hierarchical model of the same placement, 1/3 of the measured time
    assert multi["datasheet_median_abs_rel_err"] == pytest.approx(1 - 1 / SLOW, rel=1e-3)
    assert "g=16@2" in multi["worst"][0]["shape"]
    assert rows[("all_reduce", "all")]["rows"] == 4 * len(SIZES)


def test_unknown_nodes_are_placed_on_whole_nodes(tmp_path):
    """Rows without a nodes value (an older file, aiconfigurator's nccl.csv) span ceil(group / gpus_per_node)."""
    rows = [{k: v for k, v in r.items() if k != "nodes"} for r in _rows()]
    _, d = _calibrated(tmp_path, rows, name="blank.csv")
    assert list(d["collectives"]["all_reduce"]) == ["2", "4", "8", "16@2"]
    _, d4 = _calibrated(tmp_path, rows, hw=dataclasses.replace(H100, gpus_per_node=4), name="blank4.csv")
    assert list(d4["collectives"]["all_reduce"]) == ["2", "4", "8@2", "16@4"]
    nccl = tmp_path / "nccl.csv"  # aiconfigurator's layout: no nodes column at all
    nccl.write_text("op_name,num_gpus,size_bytes,time_us\n" + "".join(
        f"all_reduce,{g},{s},{10 + g}\n" for g in (8, 16) for s in (1024, 4096, 16384)))
    meas = read_measurements_any(nccl)
    assert meas.frame("collective").nodes.isna().all()
    assert list(calibrate(meas, H100, split_mode="all")["collectives"]["all_reduce"]) == ["8", "16@2"]


def test_a_bad_nodes_value_is_named(tmp_path):
    path = tmp_path / "bad.csv"
    for bad in ("two", "1.5", "0"):
        append_rows(path, [dict(_rows()[0], nodes=bad)])
        with pytest.raises(ValueError, match=rf"line 2: field 'nodes' = '{bad}' is not a positive integer"):
            read_measurements_any(path)
        path.unlink()


def test_shipped_profiles_have_no_multinode_curves_and_keep_their_times():
    s = np.geomspace(100.0, 4e9, 40)
    for name in ("h100_sxm", "h200_sxm"):
        prof = load_profile(name)
        assert prof.spanning == {}
        assert prof.spanning_time_s("all_reduce", s, 16, 2) is None
        raw = prof.data["collectives"]
        for op, curves in raw.items():  # the JSON's curves, parsed as before multi-node keys existed
            old = {int(g): coll.Curve(c) for g, c in curves.items()}
            assert sorted(prof.collectives[op]) == sorted(old)
            for g in (2, 3, 4, 6, 8, 16):
                want = coll.group_time_s(old, s, g)
                got = prof.collective_time_s(op, s, g)
                assert (got is None) == (want is None) and (got is None or np.array_equal(got, want)), (name, op, g)


def test_append_rows_keeps_an_older_files_header(tmp_path):
    """A file written before `nodes` existed: rows are appended in its own columns, nothing shifted."""
    old_header = [c for c in COLUMNS if c != "nodes"]
    path = tmp_path / "old.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old_header)
        w.writeheader()
        w.writerow(dict.fromkeys(old_header, "") | dict(op="all_reduce", size_bytes="1024", group_size="8",
                                                         median_us="20", timestamp="2025-01-01T00:00:00Z"))
    append_rows(path, [dict(op="all_reduce", size_bytes=4096, group_size=8, median_us=30, nodes=1,
                            timestamp="2026-01-01T00:00:00Z")])
    lines = list(csv.reader(path.open()))
    assert lines[0] == old_header and all(len(r) == len(old_header) for r in lines)
    df = read_measurements(path)
    assert list(df.timestamp) == ["2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"] and list(df.median_us) == [20, 30]
    assert read_measurements_any(path).frame("collective").nodes.isna().all()  # unknown, placed by calibrate
    new = tmp_path / "new.csv"
    append_rows(new, [dict(op="all_reduce", size_bytes=4096, group_size=8, median_us=30, nodes=1)])
    assert tuple(next(csv.reader(new.open()))) == COLUMNS and COLUMNS[-1] == "nodes"
