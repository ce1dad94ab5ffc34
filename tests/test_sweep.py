"""`simulate sweep` (issue #9): a 48-run grid gives one Parquet table, reruns skip finished runs,
and the Ray executor (a local Ray instance) gives exactly the same table as local processes."""
import importlib.util

import pandas as pd
import pytest

from simulator.apps.cli import main
from simulator.apps.sweep.grid import GridError, expand_grid, load_grid, run_sweep

GRID = """
[grid]
policies = ["tp", "dp", "sp", "shift"]
traces = ["synthetic:poisson?n=40&rate=4&input=512&output=32&seed=1",
          "synthetic:onoff?n=40&low=1-2&high=6-8&off_s=4&on_s=2&input=256-1024&output=16-64&seed=2"]
rate_scales = [0.5, 1.0, 2.0]
models = ["llama-3.1-8b"]
hardware = ["h100"]
gpus = [1, 2]
weights = "bf16"
[options]
profile = "none"
"""


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("grid") / "grid.toml"
    p.write_text(GRID)
    return p


@pytest.fixture(scope="module")
def local_results(grid_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "results.parquet"
    assert main(["sweep", "--grid", str(grid_file), "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    return out


def test_grid_of_48_runs_gives_one_table(local_results):
    df = pd.read_parquet(local_results)
    assert len(df) == 48 and df["run_id"].is_unique and (df["error"] == "").all()
    for key in ("completed", "duration", "total_token_throughput", "median_ttft_ms", "p99_tpot_ms",
                "policy", "policy_args", "trace", "rate_scale", "model", "hardware", "gpus"):
        assert key in df.columns
    assert (df["completed"] == 40).all()
    # a higher rate scale finishes the same requests sooner (arrivals dominate these small runs)
    by = df.groupby(["policy", "trace", "gpus"])
    assert by.apply(lambda g: g.sort_values("rate_scale")["duration"].is_monotonic_decreasing).all()


def test_rerun_skips_finished_runs(grid_file, local_results, tmp_path, monkeypatch):
    out = tmp_path / "r.parquet"
    out.write_bytes(local_results.read_bytes())
    pd.read_parquet(out).iloc[:40].to_parquet(out, index=False)  # as if interrupted after 40 runs
    ran = []
    import simulator.apps.sweep.executors as ex

    real = ex.run_task
    monkeypatch.setattr(ex, "run_task", lambda t: ran.append(t["run_id"]) or real(t))
    df = run_sweep(load_grid(grid_file), out, workers=1, progress=False)
    assert len(ran) == 8 and len(df) == 48
    pd.testing.assert_frame_equal(df, pd.read_parquet(local_results))
    ran.clear()
    run_sweep(load_grid(grid_file), out, workers=1, progress=False)
    assert ran == []


def test_policy_args_and_bad_grids():
    tasks = expand_grid({"grid": {"policies": ["tp", "shift"], "traces": "burstgpt.csv",
                                  "policy_args": {"shift": [{"threshold": 128}, {"threshold": 512}]}}})
    assert [(t["policy"], t["policy_args"]) for t in tasks] == [
        ("tp", "{}"), ("shift", '{"threshold": 128}'), ("shift", '{"threshold": 512}')]
    with pytest.raises(GridError, match="unknown axis 'polices'|polices"):
        expand_grid({"grid": {"polices": ["tp"], "traces": ["x"]}})
    with pytest.raises(GridError, match="policies"):
        expand_grid({"grid": {"traces": ["x"]}})


def test_failed_run_is_recorded_not_fatal(tmp_path):
    tasks = expand_grid({"grid": {"policies": ["tp"], "traces": ["synthetic:batch?n=4&input=64&output=4"],
                                  "models": ["llama-3.1-405b"], "hardware": ["l4"], "gpus": [1]}})
    df = run_sweep(tasks, tmp_path / "r.parquet", workers=1, progress=False)
    assert len(df) == 1 and "does not fit" in df["error"].iloc[0]


@pytest.fixture(scope="module")
def ray_session():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install '.[ray]'); the local executor is tested above")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow  # starting a local Ray cluster: ~6 s
def test_ray_executor_gives_identical_results(ray_session, grid_file, local_results, tmp_path):
    out = tmp_path / "ray.parquet"
    assert main(["sweep", "--grid", str(grid_file), "--out", str(out), "--executor", "ray",
                 "--no-progress"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(local_results))


def test_client_turnaround_option_reaches_the_run_and_is_checked(tmp_path):
    grid = {"grid": {"policies": ["tp"], "traces": ["synthetic:batch?n=6&input=64&output=4"],
                     "models": ["llama-3.1-8b"], "hardware": ["h100"], "gpus": [1], "max_concurrency": [2]},
            "options": {"tokenize_us_per_token": 0}}  # (hand-overs alone: the front end would queue sends)
    plain = run_sweep(expand_grid(grid), tmp_path / "a.parquet", workers=1, progress=False)
    slow = run_sweep(expand_grid({**grid, "options": {"client_turnaround_ms": 50, "tokenize_us_per_token": 0}}),
                     tmp_path / "b.parquet", workers=1, progress=False)
    assert plain["error"].iloc[0] == slow["error"].iloc[0] == ""
    # 6 requests, 2 slots: 2 hand-overs per slot, each 50 ms later than at once
    assert slow["duration"].iloc[0] == pytest.approx(plain["duration"].iloc[0] + 0.1, rel=1e-6)
    with pytest.raises(GridError, match="client_turnaround_ms = 5 needs a closed loop"):
        expand_grid({"grid": {**grid["grid"], "max_concurrency": [0, 2]}, "options": {"client_turnaround_ms": 5}})
    with pytest.raises(GridError, match="must be a number >= 0"):
        expand_grid({**grid, "options": {"client_turnaround_ms": -1}})
