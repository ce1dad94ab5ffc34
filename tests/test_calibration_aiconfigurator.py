"""`perfmodel calibrate --from-aiconfigurator SYSTEM` (perfmodel/calibration/aiconfigurator.py): the package's
parquet tables become the same frames as the CSVs in ../shared; nothing outside systems/data/<system>/ is opened."""
import builtins
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibration import aiconfigurator as aic
from perfmodel.calibration import cli
from perfmodel.calibration.readers import read_measurements_any

HAVE_PACKAGE = importlib.util.find_spec(aic.PACKAGE) is not None
needs_package = pytest.mark.skipif(not HAVE_PACKAGE, reason="aiconfigurator-core is not installed (extra 'aic')")
REPO = Path(__file__).resolve().parents[1]
HELD_OUT = "held_out_sample.csv"  # the stand-in for the package's end-to-end sample (systems/, beside data/)


def fake_package(root: Path) -> Path:
    """A package tree with one small system ('tiny': GEMMs, NCCL, vLLM's custom all-reduce) and, beside
    systems/data as the package's held-out end-to-end sample lies, a CSV that is not a table at all: reading it
    would fail loudly."""
    data = root / "aiconfigurator_core" / "systems" / "data" / "tiny"
    rows = [dict(framework="TRTLLM", version="1.0", device="NVIDIA H100 80GB HBM3", op_name="gemm",
                 kernel_source="torch_flow", gemm_dtype=dt, m=m, n=n, k=k,
                 latency=(0.004 + 2 * m * n * k / 700e12 * 1e3) * (0.6 if dt == "fp8" else 1.0))
            for dt in ("bfloat16", "fp8", "fp8_block") for m in (1, 16, 256, 4096)
            for n in (1024, 4096, 16384) for k in (1024, 4096, 16384)]
    for folder, table in ((data / "gemm/trtllm/0.9", rows[:3]), (data / "gemm/trtllm/1.0", rows)):
        folder.mkdir(parents=True)
        pd.DataFrame(table).to_parquet(folder / "gemm_perf.parquet")  # 1.0 is the newest: only it is read
    nccl = [dict(framework="TRTLLM", version="2.29.2", device="NVIDIA H100 80GB HBM3", op_name=op, kernel_source="NCCL",
                 nccl_dtype="half", num_gpus=g, message_size=int(s), latency=0.01 + 2 * s / 300e6)
            for op in ("all_reduce", "all_gather") for g in (2, 4, 8) for s in 2 ** np.arange(8, 26, 2)]
    (data / "comm/nccl/2.29.2").mkdir(parents=True)
    pd.DataFrame(nccl).to_parquet(data / "comm/nccl/2.29.2/nccl_perf.parquet")
    ar = [dict(framework="vLLM", version="0.24.0", device="NVIDIA H100 80GB HBM3", op_name="all_reduce",
               kernel_source=k, allreduce_dtype="bfloat16", num_gpus=g, message_size=int(s), latency=0.004 + s / 1e9)
          for k in ("vLLM_custom_graph", "vLLM_custom_eager") for g in (2, 4, 8) for s in 2 ** np.arange(7, 22)]
    (data / "comm/vllm/0.24.0").mkdir(parents=True)
    pd.DataFrame(ar).to_parquet(data / "comm/vllm/0.24.0/custom_allreduce_perf.parquet")
    (root / "aiconfigurator_core" / "systems" / HELD_OUT).write_bytes(b"\x00not a table\x00")
    return root / "aiconfigurator_core"


@pytest.fixture
def opened(monkeypatch):
    """Every path opened through open(), pandas.read_csv or pandas.read_parquet while the test runs."""
    seen = []
    for mod, name in ((builtins, "open"), (pd, "read_csv"), (pd, "read_parquet")):
        real = getattr(mod, name)

        def spy(path, *a, _real=real, **k):
            seen.append(str(path))
            return _real(path, *a, **k)
        monkeypatch.setattr(mod, name, spy)
    return seen


def test_fake_package_converts_and_never_opens_the_held_out_file(tmp_path, monkeypatch, capsys, opened):
    pkg = fake_package(tmp_path)
    monkeypatch.setattr(aic, "package_dir", lambda: pkg)
    out = tmp_path / "tiny.json"
    rc = cli.main(["calibrate", "--from-aiconfigurator", "tiny", "--base", "h100_sxm", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    d = json.loads(out.read_text())
    prov = d["provenance"]
    assert sorted(s["file"] for s in prov["sources"]) == ["comm/nccl/2.29.2/nccl_perf.parquet",
                                                         "comm/vllm/0.24.0/custom_allreduce_perf.parquet",
                                                         "gemm/trtllm/1.0/gemm_perf.parquet"]
    assert prov["aiconfigurator"]["kernel_tables"] == "trtllm collection"
    assert prov["rows_skipped"]["gemm/trtllm/1.0/gemm_perf.parquet: gemm rows of other dtypes (fp8_block, ...)"] == 36
    assert set(d["gemm"]) == {"bf16", "fp8"} and set(d["collectives"]) >= {"all_reduce", "custom_all_reduce"}
    assert prov["fit_error"]["gemm bf16"]["heldout_median_abs_rel_err"] < 0.05  # ms -> us, shapes as read
    assert not any(Path(p).name == HELD_OUT for p in opened)
    parquet = [p for p in opened if p.endswith(".parquet")]
    assert parquet and all(Path(p).is_relative_to(pkg / "systems" / "data" / "tiny") for p in parquet)
    with pytest.raises(ValueError, match="only that folder is read"):  # asked for it directly, the reader refuses
        aic._table(pkg / "systems" / HELD_OUT, pkg / "systems" / "data" / "tiny")


def test_errors_are_one_line(tmp_path, monkeypatch, capsys):
    pkg = fake_package(tmp_path)
    monkeypatch.setattr(aic, "package_dir", lambda: pkg)
    rc = cli.main(["calibrate", "--from-aiconfigurator", "b999", "--base", "h100_sxm", "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "b999: not a system of aiconfigurator-core" in err and "tiny" in err
    monkeypatch.undo()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    rc = cli.main(["calibrate", "--from-aiconfigurator", "h200_sxm", "--base", "h200_sxm",
                   "--out", str(tmp_path / "y.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "is not installed" in err and "pip install" in err


def test_no_project_code_names_the_held_out_file():
    """No Python source names the package's end-to-end sample file (this test spells its stem to look for it)."""
    allowed = {Path(__file__).resolve()}
    named = [p for d in ("perfmodel", "simulator", "microbench", "kernels", "benchmarks", "tests", "notebooks")
             for p in (REPO / d).rglob("*") if p.suffix in (".py", ".ipynb", ".sh") and p.resolve() not in allowed
             and "silicon_sample" in p.read_text(errors="replace")]
    assert named == []


@needs_package
def test_package_tables_are_the_shared_csvs(shared):
    """The package's H200 TRT-LLM tables, converted, are row for row the CSVs in ../shared (same upstream
    tables): the conversion keeps every shape and unit."""
    pkg = aic.read_system("h200_sxm")
    csv = read_measurements_any(shared / "data/calibration/h200_sxm")
    for kind, cols in (("gemm", ["dtype", "m", "n", "k"]), ("prefill", ["batch", "seq_len", "kv_len", "heads",
                                                                           "kv_heads", "head_dim"]),
                       ("decode", ["batch", "kv_len", "heads", "kv_heads", "head_dim"])):
        a, b = (m.frame(kind).sort_values([*cols, "t_us"]).reset_index(drop=True) for m in (pkg, csv))
        assert len(a) == len(b) > 1000, kind
        assert (a[cols].to_numpy() == b[cols].to_numpy()).all() and np.allclose(a.t_us, b.t_us, rtol=1e-9), kind
    a, b = pkg.frame("collective"), csv.frame("collective")
    for op in ("all_reduce", "custom_all_reduce"):  # per op and group: the same curve points
        ka = a[a.op == op].groupby(["group", "size_bytes"]).t_us.median()
        kb = b[b.op == op].groupby(["group", "size_bytes"]).t_us.median()
        common = ka.index.intersection(kb.index)
        assert len(common) > 0.9 * len(kb) and np.allclose(ka[common], kb[common], rtol=0.05), op


def test_newest_version_folder_is_read(tmp_path):
    """Release candidates before their release, post-releases after it (PEP 440), numbers compared as numbers."""
    for v in ("1.3.0rc20", "1.3.0rc3", "1.3.0", "1.10.0rc1", "0.5.6.post2", "notes"):
        (tmp_path / v).mkdir()
        (tmp_path / v / "t.parquet").write_bytes(b"")
    assert aic._newest(tmp_path, "t.parquet").parent.name == "1.10.0rc1"
    assert sorted(["1.3.0", "1.3.0rc20", "1.3.0rc3", "1.3.0.post1"], key=aic._version_key) == \
        ["1.3.0rc3", "1.3.0rc20", "1.3.0", "1.3.0.post1"]
    assert aic._newest(tmp_path / "absent", "t.parquet") is None
    assert sorted(["0.1", "0.1.dev19262", "0.1rc1", "0.0.9"], key=aic._version_key) == \
        ["0.0.9", "0.1.dev19262", "0.1rc1", "0.1"]
