"""Metamorphic relations of whole runs (tests/metamorphic.py): a trace moved later in time gives the same latencies,
and a request that arrives at t changes nothing that ran before t. Mixes that cover both front ends (vLLM's
micro-batches, SGLang's one at a time), prefix caching, a closed loop, disaggregation and a policy whose state
outlives an idle engine; benchmarks/differential_fuzz.py --relation runs all 27 mixes."""
from __future__ import annotations

import numpy as np
import pytest

from metamorphic import RELATIONS, spec, trace

MIXES = [  # (policy, RunSpec fields, EngineConfig fields, shared prefix blocks)
    ("dp", {}, {}, True),
    ("tp", {"framework": "sglang"}, {"max_num_batched_tokens": 768}, False),
    ("dp", {"framework": "trtllm", "max_concurrency": 3}, {}, False),
    ("disagg", {"framework": "trtllm"}, {}, False),
    ("flying", {"framework": "trtllm"}, {}, False),
]


@pytest.mark.parametrize("relation", sorted(RELATIONS))
@pytest.mark.parametrize("mix", MIXES, ids=lambda m: f"{m[0]}-{m[1].get('framework', 'vllm')}")
def test_relation_holds(relation, mix):
    policy, fields, eng, prefix = mix
    for seed in range(2):
        rng = np.random.default_rng(1000 + seed)
        w = trace(rng, int(rng.integers(8, 25)), 6000, prefix)
        RELATIONS[relation](w, spec(policy, fields, eng, True, False), rng)


def test_causal_relation_catches_a_front_end_that_reads_ahead(monkeypatch):
    """The relation can fail: a one-at-a-time tokenizer that starts a prompt 3 ms before it is sent (a look-ahead
    at the known arrival times) delivers it into a step that began before it arrived."""
    from simulator.cluster import frontend

    feed = frontend.Tokenizer.feed

    def feed_early(self, arrival_s, tokens_of):  # (the bug: every prompt taken in 3 ms before it is sent)
        return feed(self, [t - 0.003 for t in arrival_s], tokens_of)

    monkeypatch.setattr(frontend.Tokenizer, "feed", feed_early)
    s = spec("tp", {"framework": "sglang"}, {"priority_scheduling": True, "max_num_batched_tokens": 768}, True, False)
    caught = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        try:
            RELATIONS["causal"](trace(rng, 30, 6000, False), s, rng)
        except AssertionError:
            caught += 1
    assert caught


@pytest.mark.parametrize("case", [("sidp", {"framework": "trtllm"}, {}, 1001, 19),
                                  ("pp", {"framework": "trtllm"}, {"max_num_batched_tokens": 1024}, 1005, 20),
                                  ("dp", {"framework": "sglang", "max_concurrency": 4}, {}, 2002, 0),
                                  ("seesaw", {"framework": "trtllm"}, {}, 2005, 35)],
                         ids=["stretch-cut-to-one-step", "no-steps-before", "closed-loop-stretch-longer",
                              "switch-row"])
def test_causal_relation_passes_what_is_no_look_ahead(case):
    """Regression (2026-12-03, `differential_fuzz.py --relation causal` seeds 1000-1005 and 2000-2007): false
    failures. A decode stretch begun before the new request and cut by it to one step looked like a single step only
    one run had (SiDP on TRT-LLM); in a closed loop the new request also moves the later issues that cut a stretch,
    which then runs longer (SGLang, 4 clients); two runs with no step before t compared unequal by their mode
    categories, the modes each run ever ran, and the report itself raised TypeError (PP on TRT-LLM). The fuzz's own
    traces (its seeds and mix indices)."""
    policy, fields, eng, seed, ci = case
    rng = np.random.default_rng(seed * 100 + ci)
    w = trace(rng, int(rng.integers(5, 40)), 9000, False)
    RELATIONS["causal"](w, spec(policy, fields, eng, True, False), rng)
