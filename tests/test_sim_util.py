"""Helpers shared by the simulator tests (this module holds no tests): small workloads, one-call
runs, per-request comparison, and an Engine subclass that checks KV invariants after every step."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from perfmodel.framework import DEFAULT_FRAMEWORK
from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model
from simulator.cluster import simulate as cluster
from simulator.cluster.simulate import SimConfig, simulate
from simulator.engine.config import EngineConfig
from simulator.engine.loop import Engine
from simulator.engine.scheduler import blocks_for
from simulator.workload import make_workload

INT_COLUMNS = ("generated_tokens", "preemptions", "engine", "status", "reject_reason")
TIME_COLUMNS = ("issued_s", "scheduled_s", "first_token_s", "finish_s")


@functools.lru_cache(maxsize=None)
def model(name: str = "llama-3.1-8b", weights: str = "fp8"):
    return load_model(name, weights=weights)


@functools.lru_cache(maxsize=None)
def hardware(name: str = "h100"):
    return load_hardware(name)


def workload(arrival_s, input_tokens, output_tokens, **cols):
    """A Workload from plain lists/arrays (priority, request_id optional)."""
    return make_workload({"arrival_s": np.asarray(arrival_s, dtype=float), "input_tokens": input_tokens,
                          "output_tokens": output_tokens, **cols})


def batch(n: int, input_tokens: int, output_tokens: int):
    """n equal requests, all at t = 0 (a fixed batch)."""
    return workload(np.zeros(n), np.full(n, input_tokens), np.full(n, output_tokens))


def framework(gpu_memory_utilization: float | None = None):
    """The default framework, optionally with less memory for KV (to force KV pressure cheaply:
    llama-3.1-8b fp8 on one H100 keeps 4.7k tokens of KV at 0.14, 17k at 0.16)."""
    if gpu_memory_utilization is None:
        return DEFAULT_FRAMEWORK
    return dataclasses.replace(DEFAULT_FRAMEWORK, gpu_memory_utilization=gpu_memory_utilization)


def run(w, *, model_name="llama-3.1-8b", hw="h100", weights="fp8", util=None, engine=None, prof=None, **cfg):
    """simulate() with the datasheet roofline (prof=None) unless told; `engine` = EngineConfig fields."""
    cfg.setdefault("gpus", 1)
    sim = SimConfig(engine=EngineConfig(**(engine or {})), framework=framework(util), **cfg)
    return simulate(w, model(model_name, weights), hardware(hw), sim, prof)


def run_both(w, **kw):
    """(fast-forward result, step-by-step result) of the same run."""
    eng = dict(kw.pop("engine", None) or {})
    return (run(w, engine={**eng, "fast_forward": True}, **kw),
            run(w, engine={**eng, "fast_forward": False}, **kw))


def assert_same_requests(a, b, rel: float = 1e-9) -> None:
    """Per-request results equal: integer fields exactly, times to `rel` (closed-form sums of a
    stretch and step-by-step sums differ in rounding only), NaN where the other is NaN."""
    fa, fb = a.requests.frame(), b.requests.frame()
    for c in INT_COLUMNS:
        bad = np.flatnonzero(fa[c].to_numpy() != fb[c].to_numpy())
        assert len(bad) == 0, f"{c} differs for request(s) {bad[:5].tolist()}: {fa[c].iloc[bad[0]]} vs {fb[c].iloc[bad[0]]}"
    for c in TIME_COLUMNS:
        x, y = fa[c].to_numpy(), fb[c].to_numpy()
        assert (np.isnan(x) == np.isnan(y)).all(), f"{c}: NaN pattern differs"
        ok = ~np.isnan(x)
        err = np.abs(x[ok] - y[ok]) / np.maximum(np.abs(y[ok]), 1e-12)
        if len(err):
            i = int(np.argmax(err))
            assert err[i] <= rel, f"{c} of request {np.flatnonzero(ok)[i]}: {x[ok][i]!r} vs {y[ok][i]!r} (rel {err[i]:.2e})"


class CheckedEngine(Engine):
    """An Engine that asserts the KV and batch invariants after every step it applies."""

    max_used_blocks = 0  # over every instance, reset by `checked_engines`

    def _apply(self, *args, **kw):
        super()._apply(*args, **kw)
        run = self.run
        assert 0 <= self.used_blocks <= self.num_blocks, (self.used_blocks, self.num_blocks)
        assert self.used_blocks == int(run.blocks.sum()), "used_blocks out of step with the batch"
        assert (run.blocks == blocks_for(run.computed, self.bs)).all(), "blocks != ceil(computed / block)"
        assert (run.computed <= run.prompt + run.generated).all(), "KV computed past the sampled tokens"
        assert (run.generated < np.maximum(run.output, 1)).all(), "a finished request still runs"
        assert len(run) <= self.max_seqs
        if self._known is run:  # the engine's running sums, kept step by step, equal a recount
            assert self._sum_computed == int(run.computed.sum()), "cached sum of computed tokens is stale"
            if self._k_done is not None and len(run):
                assert self._k_done == int((run.output - run.generated).min()), "cached steps-to-completion stale"
        CheckedEngine.max_used_blocks = max(CheckedEngine.max_used_blocks, self.used_blocks)


def checked_engines(monkeypatch) -> type:
    """Make simulate() build CheckedEngines for the rest of the test."""
    CheckedEngine.max_used_blocks = 0
    monkeypatch.setattr(cluster, "Engine", CheckedEngine)
    return CheckedEngine


def assert_monotone(res) -> None:
    """Per request: arrival <= issued <= scheduled <= first token <= finish; per engine: steps in
    time order, each starting no earlier than the previous one ended."""
    f = res.requests.frame()
    chain = ["arrival_s", "issued_s", "scheduled_s", "first_token_s", "finish_s"]
    for a, b in zip(chain, chain[1:]):
        x, y = f[a].to_numpy(), f[b].to_numpy()
        ok = ~np.isnan(x) & ~np.isnan(y)
        assert (x[ok] <= y[ok]).all(), f"{a} > {b} for some request"
    done = f["status"] == "completed"
    assert (f.loc[done, "scheduled_s"] <= f.loc[done, "finish_s"]).all()
    s = res.steps.frame()
    for _, g in s.groupby("engine"):
        start, end = g["start_s"].to_numpy(), (g["start_s"] + g["duration_s"]).to_numpy()
        assert (g["duration_s"] > 0).all()
        assert (start[1:] >= end[:-1] - 1e-12 * np.maximum(1.0, end[:-1])).all(), "steps overlap"
