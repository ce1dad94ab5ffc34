"""docs/hardware.md's preset tables are generated from the presets and profiles: stale tables fail."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hardware_doc_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hardware_table.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_preset_appears_with_its_sources():
    text = (ROOT / "docs" / "hardware.md").read_text()
    for p in sorted((ROOT / "perfmodel" / "hardware").glob("*.toml")):
        assert f"**{p.stem}**" in text or f"| {p.stem} |" in text, p.stem
