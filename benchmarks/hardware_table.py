"""Write the generated part of docs/hardware.md from the presets (perfmodel/hardware/*.toml) and the bundled
profiles' provenance (perfmodel/profiles/*.json): every preset's numbers, each number's source, and which
profile (if any) calibrates it from what.

    python benchmarks/hardware_table.py            # rewrite docs/hardware.md between its markers
    python benchmarks/hardware_table.py --check    # exit 1 when the file is out of date (the test runs this)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel.hardware import HARDWARE_DIR, load_hardware_file  # noqa: E402

DOC = ROOT / "docs" / "hardware.md"
BEGIN, END = "<!-- BEGIN generated: benchmarks/hardware_table.py -->", "<!-- END generated -->"
PROFILES = ROOT / "perfmodel" / "profiles"
FIELDS = (  # (preset field, TOML key, column title, scale)
    ("hbm_bytes", "hbm_gb", "HBM GB", 1e-9), ("hbm_bw_gbs", "hbm_bw_gbs", "HBM GB/s", 1),
    ("bf16_tflops", "bf16_tflops", "bf16 TF", 1), ("fp8_tflops", "fp8_tflops", "fp8 TF", 1),
    ("fp4_tflops", "fp4_tflops", "fp4 TF", 1), ("gpus_per_node", "gpus_per_node", "NVLink domain", 1),
    ("gpus_per_host", "gpus_per_host", "GPUs/host", 1), ("link_bw_gbs", "link_bw_gbs", "NVLink GB/s/dir", 1),
    ("nic_bw_gbs", "nic_bw_gbs", "NIC GB/s/dir", 1))


def _num(x: float) -> str:
    return "-" if not x else f"{x:,.0f}" if x >= 10 else f"{x:g}"


def _profile_text(name: str) -> str:
    p = PROFILES / f"{name}.json"
    if not name or not p.is_file():
        return "none: datasheet roofline (the preset's achieved rates)"
    prov = json.loads(p.read_text()).get("provenance", {})
    return f"`perfmodel/profiles/{name}.json`: `{prov.get('command', '?')}`"


def tables() -> str:
    presets = [load_hardware_file(p) for p in sorted(HARDWARE_DIR.glob("*.toml"))]
    head = "| preset | " + " | ".join(t for _, _, t, _ in FIELDS) + " | profile |"
    out = [head, "|" + "---|" * (len(FIELDS) + 2)]
    for hw in presets:
        cells = [_num(getattr(hw, f) * s) for f, _, _, s in FIELDS]
        out.append(f"| {hw.name} | " + " | ".join(cells) + f" | {'yes' if hw.profile and (PROFILES / f'{hw.profile}.json').is_file() else 'no'} |")
    out += ["", "### Sources, preset by preset", ""]
    for hw in presets:
        out += [f"**{hw.name}** ({hw.description}; aliases: {', '.join(hw.aliases) or '-'}). "
                f"Profile: {_profile_text(hw.profile)}.", ""]
        for _, key, title, _ in FIELDS + (("", "achieved_bf16_tflops", "achieved bf16", 1),
                                          ("", "achieved_fp8_tflops", "achieved fp8", 1),
                                          ("", "achieved_fp4_tflops", "achieved fp4", 1),
                                          ("", "achieved_hbm_gbs", "achieved HBM", 1),
                                          ("", "h2d_bw_gbs", "host link", 1), ("", "host_mem_gb", "host memory", 1),
                                          ("", "collectives", "collectives", 1)):
            if hw.sources.get(key):
                out.append(f"- {title}: {hw.sources[key]}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: markers {BEGIN!r} / {END!r} missing")
    pre, rest = text.split(BEGIN, 1)
    post = rest.split(END, 1)[1]
    return f"{pre}{BEGIN}\n{tables()}{END}{post}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/hardware.md is out of date")
    args = ap.parse_args(argv)
    text = DOC.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print(f"{DOC} is out of date: run python benchmarks/hardware_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
