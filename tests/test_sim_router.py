"""Router over DP engines: round-robin, least-tokens (prompt + output of unfinished requests) and
shortest-queue (unfinished requests); ties go to the lowest engine index. The choice is replayed
from the per-request records: at each arrival, the engine picked minimises the router's key."""
import numpy as np
import pytest
from test_sim_util import run, workload

from simulator.cluster.simulate import SimConfig


def _trace(n=200, seed=0, gap_s=0.004):
    rng = np.random.default_rng(seed)
    out = np.where(rng.random(n) < 0.2, rng.integers(500, 1500, n), rng.integers(1, 50, n))  # mixed lengths
    return workload(np.cumsum(rng.exponential(gap_s, n)), rng.integers(10, 4000, n), out)


def _replay(f, engines: int, key: str):
    """For each request: the router key of every engine just before it arrived (requests routed
    earlier and not finished yet: a completion at the same instant is processed after the arrival)."""
    eng, issued, finish = f["engine"].to_numpy(), f["issued_s"].to_numpy(), f["finish_s"].to_numpy()
    size = (f["input_tokens"] + f["output_tokens"]).to_numpy() if key == "tokens" else np.ones(len(f))
    for i in range(len(f)):
        live = (np.arange(len(f)) < i) & (eng >= 0) & ~(finish < issued[i])
        yield i, np.bincount(eng[live], weights=size[live], minlength=engines)


def test_round_robin_cycles_over_engines():
    f = run(_trace(), policy="dp", gpus=4, router="round-robin").requests.frame()
    assert f["engine"].tolist() == [i % 4 for i in range(len(f))]


@pytest.mark.parametrize("router, key", [("least-tokens", "tokens"), ("shortest-queue", "requests")])
def test_router_picks_the_least_loaded_engine(router, key):
    f = run(_trace(), policy="dp", gpus=4, router=router).requests.frame()
    for i, load in _replay(f, 4, key):
        assert f["engine"].iloc[i] == int(np.argmin(load)), f"request {i}: loads {load}"
    assert len(set(f["engine"])) == 4


def test_routers_differ_and_balance():
    """Same trace, three routers: round-robin ignores lengths; least-tokens evens out the tokens."""
    w = _trace(n=300, seed=3)
    spread = {}
    for router in ("round-robin", "least-tokens", "shortest-queue"):
        f = run(w, policy="dp", gpus=4, router=router).requests.frame()
        assert (f["status"] == "completed").all()
        per = np.bincount(f["engine"], weights=f["input_tokens"] + f["output_tokens"], minlength=4)
        spread[router] = per.max() / per.min()
    assert spread["least-tokens"] < spread["round-robin"]


def test_unknown_router_is_refused():
    with pytest.raises(ValueError, match="unknown router"):
        SimConfig(router="random")


def test_router_over_engines_of_its_own_kind():
    """kernels/serve routes its own engine objects (not EngineCores) with the same Router: the first of the least
    loaded by name, as min(key=...) gives it (a regression: the compiled loop expected EngineCores only)."""
    from types import SimpleNamespace

    from simulator.cluster.router import Router

    rng = np.random.default_rng(5)
    for _ in range(50):
        loads = rng.integers(0, 4, 6)
        engines = [SimpleNamespace(outstanding_tokens=int(x), outstanding_requests=int(x) % 2, fits=lambda pos: True)
                   for x in loads]
        for name, key in (("least-tokens", "outstanding_tokens"), ("shortest-queue", "outstanding_requests")):
            want = min(engines, key=lambda e: getattr(e, key))
            assert Router(engines, name).pick(0) is want
