"""The four public traces in ../shared load and match the statistics their README states.

README numbers are rounded (means and percentiles to integers, CV and rates to one decimal,
duration to 0.1 h), so each check allows half a unit of the stated precision, and 0.5% on
means / percentiles (the README truncates e.g. the BurstGPT output mean 276.5 to 276).
Percentiles are numpy's default (linear); CV = std/mean of all inter-arrival gaps (ddof=0).
"""
import numpy as np
import pytest

from simulator.workload import load_trace


@pytest.fixture
def traces(shared):
    """../shared/data/traces (conftest's `shared` finds $PSIM_SHARED or ../shared, else skips)."""
    d = shared / "data" / "traces"
    if not d.is_dir():
        pytest.skip(f"public traces not found at {d}")
    return d


def close(value, stated, rel=0.005, abs_=0.5):
    """Within 0.5% or half a unit of the README's rounding, whichever is larger."""
    return abs(value - stated) <= max(rel * abs(stated), abs_)


def check_lengths(s, inp, out):
    for key, stated in zip(("mean", "p50", "p99"), inp):
        assert close(s[f"input_tokens_{key}"], stated), (key, s[f"input_tokens_{key}"], stated)
    for key, stated in zip(("mean", "p50", "p99"), out):
        assert close(s[f"output_tokens_{key}"], stated), (key, s[f"output_tokens_{key}"], stated)


def test_burstgpt_slice(traces):
    w = load_trace(traces / "burstgpt" / "BurstGPT_1_first400.csv")
    s = w.summary()
    assert s["requests"] == 400
    check_lengths(s, (520, 314, 1958), (276, 230, 1421))
    assert close(s["interarrival_cv"], 4.6, abs_=0.05)
    assert close(s["duration_s"] / 3600, 10.4, abs_=0.05)
    assert s["prefill_only_requests"] == 17  # README: 17 failed rows, kept by default
    dropped = load_trace(traces / "burstgpt" / "BurstGPT_1_first400.csv", drop_failed=True)
    assert len(dropped) == 383 and dropped.summary()["dropped_failed_requests"] == 17


def test_azure_2023_conversation(traces):
    w = load_trace(traces / "azure2023" / "AzureLLMInferenceTrace_conv.csv")
    s = w.summary()
    assert s["requests"] == 19_366
    check_lengths(s, (1155, 1020, 4142), (211, 129, 601))
    assert close(s["mean_rate_rps"], 5.5, abs_=0.05)
    assert close(s["interarrival_cv"], 1.1, abs_=0.05)
    assert close(s["duration_s"] / 3600, 1.0, abs_=0.05)  # "~1 hour"


def test_mooncake_conversation(traces):
    w = load_trace(traces / "mooncake" / "conversation_trace.jsonl")
    s = w.summary()
    assert s["requests"] == 12_031
    check_lengths(s, (12035, 6909, 85400), (343, 350, 1118))
    assert close(s["mean_rate_rps"], 3.4, abs_=0.05)
    t = w.requests["arrival_s"].to_numpy()
    # README: timestamps on 3-second ticks (give or take a few ms), ~10 requests per tick
    assert np.abs(t - 3.0 * np.round(t / 3.0)).max() <= 0.005
    assert len(t) / len(np.unique(t)) == pytest.approx(10, rel=0.2)
    blocks = w.requests["prefix_blocks"]
    assert all(len(b) > 0 for b in blocks)
    # 512-token blocks: a prompt of L tokens has ceil(L / 512) hash ids
    n_blocks = np.array([len(b) for b in blocks])
    assert np.mean(n_blocks == np.ceil(w.requests["input_tokens"] / 512)) > 0.99


def test_sharegpt_lengths_table(traces):
    path = traces / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    w = load_trace(path)
    assert len(w) == 30_731 and (w.requests["arrival_s"] == 0).all()
    syn = load_trace(f"synthetic:poisson?rate=4&n=20000&lengths={path}&seed=0").summary()
    table = w.summary()
    assert syn["input_tokens_mean"] == pytest.approx(table["input_tokens_mean"], rel=0.03)
    assert syn["output_tokens_p50"] == pytest.approx(table["output_tokens_p50"], rel=0.03)
