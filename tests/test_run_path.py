"""One run path (issue 13): the CLI, a sweep and simulator.run give the same summary for the same
run, with one meaning of `kv_capacity_tokens` (the deployment's total) and one profile default
(the hardware's calibrated profile); callers do not assemble runs of their own."""
import ast
import json
from pathlib import Path

import pandas as pd
import pytest

from simulator.apps.cli import main
from simulator.run import RunSpec, run
from simulator.workload import load_trace

REPO = Path(__file__).resolve().parents[1]
TRACE = "synthetic:poisson?n=30&rate=6&input=512&output=24&seed=3"
KEYS = ("completed", "median_ttft_ms", "median_tpot_ms", "kv_capacity_tokens", "max_request_tokens",
        "profile", "engines")


@pytest.fixture(scope="module")
def direct():
    r = run(load_trace(TRACE), RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100", gpus=4, weights="bf16"))
    return r.summary, r.result


def test_kv_capacity_is_the_deployment_total(direct):
    summ, res = direct
    per_engine = [e["kv_capacity_tokens"] for e in res.engines]
    assert len(per_engine) == summ["engines"] == 4  # dp=4 x tp=1
    assert summ["kv_capacity_tokens"] == sum(per_engine) and summ["max_request_tokens"] == max(per_engine)


def test_cli_and_sweep_report_what_run_reports(direct, tmp_path, capsys):
    summ, _ = direct
    assert summ["profile"] == "h100_sxm"  # the default: the hardware's calibrated profile
    assert main(["--trace", TRACE, "--policy", "dp", "--model", "llama-3.1-8b", "--hardware", "h100",
                 "--gpus", "4", "--weights", "bf16", "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    grid = tmp_path / "g.toml"
    grid.write_text(f'[grid]\npolicies = ["dp"]\ntraces = ["{TRACE}"]\nmodels = ["llama-3.1-8b"]\n'
                    'hardware = ["h100"]\ngpus = 4\nweights = "bf16"\n')
    out = tmp_path / "r.parquet"
    assert main(["sweep", "--grid", str(grid), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    row = pd.read_parquet(out).iloc[0].to_dict()
    for k in KEYS:
        assert cli[k] == summ[k], k
        assert row[k] == summ[k], k


def _calls_simulate(path: Path) -> list[int]:
    """Lines where a module calls cluster.simulate.simulate (assembling a run itself)."""
    tree = ast.parse(path.read_text())
    names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
             and n.module == "simulator.cluster.simulate" for a in n.names if a.name == "simulate"}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id in names]


def test_callers_use_the_run_path():
    # the in-process loop timings (datasheet roofline, no frames) time simulate() itself, by design
    inner_loop = {"benchmarks/sim_speed.py", "benchmarks/steptable_speed.py"}
    files = [*REPO.glob("simulator/**/*.py"), *REPO.glob("notebooks/*.py"), *REPO.glob("benchmarks/*.py")]
    own = {p for p in files if p.relative_to(REPO).as_posix() in {"simulator/run.py", "simulator/cluster/simulate.py"}}
    bad = {p.relative_to(REPO).as_posix(): _calls_simulate(p) for p in files if p not in own}
    bad = {k: v for k, v in bad.items() if v and k not in inner_loop}
    assert not bad, f"assemble a run with simulator.run.run instead: {bad}"
