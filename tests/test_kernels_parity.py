"""Every strategy computes the single-device model's logits (fp32, CPU, gloo) at world sizes 2
and 4, after prefill and 10 decode steps; and each strategy's switching really happens.

All checks of one world size run in ONE spawned world (kernels.checks.suite), shared with
test_kernels_bytes.py, so the whole set costs two process-group start-ups.
"""
import pytest

pytest.importorskip("torch")

from kernels.checks import make_spec, suite, world_results  # noqa: E402

pytestmark = pytest.mark.slow  # its spawned worlds (w=2, w=4): ~40 s on 2 cores, shared with test_kernels_bytes

# Absolute tolerance on logits of std ~1, |max| ~4.3 (see docs/kernels.md): every strategy only
# re-associates fp32 sums (all_reduce order, GEMMs over other row sets); observed <= 3e-6; a real
# bug (a wrong head, a stale KV entry) moves logits by O(1) (wrong head order: 3.4 to 4.6).
# float64 runs of the same code (shift_fp64, ep_fp64) agree to 1e-12: the fp32 gaps are rounding.
TOL = 2e-5
TOL_FP64 = 1e-12
WORLDS = (2, 4)
CASES = [(w, name) for w in WORLDS for name in suite(w) if "wrong_order" not in name]


def steps(w, name):
    """Per step, the list of every rank's facts."""
    res = world_results(w)
    return [[r[name]["steps"][i] for r in res] for i in range(len(res[0][name]["steps"]))]


@pytest.mark.parametrize("w,name", CASES, ids=[f"w{w}-{n}" for w, n in CASES])
def test_logits_equal_single_device(w, name):
    all_steps = steps(w, name)
    assert len(all_steps) >= 9  # prefill + at least 8 decode steps
    for i, per_rank in enumerate(all_steps):
        produced = set().union(*(s["rows"] for s in per_rank))
        assert produced == set(per_rank[0]["seqs"]), f"step {i}: logits of {per_rank[0]['seqs']} missing"
        worst = max(s["max_diff"] for s in per_rank)
        tol = TOL_FP64 if suite(w)[name].get("dtype") == "float64" else TOL
        assert worst <= tol, f"{name} at world {w}, step {i} ({per_rank[0]['mode']}): |dlogit| {worst:.2e}"


@pytest.mark.parametrize("w,name", [(2, "shift"), (4, "shift"), (4, "shift_tpsp")])
def test_shift_switches_sp_tp_sp_on_one_kv_cache(w, name):
    modes = [s[0]["mode"] for s in steps(w, name)]
    assert modes[:6] == ["base", "shift", "shift", "shift", "base", "shift"]  # 22 > 8, 3, 3, 3, 12 > 8, 3


@pytest.mark.parametrize("w,name", [(2, "shift_wrong_order"), (4, "shift_wrong_order"), (4, "shift_tpsp_wrong_order")])
def test_shift_with_a_wrong_head_order_fails(w, name):
    per_step = [max(s["max_diff"] for s in ranks) for ranks in steps(w, name)]
    assert per_step[0] <= TOL  # the base (SP) step wrote the KV cache correctly
    assert min(per_step[1:4]) > 0.1  # the shift model read other heads' KV: silently wrong logits


@pytest.mark.parametrize("w", WORLDS)
def test_sp_pads_steps_smaller_than_sp(w):
    spec = make_spec("tiny")
    q_bytes = spec.num_heads * spec.head_dim * 4  # one token's Q (fp32), every head
    for per_rank in steps(w, "sp"):
        n = per_rank[0]["tokens"]
        n_loc = -(-n // w)  # padded to a multiple of SP, split over SP ranks
        out = per_rank[0]["bytes"][("all_to_all", "ulysses_out")]
        assert out == spec.num_layers * n_loc * q_bytes
    assert min(s[0]["tokens"] for s in steps(w, "sp")) < w  # a step smaller than SP was run


@pytest.mark.parametrize("w,name,a2a_kv", [(4, "sp", True), (2, "sp_kv1", False), (4, "sp_kv1", False),
                                            (4, "tpsp", False)])
def test_sp_replicates_kv_heads_when_sp_exceeds_them(w, name, a2a_kv):
    b = steps(w, name)[0][0]["bytes"]
    assert ("all_gather", "ulysses_kv_replicate") in b and ("all_to_all", "ulysses_q") in b
    assert (("all_to_all", "ulysses_kv") in b) == a2a_kv  # SP_AA > 1 only with 2 KV heads on SP=4
    assert ("all_to_all", "ulysses_qkv") not in b
    assert ("all_to_all", "ulysses_qkv") in steps(2, "sp")[0][0]["bytes"]  # SP <= KV heads: fused


@pytest.mark.parametrize("w", WORLDS)
def test_sidp_modes_and_switch(w):
    assert {s[0]["mode"] for s in steps(w, "sidp_was")} == {"was"}
    assert {s[0]["mode"] for s in steps(w, "sidp_cas")} == {"cas"}
    modes = [s[0]["mode"] for s in steps(w, "sidp_switch")]
    assert modes[:6] == ["was", "cas", "cas", "cas", "was", "cas"]


@pytest.mark.parametrize("w", WORLDS)
def test_sidp_moves_weights_or_activations(w):
    spec = make_spec("tiny", num_layers=8)
    d, f, L = spec.hidden_size, spec.intermediate_size, spec.num_layers
    layer_bytes = 3 * d * f * 4
    info = [r["sidp_was"]["info"] for r in world_results(w)]
    for per_rank in steps(w, "sidp_was"):
        for rank, s in enumerate(per_rank):
            remote = L - len(info[rank]["owned"]) if s["replica_rows"][rank] > 0 else 0
            assert s["bytes"].get(("p2p", "sidp_was_fetch"), 0) == remote * layer_bytes
            assert ("send_recv", "sidp_cas_in") not in s["bytes"]
    for rank, i in enumerate(info):
        assert i["max_inflight"] <= i["slots"] < L - len(i["owned"])  # a bounded set of slots
        assert i["order"][0] % w == (rank + 1) % w  # peak shifting: first read from the next owner
    dummies = 0
    for per_rank in steps(w, "sidp_cas"):
        for rank, s in enumerate(per_rank):
            n = s["replica_rows"][rank]
            remote = sum(1 for l in range(L) if l % w != rank)
            assert s["bytes"].get(("send_recv", "sidp_cas_in"), 0) == remote * n * d * 4
            served = sum(s["replica_rows"][r] for r in range(w) if r != rank) * len(info[rank]["owned"])
            assert s["bytes"].get(("send_recv", "sidp_cas_out"), 0) == served * d * 4
            dummies += n == 0
    assert dummies > 0  # replicas with no work took part (and sent no activations)


def test_sidp_with_tp_replicas_moves_shards_and_reduces_partials():
    """dp=2 x tp=2: TP rank t fetches (WaS) or is served by (CaS) TP rank t of the owner, which
    holds shard t (3 d f/2); the replica all-reduces the partial FFN sums (n d per layer)."""
    spec = make_spec("tiny", num_layers=8)
    d, f, L = spec.hidden_size, spec.intermediate_size, spec.num_layers
    owned = L // 2  # layers of each replica (l mod 2)
    for name in ("sidp_tp_was", "sidp_tp_cas"):
        for per_rank in steps(4, name):
            for rank, s in enumerate(per_rank):
                replica = rank // 2  # layout (dp, tp): ranks 0, 1 = replica 0
                n = s["replica_rows"][replica]
                b = s["bytes"]
                assert b.get(("all_reduce", "ffn_out"), 0) == L * n * d * 4
                if name == "sidp_tp_was":
                    assert b.get(("p2p", "sidp_was_fetch"), 0) == (L - owned) * 3 * d * (f // 2) * 4 * (n > 0)
                else:
                    assert b.get(("send_recv", "sidp_cas_in"), 0) == (L - owned) * n * d * 4


@pytest.mark.parametrize("w,name", [(2, "seesaw"), (4, "seesaw"), (4, "seesaw_tp2pp2")])
def test_seesaw_reshards_through_the_host_store(w, name):
    spec = make_spec("tiny")
    all_steps = steps(w, name)
    phases = [s[0]["mode"] for s in all_steps][:7]
    assert phases == ["prefill", "decode", "decode", "decode", "decode", "prefill", "decode"]
    kv_token = spec.num_layers * spec.num_kv_heads * spec.head_dim * 2 * 4  # K and V of one token, fp32
    cached = {}
    for i, per_rank in enumerate(all_steps):
        if i and per_rank[0]["mode"] != all_steps[i - 1][0]["mode"]:  # a switch: KV out, weights, KV in
            kv = sum(cached.values()) * kv_token
            assert sum(s["bytes"].get(("d2h", "seesaw_kv_out"), 0) for s in per_rank) == kv  # each head once
            assert sum(s["bytes"][("h2d", "seesaw_kv_in")] for s in per_rank) >= kv  # replicas pull twice
            assert all(s["bytes"][("h2d", "seesaw_weights")] > 0 for s in per_rank)
        else:
            assert not any(("d2h", "seesaw_kv_out") in s["bytes"] for s in per_rank)
        for sid, n in zip(per_rank[0]["seqs"], per_rank[0]["lens"]):
            cached[sid] = cached.get(sid, 0) + n


@pytest.mark.parametrize("w", WORLDS)
def test_flying_dp_tp_dp_with_kv_intact(w):
    all_steps = steps(w, "flying")
    modes = [s[0]["mode"] for s in all_steps]
    assert modes[:4] == ["dp", "dp", "dp", f"tp{w}@0"] and modes[7] == "dp" and "+" in modes[10]
    spec = make_spec("tiny")
    for r, res in enumerate(world_results(w)):
        info = res["flying"]["info"]
        assert info["groups_at_end"] == info["groups_at_build"]  # the pool was built once
        assert info["pool"] == sorted(k for k in [(0, 2), (2, 2), (0, 4)][:1 + 2 * (w == 4)] if k[0] <= r < sum(k))
        for sid, bt in info["block_tokens"].items():
            assert bt == 16 * spec.num_kv_heads // info["heads"][sid]  # block bytes fixed, tokens scale
        assert info["block_tokens"][100] == 16 * min(w, spec.num_kv_heads)
