"""Attention DP + EP on tiny-moe at world size 4 (gloo): every DP rank runs attention on its own
requests, the 4 experts of each MoE layer are split over the 4 ranks (one each) and tokens reach
their experts by all_to_all (kernels/ep.py). Layouts dp=4,ep=4 and dp=2,tp=2,ep=4 (TP for the
dense parts inside each DP instance, the TP ranks route halves of the instance's tokens).

Beyond the suite's 'ep'/'ep_dp' checks (the 'even' script): the 'dp' script gives each engine two
requests of different lengths, so ranks go idle at different steps and still join the all_to_alls
(0 rows, E counts), and the dispatch/combine bytes are checked against perfmodel.comm.layer_calls
per rank (tp=1) or per DP instance (tp=2), not only summed.
"""
import pytest

pytest.importorskip("torch")

from kernels.checks import make_spec, run_checks  # noqa: E402
from kernels.dist import make_group, spawn  # noqa: E402
from kernels.ep import apply_ep  # noqa: E402
from kernels.model import build_model  # noqa: E402
from perfmodel.comm import layer_calls  # noqa: E402
from perfmodel.layout import ParallelLayout  # noqa: E402

pytestmark = pytest.mark.slow  # one spawned world of 4 shared by every test here (~10 s on 2 cores)

W, TOL = 4, 2e-5  # fp32 logits of O(1), as tests/test_kernels_parity.py
LAYOUTS = {"dp4ep4": ParallelLayout(dp=4, ep=4), "dp2tp2ep4": ParallelLayout(dp=2, tp=2, ep=4)}
_RES: list = []


def world(rank, world_size):
    """One rank: the two layouts' request replays, and which experts each layout leaves on this rank."""
    checks = {n: dict(strategy="ep", model="tiny-moe", script="dp", layout=lay) for n, lay in LAYOUTS.items()}
    out = {"checks": run_checks(rank, world_size, checks), "experts": {}}
    for name, lay in LAYOUTS.items():
        model = build_model(make_spec("tiny-moe"))
        apply_ep(model, lay, make_group(lay.groups("ep")), make_group(lay.groups("tp")))
        out["experts"][name] = [(l.mlp.first, len(l.mlp.experts)) for l in model.layers]
    return out


def results():
    if not _RES:
        _RES.append(spawn(world, W))
    return _RES[0]


def steps(name):
    res = results()
    return [[r["checks"][name]["steps"][i] for r in res] for i in range(len(res[0]["checks"][name]["steps"]))]


@pytest.mark.parametrize("name", LAYOUTS)
def test_experts_split_over_four_ranks(name):
    spec = make_spec("tiny-moe")
    for rank, r in enumerate(results()):
        assert r["experts"][name] == [(rank, 1)] * spec.num_layers  # expert `rank` of E=4, every MoE layer


@pytest.mark.parametrize("name", LAYOUTS)
def test_logits_equal_single_device_each_dp_rank_its_own_requests(name):
    lay, all_steps = LAYOUTS[name], steps(name)
    inst = [lay.coords(r)["dp"] for r in range(W)]
    rows = {}  # DP instance -> sequences whose logits it produced
    idle_step = False
    for i, per_rank in enumerate(all_steps):
        produced = set().union(*(s["rows"] for s in per_rank))
        assert produced == set(per_rank[0]["seqs"]), f"step {i}: logits missing"
        worst = max(s["max_diff"] for s in per_rank)
        assert worst <= TOL, f"{name} step {i}: |dlogit| {worst:.2e}"
        for rank, s in enumerate(per_rank):
            rows.setdefault(inst[rank], set()).update(s["rows"])
            idle_step |= s["parts"][0][1] == 0 and bool(per_rank[0]["seqs"])
    assert len(all_steps) >= 9 and idle_step  # some rank joined the all_to_alls with no tokens
    assert all(len(v) == 8 // lay.dp for v in rows.values())  # two requests per engine (script 'dp')
    assert sum(len(v) for v in rows.values()) == len(set().union(*rows.values())) == 8  # disjoint
    if lay.tp > 1:  # both TP ranks of an instance produce its rows
        for per_rank in all_steps:
            assert per_rank[0]["rows"] == per_rank[1]["rows"] and per_rank[2]["rows"] == per_rank[3]["rows"]


def _layer_bytes(spec, lay, tokens, where):
    """perfmodel.comm.layer_calls' bytes for `where` over the MoE layers of one step (fp32)."""
    return spec.num_moe_layers * sum(float(c.size_bytes) * c.calls for c in layer_calls(spec, lay, tokens, True, 4.0)
                                     if c.where == where)


@pytest.mark.parametrize("name", LAYOUTS)
def test_dispatch_and_combine_bytes_equal_layer_calls(name):
    spec, lay = make_spec("tiny-moe"), LAYOUTS[name]
    for i, per_rank in enumerate(steps(name)):
        def meas(rank, where):
            return per_rank[rank]["bytes"].get(("all_to_all", where), 0)
        model_total = 0.0
        for inst in range(lay.dp):  # one DP instance: its TP ranks split its tokens for the dispatch
            ranks = [r for r in range(W) if lay.coords(r)["dp"] == inst]
            n = per_rank[ranks[0]]["parts"][0][1]  # tokens of this instance in this step
            model = _layer_bytes(spec, lay, n, "moe_dispatch")  # n/TP x k x d x 4 per rank
            if lay.tp == 1:
                assert meas(ranks[0], "moe_dispatch") == model, f"step {i} rank {ranks[0]}"
            assert sum(meas(r, "moe_dispatch") for r in ranks) == pytest.approx(model * lay.tp, rel=1e-12)
            model_total += _layer_bytes(spec, lay, n, "moe_combine") * lay.tp
            for r in ranks:  # E int64 counts per MoE layer, idle ranks included
                assert meas(r, "moe_counts") == _layer_bytes(spec, lay, n, "moe_counts") == 4 * 8 * spec.num_moe_layers
        # the combine returns the rows each rank's expert received: uniform routing holds over the group
        assert sum(meas(r, "moe_combine") for r in range(W)) == pytest.approx(model_total, rel=1e-12), f"step {i}"
