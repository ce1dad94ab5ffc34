"""Automatic prefix caching (vLLM v1, on by default) driven by trace block hashes (prefix_blocks,
one per 512-token block: Mooncake's hash_ids): hit rates, KV pressure, TTFT, fast-forward, the CLI."""
import json

import numpy as np
import pytest
from test_sim_util import KVCheck, assert_same_requests, run, run_both, workload

from simulator.engine.prefix import TRACE_BLOCK_TOKENS
from simulator.results.metrics import summarize

B = TRACE_BLOCK_TOKENS


def _shared(n=20, shared=4, own=3, tail=100, gap_s=5.0, out=8, seed=0):
    """n requests sharing a `shared`-block system prompt, each with `own` blocks of its own plus a
    partial block of `tail` tokens, spaced `gap_s` apart (each finishes before the next arrives)."""
    blocks = [tuple(range(shared)) + tuple(1000 * (i + 1) + j for j in range(own + 1)) for i in range(n)]
    prompt = np.full(n, (shared + own) * B + tail)
    return workload(np.arange(n) * gap_s, prompt, np.full(n, out), prefix_blocks=blocks)


def _rate(res):
    return summarize(res.requests.frame(), res.steps.frame(), res.engines)["prefix_cache_hit_rate"]


class CacheKVCheck(KVCheck):
    """KVCheck with the prefix cache: used KV = private blocks of the batch + referenced entries;
    every request's blocks = ceil(computed / block) less those it holds through the cache."""

    def __call__(self, engine, schedule, steps, stretch) -> None:
        cache, batch, kv = engine.cache, engine.batch, engine.kv
        if cache is None:
            return super().__call__(engine, schedule, steps, stretch)
        idx, prompt, output, computed, generated, blocks = (np.asarray(c, dtype=np.int64) for c in batch.columns())
        own = np.asarray(batch.own, dtype=np.int64)
        assert 0 <= kv.used <= kv.num_blocks
        assert kv.used == batch.used_blocks + cache.referenced_blocks
        assert batch.used_blocks == int(blocks.sum())
        assert (blocks == -(-computed // kv.block_size) - own).all() and (blocks >= 0).all()
        # unreferenced (evictable) entries fit the free blocks; refcounts = holders
        assert cache.cached_blocks <= kv.free
        holders = {}
        for p in idx.tolist():
            for key in cache.keys(p)[:cache.held.get(p, 0)]:
                holders[key] = holders.get(key, 0) + 1
        assert set(cache.held) == set(idx.tolist())
        assert all(cache.refs[k] == n for k, n in holders.items())
        assert sum(1 for n in cache.refs.values() if n > 0) == cache.ref_entries == len(holders)
        assert set(k for k, n in cache.refs.items() if n == 0) == set(cache.lru)
        for i, p in enumerate(idx.tolist()):
            assert own[i] == cache.held.get(p, 0) * cache.per_entry
        assert batch.sum_computed == int(computed.sum())
        self.max_used_blocks = max(self.max_used_blocks, kv.used)


def test_hit_rate_is_the_reuse_bound_with_ample_kv():
    w = _shared()
    res = run(w, check=CacheKVCheck())
    prompts = w.requests["input_tokens"].to_numpy()
    # the first request computes the shared prefix; each later one hits its 4 blocks exactly
    assert _rate(res) == (19 * 4 * B) / prompts.sum()
    f = res.requests.frame()
    assert f["cached_tokens"].tolist() == [0] + [4 * B] * 19
    assert _rate(run(w, engine={"enable_prefix_caching": False})) is None


def test_hit_rate_falls_as_kv_shrinks():
    # one hot system prompt (every other request) and five cold ones taken in turn: ample KV keeps
    # all six (the reuse bound); less KV evicts the cold ones (LRU), then only the hot one survives
    n = 48
    group = [0 if i % 2 == 0 else 1 + (i // 2) % 5 for i in range(n)]
    blocks = [tuple(range(100 * g, 100 * g + 4)) + (10**6 + i, 2 * 10**6 + i) for i, g in enumerate(group)]
    w = workload(np.arange(n) * 2.0, np.full(n, 5 * B + 50), np.full(n, 8), prefix_blocks=blocks)
    rates = [_rate(run(w, util=u, check=CacheKVCheck())) for u in (0.9, 0.16, 0.15, 0.14)]
    assert rates[0] == (n - 6) * 4 * B / w.requests["input_tokens"].sum()  # all but each group's first
    assert rates[0] > rates[1] > rates[2] >= rates[3] > 0, rates


def test_ttft_with_caching_is_no_worse():
    w = _shared(n=30, gap_s=0.02, out=32)
    on = run(w).requests.frame()
    off = run(w, engine={"enable_prefix_caching": False}).requests.frame()
    assert (on["ttft_ms"] <= off["ttft_ms"] + 1e-9).all()
    assert on["ttft_ms"].mean() < off["ttft_ms"].mean()


@pytest.mark.parametrize("util", [None, 0.14])
def test_fast_forward_equals_step_by_step_with_caching(util):
    rng = np.random.default_rng(3)
    n = 60
    shared = [tuple(range(100 * s, 100 * s + rng.integers(1, 6))) for s in range(4)]
    blocks, prompts = [], []
    for i in range(n):
        pre = shared[rng.integers(0, 4)]
        own = tuple(10_000 + 50 * i + j for j in range(rng.integers(0, 5)))
        tail = int(rng.integers(1, B))
        blocks.append(pre + own + (99_999_000 + i,))
        prompts.append((len(pre) + len(own)) * B + tail)
    w = workload(np.cumsum(rng.exponential(0.05, n)), prompts, rng.choice([1, 16, 200], n), prefix_blocks=blocks)
    check = CacheKVCheck()
    a, b = run_both(w, util=util, check=check)
    assert_same_requests(a, b)
    assert _rate(a) == _rate(b) and _rate(a) > 0


def test_no_prefix_caching_flag_gives_the_old_numbers(tmp_path):
    from simulator.apps.cli import main

    w = _shared(n=12, gap_s=0.05)
    f = w.requests.assign(hash_ids=[list(b) for b in w.requests["prefix_blocks"]])
    path = tmp_path / "t.jsonl"
    with open(path, "w") as fh:
        for r in f.itertuples():
            fh.write(json.dumps({"timestamp": int(r.arrival_s * 1000), "input_length": int(r.input_tokens),
                                 "output_length": int(r.output_tokens), "hash_ids": r.hash_ids}) + "\n")
    base = ["--trace", str(path), "--policy", "tp", "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1",
            "--profile", "none", "--format", "json"]
    outs = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-caching"])):
        d = tmp_path / name
        assert main(base + extra + ["--out", str(d)]) == 0
        outs[name] = json.loads((d / "summary.json").read_text())
    # without block hashes the trace runs as before caching existed
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "hash_ids"}) + "\n"
                             for line in path.read_text().splitlines()))
    assert main(["--trace", str(plain)] + base[2:] + ["--out", str(tmp_path / "plain")]) == 0
    plain_s = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert outs["off"]["prefix_cache_hit_rate"] is None and plain_s["prefix_cache_hit_rate"] is None
    assert outs["on"]["prefix_cache_hit_rate"] > 0.3
    for k in ("median_ttft_ms", "mean_ttft_ms", "duration", "mean_e2el_ms"):
        assert outs["off"][k] == plain_s[k], k
    assert outs["on"]["mean_ttft_ms"] < outs["off"]["mean_ttft_ms"]
