"""Which device a measurement file was taken on (its `device` column), and the check that it is the
hardware a profile is fitted for: a CPU sweep fitted as an H100 profile gave an H100 TPOT of 2 s (issue 33).

The name -> preset table (the names torch.cuda.get_device_name returns) is the one microbench records
its rows' preset with (microbench/env.py hardware_preset), so the two never disagree.
"""
from __future__ import annotations

# CUDA device name fragments -> hardware preset; first match wins. OTHER: a known GPU with no preset
# (a different datasheet from every preset, e.g. H100 PCIe's 2.0 TB/s HBM vs the SXM's 3.35). The Grace
# superchips' names contain their GPU's ("NVIDIA GB200" holds "B200"), so they come first.
OTHER = "other"
PRESETS = (("GH200", OTHER), ("H200", "h200_sxm"), ("H100 PCIe", OTHER), ("H100 NVL", OTHER), ("H100", "h100_sxm"),
           ("H20", "h20"), ("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"),
           ("B200", "b200"), ("A100-SXM4-40GB", "a100_40gb"), ("A100-SXM4-80GB", "a100_80gb"),
           ("A100 80GB PCIe", "a100_pcie_80gb"), ("A100-PCIE-80GB", "a100_pcie_80gb"), ("A100", OTHER),
           ("A10G", OTHER), ("A10", "a10"), ("L40", OTHER), ("L4", "l4"), ("V100", OTHER), ("T4", OTHER),
           ("A40", OTHER), ("A6000", OTHER), ("MI300", OTHER), ("MI250", OTHER))
GPU_WORDS = ("nvidia", "tesla", "geforce", "quadro", "instinct", "radeon", "cuda")  # a GPU we cannot place


def device_preset(device: str) -> str | None:
    """The hardware preset a device name is (a name from PRESETS, OTHER, or 'cpu' for a CPU model such as
    'AMD EPYC 7B13'), or None when it cannot be told: blank, or a GPU name the table does not know."""
    name = str(device).strip()
    low = name.lower()
    if not name or low in ("nan", "none"):
        return None
    for frag, preset in PRESETS:
        if frag.lower() in low:
            return preset
    if any(w in low for w in GPU_WORDS):
        return None
    return "cpu"  # microbench writes the CPU model (microbench/env.py cpu_model) on CPU runs


def check_devices(sources, hw, allow_mismatch: bool = False) -> dict:
    """The provenance record of what the measurements were taken on; ValueError (one line) when a file's
    device is another hardware than `hw` and allow_mismatch is False. `sources`: readers' source records,
    each with a `devices` list (the file's distinct device names; empty without a device column)."""
    seen, wrong = {}, []
    for src in sources:
        for dev in src.get("devices", []):
            preset = device_preset(dev)
            seen[dev] = preset or "unknown"
            if preset is not None and preset != hw.name:
                wrong.append((src["file"], dev, preset))
    rec = {"hardware": hw.name, "devices": seen}
    if not seen:
        rec["check"] = "not checked: no file has a device column"
    if not wrong:
        return rec
    f, dev, preset = wrong[0]
    what = f"{preset} preset" if preset != OTHER else "a GPU with no preset"
    text = f"{f} was measured on {dev!r} ({what}), not {hw.name}"
    if not allow_mismatch:
        raise ValueError(f"{text}: a profile must be fitted on the hardware it describes; pass the matching "
                         "--base, or --allow-device-mismatch to fit it anyway")
    rec["mismatch"] = f"{text} (fitted anyway: --allow-device-mismatch)"
    return rec
