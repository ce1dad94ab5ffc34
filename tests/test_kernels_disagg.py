"""Disaggregated prefill/decode (kernels/disagg.py): prefill ranks run each prompt and send its KV
to the decode ranks, which decode from it. The logits of every generated token equal the
single-device model's, and the bytes sent equal the prompt's KV bytes (re-sharded P -> D).

Two spawned worlds: w=3 (P=1 -> D=2: heads split; P=2 -> D=1: heads merged) and w=4 (P=2 -> D=2;
one KV head, so both sides replicate it and each decode replica gets a copy).
"""
import dataclasses

import pytest

pytest.importorskip("torch")

from kernels.checks import expected_bytes, make_spec, run_checks  # noqa: E402
from kernels.dist import spawn  # noqa: E402
from kernels.disagg import layouts, transfer_plan  # noqa: E402
from kernels.run import main  # noqa: E402
from perfmodel.layout import LayoutError, ParallelLayout  # noqa: E402

try:
    from perfmodel.disagg import kv_transfer_bytes
except ImportError:
    kv_transfer_bytes = None

TOL = 2e-5  # fp32 logits of O(1), as tests/test_kernels_parity.py (TP rounding only)
CHECKS = {
    3: {"p1d2": dict(prefill_tp=1, decode_tp=2), "p2d1": dict(prefill_tp=2, decode_tp=1)},
    4: {"p2d2": dict(prefill_tp=2, decode_tp=2),
        "p2d2_kv1": dict(prefill_tp=2, decode_tp=2, spec_overrides={"num_kv_heads": 1})},
}
_RESULTS: dict = {}


def results(w):
    if w not in _RESULTS:
        _RESULTS[w] = spawn(run_checks, w, {n: dict(strategy="disagg", **kw) for n, kw in CHECKS[w].items()})
    return _RESULTS[w]


def spec_of(w, name):
    return make_spec("tiny", **(CHECKS[w][name].get("spec_overrides") or {}))


def prompt_kv_bytes(spec, tokens, dtype_bytes=4):
    """num_layers x 2 (K, V) x h_kv x head_dim x dtype bytes x prompt tokens (fp32 kernels)."""
    return spec.num_layers * 2 * spec.num_kv_heads * spec.head_dim * dtype_bytes * tokens


CASES = [(w, n) for w in CHECKS for n in CHECKS[w]]


def test_transfer_plan_resharding():
    # (src prefill TP rank, dst decode TP rank, first KV head, heads), h_kv = 2
    assert transfer_plan(2, 1, 2) == [(0, 0, 0, 1), (0, 1, 1, 1)]  # split: rank 0 -> both decode ranks
    assert transfer_plan(2, 2, 1) == [(0, 0, 0, 1), (1, 0, 1, 1)]  # merge: both prefill ranks -> one
    assert transfer_plan(2, 2, 2) == [(0, 0, 0, 1), (1, 1, 1, 1)]
    assert transfer_plan(2, 4, 2) == [(0, 0, 0, 1), (2, 1, 1, 1)]  # replicated on prefill: first holder
    assert transfer_plan(2, 1, 1) == [(0, 0, 0, 2)]  # one message of both heads
    assert transfer_plan(1, 2, 2) == [(0, 0, 0, 1), (0, 1, 0, 1)]  # replicated on decode: a copy each


def test_layouts_and_cli_errors():
    spec = make_spec("tiny")
    assert layouts(spec, 3, prefill_tp=1) == (ParallelLayout(tp=1), ParallelLayout(tp=2))
    assert layouts(spec, 4) == (ParallelLayout(tp=2), ParallelLayout(tp=2))
    with pytest.raises(LayoutError):
        layouts(spec, 4, prefill_tp=3)  # 8 heads over tp=3
    with pytest.raises(LayoutError):
        layouts(spec, 4, prefill_tp=2, decode_tp=1)  # 3 ranks, world of 4
    assert main(["--strategy", "disagg", "--world-size", "4", "--prefill-tp", "3"]) == 2


@pytest.mark.slow
def test_launcher_check(capsys):
    assert main(["--strategy", "disagg", "--world-size", "2", "--check"]) == 0  # P = D = 1: no re-sharding
    out = capsys.readouterr().out
    assert "prefill tp=1 -> decode tp=1" in out and "prefill+decode" in out and "OK" in out


@pytest.mark.slow
@pytest.mark.parametrize("w,name", CASES, ids=[f"w{w}-{n}" for w, n in CASES])
def test_every_token_equals_single_device(w, name):
    res = results(w)
    p = CHECKS[w][name]["prefill_tp"]
    steps = [[r[name]["steps"][i] for r in res] for i in range(len(res[0][name]["steps"]))]
    assert len(steps) >= 9 and any("prefill" in s[0]["mode"] and "decode" in s[0]["mode"] for s in steps)
    for i, per_rank in enumerate(steps):
        seqs, new = set(per_rank[0]["seqs"]), set(per_rank[0]["kv_seqs"])
        pre = set().union(*(s["rows"] for s in per_rank[:p]))
        dec = set().union(*(s["rows"] for s in per_rank[p:]))
        assert pre == new and dec == seqs - new, f"step {i}: prompts on prefill ranks, the rest on decode"
        worst = max(s["max_diff"] for s in per_rank)
        assert worst <= TOL, f"{name} step {i} ({per_rank[0]['mode']}): |dlogit| {worst:.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("w,name", CASES, ids=[f"w{w}-{n}" for w, n in CASES])
def test_bytes_sent_are_the_prompts_kv(w, name):
    res, spec = results(w), spec_of(w, name)
    p, d = CHECKS[w][name]["prefill_tp"], CHECKS[w][name]["decode_tp"]
    copies = max(1, d // spec.num_kv_heads)  # a replicated decode head gets its own copy
    total = 0
    for i in range(len(res[0][name]["steps"])):
        per_rank = [r[name]["steps"][i] for r in res]
        tokens = sum(per_rank[0]["kv_seqs"].values())
        sent = [s["bytes"].get(("send_recv", "kv_transfer"), 0) for s in per_rank]
        assert sum(sent) == prompt_kv_bytes(spec, tokens) * copies, f"step {i}: {sent}"
        spec32 = dataclasses.replace(spec, kv_dtype="fp32")
        assert sum(sent) == spec32.kv_bytes_per_token * tokens * copies  # the same figure from ModelSpec
        assert not any(sent[p:]), "decode ranks send nothing"
        for rank, s in enumerate(per_rank):  # the TP collectives of each side: perfmodel.comm.step_calls
            meas = {k: v for k, v in s["bytes"].items() if k != ("send_recv", "kv_transfer")}
            model = {k: v for k, v in expected_bytes(spec, s["parts"], rank).items() if v}
            assert meas == pytest.approx(model, rel=1e-12), f"step {i} rank {rank}"
        total += tokens
    assert total == 7 + 12 + 3 + 10  # every prompt of the mixed script crossed once
    if name == "p2d1":  # merge: each prefill rank sends its own head
        assert [r[name]["steps"][0]["bytes"][("send_recv", "kv_transfer")] for r in res[:2]] == \
            [prompt_kv_bytes(spec, 22) // 2] * 2


@pytest.mark.slow
@pytest.mark.skipif(kv_transfer_bytes is None, reason="perfmodel.disagg not yet present")
@pytest.mark.parametrize("w,name", CASES, ids=[f"w{w}-{n}" for w, n in CASES])
def test_bytes_equal_perfmodel_disagg(w, name):
    res = results(w)
    spec = dataclasses.replace(spec_of(w, name), kv_dtype="fp32")  # the kernels run fp32
    lp, ld = ParallelLayout(tp=CHECKS[w][name]["prefill_tp"]), ParallelLayout(tp=CHECKS[w][name]["decode_tp"])
    for i in range(len(res[0][name]["steps"])):
        model = sum(float(kv_transfer_bytes(spec, t, lp, ld)) for t in res[0][name]["steps"][i]["kv_seqs"].values())
        sent = sum(r[name]["steps"][i]["bytes"].get(("send_recv", "kv_transfer"), 0) for r in res)
        assert sent == pytest.approx(model, rel=1e-12), f"step {i}"  # one request at a time, summed
