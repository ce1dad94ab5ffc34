"""Issue 15, "knobs users need": --gpu-memory-utilization and --step-overhead-ms on `simulate`,
`perfmodel estimate` and sweeps ([options], beside max_model_len), each moving the result the right way
and recorded with it; bad values stop with one line and exit code 2. Also item 6's leftovers: estimate's
weights default to bf16 where the GPU has no fp8, and Flying on a model one unit fills says so."""
import json

import pandas as pd
import pytest

from perfmodel.cli import main as perfmodel_main
from simulator.apps.cli import main
from simulator.run import RunSpec
from simulator.apps.sweep.grid import GridError, expand_grid

TRACE = "synthetic:poisson?n=20&rate=2&input=256&output=16"
SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--policy", "tp", "--profile", "none",
         "--trace", TRACE]
ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--strategies", "tp",
            "--profile", "none", "--input", "1024", "--output", "64"]


def _sim(capsys, *argv) -> dict:
    assert main([*SMALL, "--format", "json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _estimate(capsys, *argv) -> dict:
    assert perfmodel_main([*ESTIMATE, "--format", "json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)[0]


def _refused(capsys, cli, argv) -> str:
    rc = cli(argv)
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "", (rc, cap.out, cap.err)
    assert cap.err.startswith("error: ") and cap.err.count("\n") == 1, cap.err
    return cap.err


def test_simulate_gpu_memory_utilization_sets_the_kv_and_is_recorded(capsys):
    base, low = _sim(capsys), _sim(capsys, "--gpu-memory-utilization", "0.5")
    assert base["gpu_memory_utilization"] == 0.9 and low["gpu_memory_utilization"] == 0.5
    # KV = HBM * utilisation - reserve - weights: 0.4 of the H100's 81,559 MiB (what the driver reports) less, at
    # ~131 kB per token (bf16 KV, 8B)
    assert low["kv_capacity_tokens"] < base["kv_capacity_tokens"]
    assert base["kv_capacity_tokens"] - low["kv_capacity_tokens"] == pytest.approx(0.4 * 81559 * 2**20 / 131072,
                                                                                rel=0.01)


def test_simulate_step_overhead_adds_to_every_step_and_is_recorded(capsys):
    base, slow = _sim(capsys), _sim(capsys, "--step-overhead-ms", "5")
    # vLLM's synchronous loop: 2 ms a step (perfmodel.framework.VLLM_SYNC_STEP_OVERHEAD_S, fitted)
    assert base["step_overhead_ms"] == 2.0 and slow["step_overhead_ms"] == 5.0
    # light load: each output token is one decode step, 3 ms longer
    assert slow["median_tpot_ms"] - base["median_tpot_ms"] == pytest.approx(3.0, abs=0.05)
    assert _sim(capsys, "--step-overhead-ms", "0.3")["step_overhead_ms"] == 0.3  # recorded as given


def test_simulate_writes_the_knobs_to_summary_json(capsys, tmp_path):
    assert main([*SMALL, "--gpu-memory-utilization", "0.8", "--step-overhead-ms", "2", "--out", str(tmp_path)]) == 0
    summ = json.loads((tmp_path / "summary.json").read_text())
    assert summ["gpu_memory_utilization"] == 0.8 and summ["step_overhead_ms"] == 2.0


def test_estimate_knobs_move_kv_and_tpot_and_are_shown(capsys):
    base = _estimate(capsys)
    low = _estimate(capsys, "--gpu-memory-utilization", "0.5")
    slow = _estimate(capsys, "--step-overhead-ms", "5")
    assert low["kv_capacity_tokens"] < base["kv_capacity_tokens"]
    assert slow["tpot_ms"] - base["tpot_ms"] == pytest.approx(3.0, abs=1e-6)  # 5 ms against vLLM's 2
    assert (low["gpu_memory_utilization"], slow["step_overhead_ms"]) == (0.5, 5.0)
    assert perfmodel_main([*ESTIMATE, "--gpu-memory-utilization", "0.5"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "gpu_memory_utilization 0.5, step overhead 2 ms" in table[0]
    row = next(line for line in table if line.startswith("tp "))  # (the profile / warning lines come first)
    assert row.split()[-1] == f"{low['kv_capacity_tokens']:,d}"  # the KV tokens column


@pytest.mark.parametrize("flag, value, needle", [
    ("--gpu-memory-utilization", "0", "gpu_memory_utilization=0.0 must be in (0, 1]"),
    ("--gpu-memory-utilization", "1.5", "gpu_memory_utilization=1.5 must be in (0, 1]"),
    ("--step-overhead-ms", "-1", "step_overhead_ms=-1.0 must be a finite number >= 0"),
    ("--step-overhead-ms", "nan", "step_overhead_ms=nan must be"),
])
def test_bad_knob_values_stop_with_one_line(capsys, flag, value, needle):
    assert needle in _refused(capsys, main, [*SMALL, flag, value])
    assert needle in _refused(capsys, perfmodel_main, [*ESTIMATE, flag, value])
    with pytest.raises(ValueError, match="must be"):
        RunSpec(**{flag[2:].replace("-", "_"): float(value)})


@pytest.mark.parametrize("flag, value, needle", [
    ("--hbm-gb", "-1", "hbm_gb=-1.0 must be a finite number > 0"),
    ("--hbm-gb", "inf", "hbm_gb=inf must be a finite number > 0"),
    ("--moe-a2a-call-us", "nan", "moe_a2a_call_us=nan must be a finite number >= 0"),
    ("--pd-handoff-ms", "-5", "pd_handoff_ms=-5.0 must be a finite number >= 0"),
    ("--seq-overhead-us", "-3", "seq_overhead_us=-3.0 must be a finite number >= 0"),
])
def test_bad_deployment_values_stop_with_one_line(capsys, flag, value, needle):
    """The deployment flags `simulate validate` writes into its rows' commands (issue 37) refuse bad values in
    one line, at the CLI and in RunSpec."""
    assert needle in _refused(capsys, main, [*SMALL, flag, value])
    with pytest.raises(ValueError, match="must be"):
        RunSpec(**{flag[2:].replace("-", "_"): float(value)})


def test_deployment_flags_reach_the_framework(capsys):
    """--pd-handoff-ms, --moe-a2a-call-us, --moe-kernel, --hbm-gb are recorded in the summary's run_spec and move
    what they should: a smaller reported memory leaves fewer KV tokens."""
    base = _sim(capsys)
    small = _sim(capsys, "--hbm-gb", "60", "--pd-handoff-ms", "5", "--moe-a2a-call-us", "7", "--moe-kernel", "marlin")
    spec = small["config"]["run_spec"]
    assert (spec["hbm_gb"], spec["pd_handoff_ms"], spec["moe_a2a_call_us"], spec["moe_kernel"]) == (60.0, 5.0, 7.0,
                                                                                                    "marlin")
    assert small["kv_capacity_tokens"] < base["kv_capacity_tokens"]


def _grid(tmp_path, options: str) -> str:
    grid = tmp_path / "g.toml"
    grid.write_text(f'[grid]\npolicies = ["tp"]\ntraces = ["{TRACE}"]\nmodels = ["llama-3.1-8b"]\n'
                    f'hardware = ["h100"]\ngpus = 1\n[options]\nprofile = "none"\n{options}')
    return str(grid)


def test_sweep_options_take_the_knobs_and_rows_carry_them(capsys, tmp_path):
    rows = []
    for i, opts in enumerate(["", "gpu_memory_utilization = 0.5\nstep_overhead_ms = 5\nmax_model_len = 2048\n"]):
        out = tmp_path / f"r{i}.parquet"
        assert main(["sweep", "--grid", _grid(tmp_path, opts), "--out", str(out), "--workers", "1",
                     "--no-progress"]) == 0
        rows.append(pd.read_parquet(out).iloc[0].to_dict())
    base, knobs = rows
    assert base["error"] == knobs["error"] == ""
    assert (base["gpu_memory_utilization"], base["step_overhead_ms"]) == (0.9, 2.0)
    assert (knobs["gpu_memory_utilization"], knobs["step_overhead_ms"], knobs["max_model_len"]) == (0.5, 5.0, 2048)
    assert knobs["kv_capacity_tokens"] < base["kv_capacity_tokens"]
    assert knobs["median_tpot_ms"] - base["median_tpot_ms"] == pytest.approx(3.0, abs=0.05)


def test_sweep_max_model_len_has_one_spelling_and_bad_knobs_stop_the_grid(capsys, tmp_path):
    grid = {"grid": {"policies": ["tp"], "traces": [TRACE]}}
    short = expand_grid({**grid, "options": {"max_model_len": 2048}})[0]
    long = expand_grid({**grid, "options": {"engine": {"max_model_len": 2048}}})[0]
    assert short["run_id"] == long["run_id"] and short["options"] == long["options"]
    with pytest.raises(GridError, match="give one"):
        expand_grid({**grid, "options": {"max_model_len": 2048, "engine": {"max_model_len": 4096}}})
    assert "gpu_memory_utilization=2 must be in (0, 1]" in _refused(
        capsys, main, ["sweep", "--grid", _grid(tmp_path, "gpu_memory_utilization = 2\n"),
                       "--out", str(tmp_path / "r.parquet")])


def test_estimate_weights_default_to_bf16_without_fp8(capsys):
    """As `simulate`: fp8 only where the GPU has fp8 tensor cores (H100), else bf16 (A100), shown in the header."""
    a100 = _estimate(capsys, "--hardware", "a100")
    assert a100["weights"] == "bf16" and _estimate(capsys)["weights"] == "fp8"
    assert a100["weights_gb_per_gpu"] > 1.5 * _estimate(capsys)["weights_gb_per_gpu"]  # 2 bytes a weight, not 1
    assert perfmodel_main([*ESTIMATE, "--hardware", "a100"]) == 0
    assert "llama-3.1-8b (bf16 weights, bf16 KV)" in capsys.readouterr().out.splitlines()[0]


def test_sweep_weights_default_by_hardware_as_simulate():
    """A grid without `weights` runs bf16 on A100 and fp8 on H100 (ids of fp8 grids unchanged)."""
    tasks = expand_grid({"grid": {"policies": ["tp"], "traces": [TRACE], "hardware": ["a100", "h100"]}})
    assert [(t["hardware"], t["weights"]) for t in tasks] == [("a100", "bf16"), ("h100", "fp8")]


def test_flying_with_one_unit_names_itself(capsys):
    err = _refused(capsys, main, ["--model", "llama-3.1-405b", "--weights", "bf16", "--profile", "none",
                                  "--policy", "flying", "--trace", TRACE])
    assert err.strip() == ("error: flying: llama-3.1-405b needs tp=8 per unit on h200_sxm, so 8 GPUs hold one "
                           "unit: nothing to bind; use --policy tp")


def test_simulate_async_scheduling_knob_is_recorded_and_moves_the_step(capsys):
    """--async-scheduling on|off (Framework.schedule_ahead, perfmodel.framework.with_async): vLLM's default
    (no version) is synchronous with 2 ms per step (fitted: VLLM_SYNC_STEP_OVERHEAD_S); on hides that host time (0 ms, as vLLM >= 0.14) and
    schedules ahead; an explicit --step-overhead-ms wins; SGLang and TRT-LLM are on unless told off."""
    base, on = _sim(capsys), _sim(capsys, "--async-scheduling", "on")
    assert (base["async_scheduling"], base["step_overhead_ms"]) == (False, 2.0)
    assert (on["async_scheduling"], on["step_overhead_ms"]) == (True, 0.0)
    assert base["median_tpot_ms"] - on["median_tpot_ms"] == pytest.approx(2.0, abs=0.05)  # light load: a step a token
    both = _sim(capsys, "--async-scheduling", "on", "--step-overhead-ms", "0.5")
    assert (both["async_scheduling"], both["step_overhead_ms"]) == (True, 0.5)
    assert _sim(capsys, "--framework", "sglang")["async_scheduling"] is True


@pytest.mark.parametrize("framework", ["sglang", "trtllm"])
def test_overlap_schedulers_hide_the_host_step_time(capsys, framework):
    """SGLang's and TRT-LLM's overlap schedulers (their default) prepare step n+1 while step n runs: no host time
    per step is exposed (0 ms, as vLLM's async scheduling); with overlap off the assumed 1 ms
    (SYNC_STEP_OVERHEAD_S) adds to every step. Regression (issue 37): their presets charged 1 ms under overlap."""
    on = _sim(capsys, "--framework", framework)
    off = _sim(capsys, "--framework", framework, "--async-scheduling", "off")
    assert (on["async_scheduling"], on["step_overhead_ms"]) == (True, 0.0)
    assert (off["async_scheduling"], off["step_overhead_ms"]) == (False, 1.0)
    assert off["median_tpot_ms"] - on["median_tpot_ms"] == pytest.approx(1.0, abs=0.05)  # light load: a step a token
    kept = _sim(capsys, "--framework", framework, "--async-scheduling", "off", "--step-overhead-ms", "0.25")
    assert kept["step_overhead_ms"] == 0.25  # an explicit value wins


def test_seq_overhead_adds_per_sequence_per_step(capsys):
    """--seq-overhead-us (Framework.seq_overhead_s, default 0): every sequence in a step adds it, so at light load
    (about one sequence a step) TPOT moves by about the value, and the run spec records it."""
    base, more = _sim(capsys), _sim(capsys, "--seq-overhead-us", "500")
    assert more["config"]["run_spec"]["seq_overhead_us"] == 500.0
    assert more["median_tpot_ms"] - base["median_tpot_ms"] == pytest.approx(0.5, abs=0.1)
