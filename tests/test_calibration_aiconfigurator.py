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
from perfmodel.calibration.profile import from_dict
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


def calibrate_fake(pkg: Path, system: str, base: str, out: Path, monkeypatch, capsys) -> dict:
    """`perfmodel calibrate --from-aiconfigurator SYSTEM --base BASE` on the fake package `pkg`: the profile written."""
    monkeypatch.setattr(aic, "package_dir", lambda: pkg)
    rc = cli.main(["calibrate", "--from-aiconfigurator", system, "--base", base, "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    return json.loads(out.read_text())


def test_fake_package_converts_and_never_opens_the_held_out_file(tmp_path, monkeypatch, capsys, opened):
    pkg = fake_package(tmp_path)
    d = calibrate_fake(pkg, "tiny", "h100_sxm", tmp_path / "tiny.json", monkeypatch, capsys)
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
    assert aic.newest(tmp_path, "t.parquet").parent.name == "1.10.0rc1"
    assert sorted(["1.3.0", "1.3.0rc20", "1.3.0rc3", "1.3.0.post1"], key=aic.version_key) == \
        ["1.3.0rc3", "1.3.0rc20", "1.3.0", "1.3.0.post1"]
    assert aic.newest(tmp_path / "absent", "t.parquet") is None
    assert sorted(["0.1", "0.1.dev19262", "0.1rc1", "0.0.9"], key=aic.version_key) == \
        ["0.0.9", "0.1.dev19262", "0.1rc1", "0.1"]


# A made-up Blackwell system in the FAKE package only (never the package's own Blackwell folders): roofline-like
# GEMM times per dtype, with fp4 (nvfp4) at 2x fp8's rate and 9/16-byte weights, and fused-MoE rows in nvfp4
# and W4A8 MXFP4 under version folders that are not the pinned Hopper ones (moe_sources.newest_sources).
FAKE_PEAK = {"bfloat16": 1500e12, "fp8": 3000e12, "nvfp4": 6000e12, "fp8_block": 2500e12, "nvfp4_wo": 1500e12}
FAKE_WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "nvfp4": 9 / 16, "fp8_block": 1.0, "nvfp4_wo": 9 / 16}
FAKE_HBM = 7e12  # bytes/s
B200_DEVICE = "NVIDIA B200"


def fake_gemm_ms(dt, m, n, k):
    """5 us launch + max(2mnk / peak, (weights + bf16 activations in and out) / HBM), in ms."""
    nbytes = n * k * FAKE_WEIGHT_BYTES[dt] + 2.0 * m * (k + n)
    return 0.005 + 1e3 * max(2.0 * m * n * k / FAKE_PEAK[dt], nbytes / FAKE_HBM)


def fake_moe_ms(tokens, hidden, inter, experts, topk, tp, ep, weight_bytes):
    """20 us floor + the hit experts' weights streamed, or their FLOPs at 3 PFLOP/s, in ms (one layer, one GPU)."""
    here = experts / ep
    hit = here * (1.0 - (1.0 - topk / experts) ** tokens)
    nbytes = hit * 3 * hidden * inter / tp * weight_bytes
    flops = 2 * 3 * tokens * topk * hidden * inter / tp / ep
    return 0.02 + 1e3 * max(nbytes / FAKE_HBM, flops / 3e15)


def fake_blackwell(pkg: Path) -> Path:
    """systems/data/b200_sxm in the fake package: a GEMM table (bf16, fp8, nvfp4 and two modes no grid is
    fitted for) and MoE tables (vllm nvfp4; trtllm nvfp4 and w4a8_mxfp4_mxfp8) in non-pinned versions."""
    data = pkg / "systems" / "data" / "b200_sxm"
    rows = [dict(framework="TRTLLM", version="1.4.0", device=B200_DEVICE, op_name="gemm", kernel_source="torch_flow",
                 gemm_dtype=dt, m=m, n=n, k=k, latency=fake_gemm_ms(dt, m, n, k))
            for dt in FAKE_PEAK for m in (1, 16, 256, 4096) for n in (1024, 2048, 4096, 8192, 16384)
            for k in (1024, 4096, 16384)]
    (data / "gemm/trtllm/1.4.0").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(data / "gemm/trtllm/1.4.0/gemm_perf.parquet")
    shapes = ((2048, 768, 128, 8), (4096, 1536, 128, 8))
    splits = [(tp, 1) for tp in (1, 2, 4, 8)] + [(1, ep) for ep in (2, 4, 8)]
    for fw, version, dtypes in (("vllm", "0.30.0", ("nvfp4",)), ("trtllm", "1.4.0", ("nvfp4", "w4a8_mxfp4_mxfp8"))):
        moe = [dict(framework=fw, version=version, device=B200_DEVICE, op_name="moe", kernel_source=f"{fw}_fake_{dt}",
                    moe_dtype=dt, num_tokens=t, hidden_size=h, inter_size=i, topk=top, num_experts=e, moe_tp_size=tp,
                    moe_ep_size=ep, distribution=dist,
                    latency=fake_moe_ms(t, h, i, e, top, tp, ep, 9 / 16 if dt == "nvfp4" else 0.53125))
               for dt in dtypes for h, i, e, top in shapes for tp, ep in splits for t in 2 ** np.arange(13)
               for dist in ("power_law_1.2", "power_law_1.01")]
        (data / "moe" / fw / version).mkdir(parents=True)
        pd.DataFrame(moe).to_parquet(data / "moe" / fw / version / "moe_perf.parquet")
    (data / "moe/vllm/0.29.0").mkdir()  # an older version: not read
    pd.DataFrame(moe[:3]).to_parquet(data / "moe/vllm/0.29.0/moe_perf.parquet")
    return data


def test_blackwell_nvfp4_gemm_and_moe_rows_become_fp4_tables(tmp_path, monkeypatch, capsys):
    """nvfp4 GEMM rows become the profile's fp4 table (its predictions match the rows), other quant modes are
    skipped and counted, and nvfp4 / W4A8 MXFP4 MoE rows become `moe` entries that weight formats nvfp4 and
    mxfp4 look up; nothing of it is silently dropped."""
    pkg = fake_package(tmp_path)
    data = fake_blackwell(pkg)
    d = calibrate_fake(pkg, "b200_sxm", "b200", tmp_path / "b200_fake.json", monkeypatch, capsys)
    prov = d["provenance"]
    assert set(d["gemm"]) == {"bf16", "fp8", "fp4"} and d["roofline"]["peak_tflops"]["fp4"] > 0
    (src,) = [s for s in prov["sources"] if s["file"] == "gemm/trtllm/1.4.0/gemm_perf.parquet"]
    assert src["rows_used"] == 3 * 60 and src["devices"] == [B200_DEVICE]  # bf16, fp8, nvfp4: 60 shapes each
    assert prov["rows_skipped"]["gemm/trtllm/1.4.0/gemm_perf.parquet: gemm rows of other dtypes (fp8_block, ...)"] \
        == 2 * 60  # fp8_block and nvfp4_wo: counted, not fitted
    assert prov["fit_error"]["gemm fp4"]["heldout_rows"] > 0
    assert prov["fit_error"]["gemm fp4"]["heldout_median_abs_rel_err"] < 0.05
    prof = from_dict(d, str(tmp_path / "b200_fake.json"))
    g = pd.read_parquet(data / "gemm/trtllm/1.4.0/gemm_perf.parquet")
    g = g[g.gemm_dtype == "nvfp4"]
    pred_ms = prof.gemm_time_s(g.m.to_numpy(), g.n.to_numpy(), g.k.to_numpy(), "fp4") * 1e3
    assert np.median(np.abs(pred_ms / g.latency.to_numpy() - 1)) < 0.03  # held-out n included
    big = ((g.m == 4096) & (g.n >= 4096) & (g.k >= 4096)).to_numpy()  # compute-bound: fp4 at 2x fp8's rate
    fp8 = prof.gemm_time_s(g.m.to_numpy()[big], g.n.to_numpy()[big], g.k.to_numpy()[big], "fp8") * 1e3
    assert np.all(fp8 / pred_ms[big] > 1.6)  # the fp4 table is its own, not the fp8 one
    # MoE: each framework's newest version folder (not the pinned Hopper ones), nvfp4 keyed by its weight format
    assert prov["extra_sections"]["moe"].startswith("fitted on aiconfigurator-core") and "vllm 0.30.0" in \
        prov["extra_sections"]["moe"] and "trtllm 1.4.0" in prov["extra_sections"]["moe"]
    moe = d["moe"]
    per_fw_rows = 2 * 7 * 13  # shapes x splits x token counts, one routing
    assert moe["frameworks"]["vllm"]["nvfp4@power_law_1.2"]["rows"] == per_fw_rows
    assert moe["frameworks"]["vllm"]["nvfp4@power_law_1.2"]["file"].endswith("moe/vllm/0.30.0/moe_perf.parquet")
    assert moe["frameworks"]["trtllm"]["nvfp4@power_law_1.01"]["rows"] == per_fw_rows
    assert moe["frameworks"]["trtllm"]["w4a8_mxfp4_mxfp8@power_law_1.2"]["rows"] == per_fw_rows
    assert moe["weight_dtype_map"]["nvfp4"] == "nvfp4" and moe["weight_dtype_map"]["mxfp4"] == "w4a8_mxfp4_mxfp8"
    m_e = np.array([1.0, 8.0, 64.0])
    assert prof.moe_factor("vllm", "nvfp4", "ep", 4, m_e) is not None
    assert prof.moe_factor("trtllm", "mxfp4", "tp", 2, m_e) is not None
    assert prof.moe_factor("trtllm", "bf16", "tp", 2, m_e) is None  # no bfloat16 rows in the fake: no table


@pytest.mark.slow  # two fits, ~10 s
@needs_package
@pytest.mark.parametrize("name", ["h100_sxm", "h200_sxm"])
def test_bundled_profiles_are_what_their_command_writes(name, shared, tmp_path, monkeypatch):
    """A bundled profile is reproducible: its recorded command, rerun, writes the same sections. Regression: the
    glm-5 preset (its MoE shape is one the H200 tables measured) left h200_sxm.json without that shape's table."""
    from perfmodel.calibration.profile import PROFILE_DIR

    bundled = json.loads((PROFILE_DIR / f"{name}.json").read_text())
    args = bundled["provenance"]["command"].split()[1:]  # (after "perfmodel")
    out = tmp_path / f"{name}.json"
    args[args.index("--out") + 1] = str(out)
    args[args.index("--measurements") + 1] = str(shared / "data/calibration" / name)
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 0
    fresh = json.loads(out.read_text())
    for key in sorted((set(bundled) | set(fresh)) - {"provenance", "name"}):
        assert fresh.get(key) == bundled.get(key), f"{name}: section {key!r} is stale; rerun its command"
