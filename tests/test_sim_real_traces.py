"""Real published traces (../shared/data/traces, skipped when absent) through the simulator: every
request ends completed or rejected, and fast-forward equals step by step on real arrival patterns
and lengths (Azure 2023 conversation, Mooncake with long prompts under KV pressure, BurstGPT)."""
import pytest
from test_sim_util import assert_same_requests, run_both

from simulator.apps.cli import main
from simulator.results.metrics import summarize
from simulator.workload import load_trace, time_window


def _check(ff, step):
    assert_same_requests(ff, step)
    f = ff.requests.frame()
    summ = summarize(f, ff.steps.frame(), ff.engines)
    assert summ["completed"] + summ["rejected"] == len(f)
    return summ


@pytest.mark.parametrize("policy", ["tp", "dp"])
def test_azure_conv_first_5_minutes(shared, policy):
    w = time_window(load_trace(shared / "data/traces/azure2023/AzureLLMInferenceTrace_conv.csv"), 0, 300)
    summ = _check(*run_both(w, model_name="llama-3.3-70b", hw="h200", gpus=8, policy=policy))
    assert summ["completed"] == len(w) > 1000


def test_mooncake_long_prompts_under_kv_pressure(shared):
    w = load_trace(shared / "data/traces/mooncake/conversation_trace.jsonl")
    w = w.replace(requests=w.requests.iloc[:150].reset_index(drop=True))
    summ = _check(*run_both(w, util=0.2))  # llama-3.1-8b fp8 on one H100 with 41k tokens of KV
    assert summ["preemptions"] > 0 and summ["rejected"] > 0 and summ["completed"] > 120
    assert list(summ["rejected_reasons"]) == ["longer than every engine's KV capacity (41328 tokens)"]


def test_burstgpt_slice_through_the_cli(shared, capsys):
    path = shared / "data/traces/burstgpt/BurstGPT_1_first400.csv"
    assert main(["--trace", str(path), "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "2",
                 "--policy", "dp", "--profile", "none", "--format", "json"]) == 0
    assert '"completed": 400' in capsys.readouterr().out
