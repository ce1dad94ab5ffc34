"""Twin rows (two recipes ran at one concurrency, their results kept under identical columns): each recipe is
replayed and the labels given back by rank (simulator/apps/validate/twins.py), hand-worked cases."""
from __future__ import annotations

import dataclasses

from simulator.apps.validate.harness import as_launched, dsr1_choices
from simulator.apps.validate.recipes import sglang_dsr1_choices
from simulator.apps.validate.replay import Replayed
from simulator.apps.validate.rows import Case, Skip
from simulator.apps.validate.twins import assign


def _case(rid: str, ttft_ms: float, tpot_ms: float, conc: int = 6) -> Case:
    return Case(0, rid, "trtllm", "0.8.1.post3", "deepseek-ai/DeepSeek-R1", "h100", "fp8",
                "prefill 1x(tp=16,ep=16) decode 1x(tp=16,ep=16)", 32, 1024, 1024, conc, conc, ttft_ms, tpot_ms,
                "disagg", (("prefill", "1x(tp=16,ep=16)"), ("decode", "1x(tp=16,ep=16)")), 4)


def _replayed(case: Case, preds: list[tuple]) -> Replayed:
    """A row replayed under each (name, ttft, tpot) prediction; the first is the row's default."""
    alts = tuple(Replayed(dataclasses.replace(case, layout=name), ttft, tpot, 0, 0, 1) for name, ttft, tpot in preds)
    return dataclasses.replace(alts[0], alternatives=alts) if len(alts) > 1 else alts[0]


def test_the_faster_measurement_takes_the_recipe_predicted_faster():
    preds = [("plain", 12000.0, 13.4), ("mtp3", 6200.0, 7.0)]
    rows = [_replayed(_case("a", 12345.08, 14.01), preds),
            _replayed(_case("b", 6909.49, 7.66), preds),
            _replayed(_case("c", 12345.080000000002, 14.010000000000001), preds)]  # a's copy, float noise
    out, moved = assign(rows)
    assert [r.case.layout for r in out] == ["plain", "mtp3", "plain"] and moved == 1
    assert [r.case.id for r in out] == ["a", "b", "c"] and out[1].tpot_ms == 7.0
    assert out[1].case.tpot_ms == 7.66  # the measured values stay the row's


def test_ranks_follow_the_model_not_the_recipe_names():
    """Where the model predicts the MTP recipe slower, the slower measurement is labelled MTP: the error of a
    wrong prediction stays visible."""
    preds = [("plain", 5000.0, 9.0), ("mtp3", 9000.0, 18.0)]
    out, _ = assign([_replayed(_case("a", 6000.0, 20.0), preds), _replayed(_case("b", 5000.0, 10.0), preds)])
    assert [r.case.layout for r in out] == ["mtp3", "plain"]
    assert [round(r.tpot_rel_err, 2) for r in out] == [-0.1, -0.1]


def test_a_lone_measurement_replays_the_first_recipe_even_if_another_is_closer():
    preds = [("plain", 12000.0, 13.4), ("mtp3", 6200.0, 7.0)]
    out, moved = assign([_replayed(_case("a", 6909.49, 7.66), preds), _replayed(_case("b", 6909.49, 7.66), preds)])
    assert [r.case.layout for r in out] == ["plain", "plain"] and moved == 0


def test_rows_without_alternatives_and_skips_pass_through():
    one = _replayed(_case("x", 100.0, 10.0, conc=117), [("mtp3", 90.0, 9.0)])
    skip = Skip(3, "y", "vllm", "m", "why")
    out, moved = assign([one, skip])
    assert out[0] is one and out[1] is skip and moved == 0


def test_sglang_max_dep_runs_up_to_64_with_4_requests_per_rank():
    both = sglang_dsr1_choices("0.5.8", 1024, 8192, 64)
    assert [n for _, n in both] == ["h100-fp8-1p2d-max-tp-mtp", "h100-fp8-1p1d-max-dep-mtp"]
    dep = dict(both[1][0])
    assert (dep["decode"], dep["decode_max_seqs"], dep["prefill_max_seqs"], dep["decode_mtp"]) == \
        ("1x(dp=16,tp=1,ep=16)", "4", "4", "2")
    assert [n for _, n in sglang_dsr1_choices("0.5.8", 8192, 1024, 128)] == ["h100-fp8-1p1d-max-tp-mtp"]
    assert sglang_dsr1_choices("0.5.6", 1024, 8192, 64) == []


def test_trtllm_twin_concurrency_launches_each_recipe():
    c = _case("t", 1.0, 1.0)
    names = [n for _, n in dsr1_choices(c)]
    assert names == ["ctx1_gen3_tep16_batch1_eplb0_mtp0", "ctx1_gen3_tep16_batch1_eplb0_mtp3"]
    assert dict(as_launched(c, 1).policy_args)["decode_mtp"] == "3" and "decode_mtp" not in dict(as_launched(c).policy_args)
