"""`perfmodel estimate` from the command line: formats, defaults, one-line errors with exit 2."""
import json
import subprocess
import sys

import pytest

from perfmodel.cli import main


def test_estimate_json_keys(capsys):
    assert main(["estimate", "--format", "json", "--strategies", "dp,tp,sp,shift"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in rows] == ["dp", "tp", "sp", "shift"]
    for r in rows:
        assert {"strategy", "ttft_ms", "tpot_ms", "throughput_tokens_per_s", "max_context_tokens"} <= set(r)
        assert r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["max_context_tokens"] > 0


def test_estimate_defaults_table_and_explain(capsys):
    assert main(["estimate", "--explain", "--strategies", "tp"]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "all_reduce" in out and "profile:" in out


def test_layout_strategies_and_csv(capsys):
    assert main(["estimate", "--strategies", "tp=2,pp=4;pp=8", "--format", "csv",
                 "--model", "llama-3.1-70b", "--weights", "bf16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("strategy,") and len(out) == 3


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "--model", "gpt-9"], "unknown model"),
    (["estimate", "--hardware", "tpu"], "unknown hardware"),
    (["estimate", "--strategies", "tp=3"], "does not divide"),
    (["estimate", "--strategies", "sp", "--model", "llama-3.1-405b"], "does not fit"),
    (["estimate", "--gpus", "16"], "exceeds the 8 GPUs"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "perfmodel.cli", "estimate", "--model", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error:")
