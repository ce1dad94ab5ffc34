"""Issue 33 (perfmodel part): plausible, wrong answers with exit 0. A user-made profile lacked the bundled
`moe` / `mla_decode` sections and called itself h100_sxm (EP throughput 2x); estimates did not say whether
they were calibrated; a CPU sweep was accepted as an H100 profile; one strategy that did not fit failed the
whole command; the strategy error named --policy and left out the dynamic strategies; a bf16 checkpoint ran
as fp8 without a word."""
import json

import pandas as pd
import pytest

from perfmodel.calibration import cli as cal
from perfmodel.calibration import mla_decode, moe
from perfmodel.calibration.device import device_preset
from perfmodel.calibration.profile import PROFILE_DIR, load_profile
from perfmodel.cli import main
from perfmodel.measurements import append_rows

H100 = "NVIDIA H100 80GB HBM3"  # what torch.cuda.get_device_name (and aiconfigurator's tables) say
QWEN_EP = ["estimate", "--model", "qwen3-30b-a3b", "--hardware", "h100", "--strategies", "ep"]


def gpu_dir(tmp_path, device=H100):
    """A tiny aiconfigurator-layout folder: bf16 GEMMs measured on `device`."""
    d = tmp_path / "meas"
    d.mkdir()
    g = [(device, "bfloat16", m, n, k, (4 + 2 * m * n * k / 7e8 + n * k * 2 / 2.7e6) / 1e3)
         for m in (1, 16, 256, 4096) for n in (512, 1024, 2048, 4096) for k in (1024, 4096)]
    pd.DataFrame(g, columns=["device", "gemm_dtype", "m", "n", "k", "latency_ms"]).to_csv(d / "gemm_x.csv", index=False)
    return d


def cpu_csv(tmp_path, device="AMD EPYC 7B13"):
    """Our schema as microbench writes it on a CPU (device = the CPU model)."""
    path = tmp_path / "cpu.csv"
    append_rows(path, [dict(op="gemm", dtype="fp32", m=m, n=n, k=64, group_size=1, backend="cpu", device=device,
                            median_us=5 + 2 * m * n * 64 / 1e5) for m in (1, 16, 64) for n in (64, 256, 1024)])
    return path


def calibrate(capsys, *argv):
    rc = cal.main(["calibrate", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def estimate(capsys, *argv):
    rc = main(list(map(str, argv)))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ---- item 3: a user-made profile is complete (or says what it lacks) and is named after its file ----------
def test_user_profile_named_after_its_file_and_carries_the_bundled_sections(tmp_path, capsys):
    out = tmp_path / "h100.json"
    rc, text, err = calibrate(capsys, "--measurements", gpu_dir(tmp_path), "--base", "h100_sxm", "--out", out)
    assert rc == 0, err
    d, ship = json.loads(out.read_text()), json.loads((PROFILE_DIR / "h100_sxm.json").read_text())
    assert d["name"] == "h100" != ship["name"]
    for key in ("moe", "mla_decode", "fp8_compute_scale"):  # their data is not in the folder: copied, and said so
        assert d[key] == ship[key]
        assert d["provenance"]["extra_sections"][key].startswith("copied unchanged from the bundled h100_sxm.json")
        assert f"{key}: copied unchanged" in text
    prof = load_profile(out)
    assert prof.name == "h100" and "moe" not in prof.caveats and prof.moe == load_profile("h100_sxm").moe
    rc, text, _ = estimate(capsys, *QWEN_EP, "--profile", out)
    assert rc == 0 and "mla_decode, moe and fp8_compute_scale copied from the bundled h100_sxm profile" in text


def test_profile_without_moe_says_so_on_every_estimate(tmp_path, capsys):
    """A profile written before this fix (no moe / mla_decode): every estimate that uses them warns, and
    the Profile carries the caveat for summaries to show."""
    d = json.loads((PROFILE_DIR / "h100_sxm.json").read_text())
    del d["moe"], d["mla_decode"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    assert set(load_profile(path).caveats) == {"moe", "mla_decode"}
    rc, text, _ = estimate(capsys, *QWEN_EP, "--profile", path)
    assert rc == 0 and "warning: profile h100_sxm: no moe section: MoE layers use the dense-GEMM formula" in text
    assert "mla_decode" not in text  # Qwen3 has no MLA: only what this run falls back on
    rc, out, err = estimate(capsys, *QWEN_EP, "--profile", path, "--format", "json")
    assert rc == 0 and json.loads(out) and "note: profile h100_sxm: no moe section" in err
    rc, text, _ = estimate(capsys, *QWEN_EP)
    assert rc == 0 and "warning: profile" not in text  # the bundled profile lacks nothing


def test_calibrate_fits_the_extra_sections_where_their_tables_lie(tmp_path, capsys, monkeypatch):
    d = gpu_dir(tmp_path)
    need = [d / "moe" / s[0] / s[1] / "moe_perf.parquet" for q in moe.SOURCES.values() for s in q.values()]
    for f in [*need, d / "mla" / "trtllm" / "1.3.0rc20" / "generation_mla_perf.parquet"]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"")
    monkeypatch.setattr(moe, "fit", lambda data_dir, hw, prof, system: {"fitted": str(data_dir)})
    monkeypatch.setattr(mla_decode, "fit", lambda data_dir, roof, system: {"fitted": str(data_dir), "tables": {}})
    out = tmp_path / "p.json"
    assert calibrate(capsys, "--measurements", d, "--base", "h100_sxm", "--out", out)[0] == 0
    p = json.loads(out.read_text())
    assert p["moe"] == {"fitted": str(d / "moe")} and p["mla_decode"]["fitted"] == str(d / "mla")
    assert p["provenance"]["extra_sections"]["moe"] == f"fitted on {d / 'moe'}"


def test_no_bundled_profile_leaves_the_sections_out_and_warns(tmp_path, capsys):
    rc, _, err = calibrate(capsys, "--measurements", cpu_csv(tmp_path), "--base", "cpu", "--out", tmp_path / "c.json")
    assert rc == 0 and "warning: profile c: no moe section" in err
    assert load_profile(tmp_path / "c.json").caveats["mla_decode"].startswith("no mla_decode section")


@pytest.mark.slow  # fits the real H100 tables: ~15 s on 2 cores
def test_real_h100_user_profile_gives_the_bundled_ep_answer(shared, tmp_path, capsys):
    out = tmp_path / "h100.json"
    rc, _, err = calibrate(capsys, "--measurements", shared / "data/calibration/h100_sxm", "--base", "h100_sxm",
                           "--out", out)
    assert rc == 0, err
    rows = [json.loads(estimate(capsys, *QWEN_EP, "--format", "json", *p)[1])[0]["throughput_tokens_per_s"]
            for p in ([], ["--profile", out])]
    assert rows[0] == pytest.approx(rows[1], rel=1e-6)  # was 121,412 vs 246,626 tok/s


# ---- item 5: every estimate says calibrated (which profile, from what) or datasheet ------------------------
def test_estimate_says_which_profile_or_datasheet(capsys):
    base = ["estimate", "--model", "llama-3.1-8b", "--gpus", "1", "--strategies", "tp"]
    _, text, _ = estimate(capsys, *base, "--hardware", "h100")
    assert "\nprofile: h100_sxm (h100_sxm.json: calibrated on h100_sxm from 5 measurement file(s)" in text
    _, text, _ = estimate(capsys, *base, "--hardware", "h20")
    assert "\nprofile: none (datasheet roofline of h20, not calibrated: where both exist it gives TPOT" in text
    _, text, _ = estimate(capsys, *base, "--hardware", "h200")
    assert "\nprofile: h200_sxm (h200_sxm.json: calibrated on h200_sxm from 5 measurement file(s)" in text
    rc, out, err = estimate(capsys, *base, "--hardware", "h20", "--format", "json")
    assert rc == 0 and json.loads(out)[0]["profile"] == "none (datasheet)" and "note: profile: none" in err
    _, text, _ = estimate(capsys, *base, "--hardware", "h20", "--profile", "h100_sxm")
    assert "warning: profile h100_sxm was fitted for h100_sxm, not h20" in text


# ---- item 7: measurements of other hardware are refused ----------------------------------------------------
@pytest.mark.parametrize("name, preset", [(H100, "h100_sxm"), ("NVIDIA H200", "h200_sxm"), ("NVIDIA H100 PCIe", "other"),
                                          ("AMD EPYC 7B13", "cpu"), ("cpu", "cpu"), ("", None), ("NVIDIA X", None)])
def test_device_names(name, preset):
    assert device_preset(name) == preset


def test_cpu_measurements_refused_as_h100(tmp_path, capsys):
    out = tmp_path / "z.json"
    rc, text, err = calibrate(capsys, "--measurements", cpu_csv(tmp_path), "--base", "h100", "--out", out)
    assert rc == 2 and text == "" and not out.exists()
    assert err == ("error: cpu.csv was measured on 'AMD EPYC 7B13' (cpu preset), not h100_sxm: a profile must be "
                   "fitted on the hardware it describes; pass the matching --base, or --allow-device-mismatch to "
                   "fit it anyway\n")
    rc, _, err = calibrate(capsys, "--measurements", gpu_dir(tmp_path, "NVIDIA H200"), "--base", "h100", "--out", out)
    assert rc == 2 and "'NVIDIA H200' (h200_sxm preset), not h100_sxm" in err


def test_device_mismatch_override_is_recorded_and_repeated(tmp_path, capsys):
    out = tmp_path / "z.json"
    rc, _, err = calibrate(capsys, "--measurements", cpu_csv(tmp_path), "--base", "h100", "--out", out,
                           "--allow-device-mismatch")
    assert rc == 0 and "fitted anyway: --allow-device-mismatch" in err
    d = json.loads(out.read_text())
    assert "moe" not in d and "not copied" in d["provenance"]["extra_sections"]["moe"]
    rc, text, _ = estimate(capsys, "estimate", "--model", "llama-3.1-8b", "--gpus", "1", "--hardware", "h100",
                           "--strategies", "tp", "--profile", out)
    assert rc == 0 and "warning: profile z: cpu.csv was measured on 'AMD EPYC 7B13'" in text
    assert calibrate(capsys, "--measurements", cpu_csv(tmp_path), "--base", "cpu", "--out", out)[0] == 0


# ---- item 14 and the strategy error ----------------------------------------------------------------------
def test_strategies_that_do_not_fit_get_rows_the_rest_still_shown(capsys):
    # (0.842 of the driver's 85.5e9 bytes: the 72e9 usable bytes the scenario was sized for, 0.9 x 80e9)
    argv = ["estimate", "--model", "llama-3.3-70b", "--gpus", "2", "--hardware", "h100", "--gpu-memory-utilization",
            "0.842", "--strategies", "tp,dp,pp,sp"]
    rc, text, err = estimate(capsys, *argv)
    assert rc == 0 and err == ""
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.split()[:1] in (["tp"], ["dp"], ["pp"], ["sp"])}
    assert lines["tp"].split()[1] == "tp=2" and lines["pp"].split()[1] == "pp=2"
    assert "does not fit: dp: llama-3.3-70b needs tp=2 per replica" in lines["dp"]
    assert "does not fit: llama-3.3-70b does not fit sp=2 on h100_sxm: 72.7 GB weights per GPU" in lines["sp"]
    rc, out, _ = estimate(capsys, *argv, "--format", "json")
    rows = json.loads(out)
    assert [("error" in r) for r in rows] == [False, True, False, True] and rows[0]["tpot_ms"] > 0
    rc, out, err = estimate(capsys, *argv[:-1], "sp")  # nothing fits: bad input, one line, exit 2
    assert rc == 2 and out == "" and err.count("\n") == 1 and "does not fit sp=2" in err


def test_strategy_errors_list_every_strategy_and_no_policy_flag(capsys):
    rc, _, err = estimate(capsys, "estimate", "--strategies", "tp,foo")
    assert rc == 2 and err == ("error: unknown strategy 'foo': dp, tp, pp, sp, shift, ep, sidp, seesaw, flying, "
                               "disagg or a layout like tp=2,pp=4\n")
    rc, _, err = estimate(capsys, "estimate", "--model", "llama-3.1-405b", "--weights", "bf16", "--strategies", "dp")
    assert rc == 2 and "--policy" not in err and err.endswith("no data parallelism; use tp or more GPUs\n")
    rc, _, err = estimate(capsys, "estimate", "--strategies", "ep")
    assert rc == 2 and "--policy" not in err


# ---- weights chosen by default that are not the checkpoint's --------------------------------------------
@pytest.mark.parametrize("argv, note", [
    (["--model", "llama-3.1-8b", "--hardware", "h100"],
     "weights: fp8 (the checkpoint is bf16; --weights bf16 to run it as shipped)"),
    (["--model", "llama-3.1-8b", "--hardware", "h100", "--weights", "fp8"], None),  # asked for: no note
    (["--model", "llama-3.1-8b", "--hardware", "a100_80gb"], None),  # bf16 default = the checkpoint's
    (["--model", "deepseek-v3", "--hardware", "h100", "--nodes", "2"], None),  # an fp8 checkpoint run as fp8
])
def test_default_weights_other_than_the_checkpoint_are_named(capsys, argv, note):
    rc, text, _ = estimate(capsys, "estimate", *argv, "--strategies", "tp")
    assert rc == 0
    assert (note in text) if note else ("weights:" not in text)


def test_estimate_shift_with_sp_1_is_tp_with_one_weight_copy(capsys):
    """Item 8 on perfmodel's side: shift whose base is tp=gpus (no room for SP) reserves one weight copy, as the
    simulator runs it: the same KV tokens and throughput as tp (it reserved a second copy: 417,088 vs 638,841)."""
    assert main(["estimate", "--model", "llama-3.3-70b", "--hardware", "h100", "--gpus", "4", "--format", "json",
                 "--gpu-memory-utilization", "0.842", "--strategies", "tp,shift"]) == 0  # (72e9 usable: no room for SP)
    tp, shift = json.loads(capsys.readouterr().out)
    assert shift["kv_capacity_tokens"] == tp["kv_capacity_tokens"]
    assert shift["throughput_tokens_per_s"] == tp["throughput_tokens_per_s"]
