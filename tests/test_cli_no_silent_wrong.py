"""Issue 15, items 5 and 6: `simulate` never answers quietly wrong. An overloaded run is flagged
(`saturated`, one warning line), goodput is null without an SLO, an all-rejected run has null
latencies and the trace's duration; bad knobs stop with one `error:` line and exit code 2."""
import json

import pytest

from simulator.apps.cli import main
from simulator.engine.config import EngineConfig
from simulator.run import workload

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--policy", "tp", "--profile", "none"]
LIGHT = "synthetic:poisson?n=20&rate=2&input=256&output=16"


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([*SMALL, *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _json(capsys, *argv) -> tuple[dict, str]:
    rc, out, err = _run(capsys, "--format", "json", *argv)
    assert rc == 0, err
    return json.loads(out), err


def _refused(capsys, *argv) -> str:
    """The run stops with exit code 2, nothing on stdout and one `error:` line on stderr."""
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "", (rc, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_overloaded_run_is_flagged_and_a_light_one_is_not(capsys):
    # 1 x H100 serves ~14 req/s of 2048/256-token requests (datasheet): 50 req/s is 3.5x too many
    summ, err = _json(capsys, "--trace", "synthetic:poisson?n=400&rate=50&input=2048&output=256")
    assert summ["saturated"] is True
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "tp is saturated" in warnings[0], err
    summ, err = _json(capsys, "--trace", LIGHT)
    assert summ["saturated"] is False and "warning" not in err


def test_goodput_is_null_without_an_slo(capsys):
    summ, _ = _json(capsys, "--trace", LIGHT)
    assert summ["request_goodput"] is None and summ["goodput_requests"] is None
    summ, _ = _json(capsys, "--trace", LIGHT, "--slo-ttft-ms", "1e6")
    assert summ["goodput_requests"] == 20 and summ["request_goodput"] == pytest.approx(summ["request_throughput"])
    rc, out, _ = _run(capsys, "--trace", LIGHT)  # the table prints a null as '-'
    assert rc == 0 and [ln.split()[-1] for ln in out.splitlines() if ln.startswith("request_goodput")] == ["-"]


def test_all_rejected_run_has_null_latencies_and_the_trace_duration(capsys):
    trace = "synthetic:poisson?n=20&rate=2&input=3000000&output=16"  # longer than the KV of one H100
    summ, err = _json(capsys, "--trace", trace)
    assert summ["completed"] == 0 and summ["rejected"] == 20 and summ["saturated"] is False and "warning" not in err
    for key in ("median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms", "median_e2el_ms", "median_queue_ms"):
        assert summ[key] is None, key
    arr = workload(trace).requests["arrival_s"]
    assert summ["duration"] == pytest.approx(arr.max() - arr.min())
    rc, out, _ = _run(capsys, "--trace", trace)
    rows = {ln.split()[0]: ln.split()[-1] for ln in out.splitlines()[2:]}
    assert rc == 0 and rows["median_ttft_ms"] == "-" and rows["duration"] != "0.0"


def test_block_size_must_be_one_of_vllms(capsys):
    assert "block_size=7" in _refused(capsys, "--trace", LIGHT, "--block-size", "7")
    for b in (1, 16, 64):  # the block sizes the simulator's own tests use stay valid
        assert EngineConfig(block_size=b).block_size == b


@pytest.mark.parametrize("gpus", ["0", "-1"])
def test_no_gpus_is_an_error(capsys, gpus):
    for policy in ("tp", "dp", "shift"):
        assert f"--gpus {gpus} must be >= 1" in _refused(capsys, "--trace", LIGHT, "--policy", policy, "--gpus", gpus)


def test_a_model_that_does_not_fit_says_so(capsys):
    err = _refused(capsys, "--trace", LIGHT, "--model", "llama-3.1-405b", "--weights", "bf16", "--hardware", "h200",
                   "--policy", "dp")
    assert "does not fit 1 x h200_sxm" in err and "GB of weights per GPU vs" in err and "GB usable" in err


def test_prefill_only_requests_are_noted(capsys, tmp_path):
    csv = tmp_path / "burst.csv"
    csv.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "0,ChatGPT,100,20,120,API log\n1,ChatGPT,200,0,200,API log\n2,GPT-4,300,0,300,API log\n")
    summ, err = _json(capsys, "--trace", str(csv))
    assert summ["completed"] == 3
    # (besides the note that the bf16 checkpoint runs as fp8 by default: issue 33)
    assert [ln for ln in err.splitlines() if ln.startswith("note:") and not ln.startswith("note: weights:")] == [
        "note: 2 request(s) with 0 output tokens run as prefill-only"]
    _, err = _json(capsys, "--trace", LIGHT)
    assert [ln for ln in err.splitlines() if ln.startswith("note:") and not ln.startswith("note: weights:")] == []


def test_weights_default_to_fp8_only_where_the_hardware_has_fp8(capsys):
    """The default follows the GPU: bf16 on A100 (no fp8 tensor cores), fp8 on H100. fp8 asked for on
    an A100 is modelled as vLLM runs it there (weight-only W8A16: fp8 bytes, bf16 GEMMs), not refused."""
    assert _json(capsys, "--trace", LIGHT, "--hardware", "a100")[0]["weights"] == "bf16"
    assert _json(capsys, "--trace", LIGHT)[0]["weights"] == "fp8"  # h100
    w8a16 = _json(capsys, "--trace", LIGHT, "--hardware", "a100", "--weights", "fp8")[0]
    bf16 = _json(capsys, "--trace", LIGHT, "--hardware", "a100")[0]
    assert w8a16["weights"] == "fp8" and w8a16["median_tpot_ms"] < bf16["median_tpot_ms"]  # half the weight bytes


@pytest.mark.parametrize("version, says", [("99.0", "newer"), ("0.180", "newer"), ("0.10.1", "older"),
                                           ("0.18.0", None), ("0.12.0", None)])
def test_a_framework_version_outside_the_cited_ones_runs_with_a_note(capsys, version, says):
    """`--framework-version 99.0` (or a typo: 0.180) ran with 0.18.0's defaults and said nothing (2026-12-03): a
    version outside docs/frameworks.md's cited ones now says whose defaults it got; a cited one says nothing."""
    summ, err = _json(capsys, "--trace", LIGHT, "--framework", "vllm", "--framework-version", version)
    notes = [ln for ln in err.splitlines() if "cited from source" in ln]
    if says is None:
        assert notes == [] and not any("cited from source" in n for n in summ["notes"])
    else:
        assert len(notes) == 1 and notes[0].startswith(f"note: vLLM {version} is {says} than any version"), err
        assert notes[0][len("note: "):] in summ["notes"]
    from perfmodel.cli import main as perfmodel_main  # `perfmodel estimate` says the same
    assert perfmodel_main(["estimate", "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1",
                           "--framework", "vllm", "--framework-version", version, "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert ("cited from source" in err) == (says is not None), err
