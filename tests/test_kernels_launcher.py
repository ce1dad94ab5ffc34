"""`python -m kernels.run`: per-step times and bytes, --check parity verdict and exit codes."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from kernels.run import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_check_passes_and_prints_steps(capsys):
    assert main(["--strategy", "shift", "--world-size", "2", "--model", "tiny", "--check"]) == 0
    out = capsys.readouterr().out
    assert "step 10" in out and "base" in out and "shift" in out and "all_to_all=" in out
    assert out.rstrip().endswith("OK")


def test_check_fails_above_tolerance(capsys):
    assert main(["--strategy", "tp", "--world-size", "2", "--check", "--tolerance", "1e-12"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_bad_layout_is_exit_2(capsys):
    assert main(["--strategy", "sp", "--world-size", "2", "--layout", "sp=3"]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow  # a fresh interpreter importing torch and a 2-rank world: ~4 s
def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "kernels.run", "--strategy", "pp", "--world-size", "2", "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pp_stage" not in r.stdout and "send_recv=" in r.stdout and r.stdout.rstrip().endswith("OK")


def test_nccl_ranks_use_the_gpu_init_selected(monkeypatch):
    """Regression: device() returned cuda:LOCAL_RANK, and workers that kernels.dist.spawn starts (no
    torchrun) have no LOCAL_RANK, so every rank put its tensors on cuda:0 while init had selected
    cuda:rank. It now returns the current device, the one init selected, under either launcher."""
    import torch
    import torch.distributed as dist

    from kernels import dist as kd

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda *a: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # init's set_device(rank 3)
    assert kd.device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend", lambda *a: "gloo")
    assert kd.device() == torch.device("cpu")
