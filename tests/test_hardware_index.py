"""Preset lookup by name or alias: the presets' folder is parsed once per state of its files, and a file that
changes is read again (2026-12-02: every lookup parsed all 13 presets, 4.2 s of validate's 967 H200 rows)."""
import os

import pytest

from perfmodel import hardware


def test_lookups_parse_the_presets_once(monkeypatch):
    calls = []
    loads = hardware.tomllib.loads
    monkeypatch.setattr(hardware.tomllib, "loads", lambda text: calls.append(1) or loads(text))
    for _ in range(50):
        assert hardware.load_hardware("h200").name == "h200_sxm"
    n_files = len(list(hardware.HARDWARE_DIR.glob("*.toml")))
    assert len(calls) <= 50 + n_files  # each lookup reads its own file; the index at most once (was 50 x 14)


def test_the_index_follows_the_folder(monkeypatch, tmp_path):
    src = (hardware.HARDWARE_DIR / "h100_sxm.toml").read_text()
    preset = tmp_path / "mine.toml"
    preset.write_text(src.replace('aliases = [', 'aliases = ["first-alias", ', 1))
    monkeypatch.setattr(hardware, "HARDWARE_DIR", tmp_path)
    assert hardware.load_hardware("first-alias").hbm_bytes == hardware.load_hardware("mine").hbm_bytes
    preset.write_text(src.replace('aliases = [', 'aliases = ["second-alias", ', 1))
    st = preset.stat()
    os.utime(preset, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # (a rewrite within the clock's tick)
    assert hardware.load_hardware("second-alias").name == hardware.load_hardware("mine").name
    with pytest.raises(ValueError, match="unknown hardware 'first-alias'"):  # the removed alias names nothing
        hardware.load_hardware("first-alias")
