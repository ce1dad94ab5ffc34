"""The lines `perfmodel estimate` prints about what its numbers rest on (issue 33): which profile (or the
datasheet roofline) and where it came from, what that profile falls back on for this model, and a weight
format chosen by default that is not the checkpoint's own. One string per line, without a prefix."""
from __future__ import annotations

import json

from .calibration.coverage import source_line
from .framework import version_tuple
from .modelspec import checkpoint_weights, resolve_model_path

# How far the datasheet roofline sits from the calibrated H100 profile, on the rows where both exist:
# `perfmodel estimate --hardware h100` with and without --profile none, 4096 in / 250 out, vLLM defaults,
# llama-3.1-8b (tp1, dp8, tp8), llama-3.3-70b (tp8, dp), qwen3-30b-a3b (tp8, ep8), llama-3.1-405b (tp8);
# 2026-11 (docs/calibration.md "Datasheet vs calibrated"). Only H100 has measurements to compare with.
DATASHEET_BIAS = "TPOT 21-42% and TTFT 18-40% lower, throughput 16-139% higher than calibrated on H100"
RELEVANT = {  # profile caveat key -> does this run use that section? (spec, weights, gpus)
    "moe": lambda spec, w, g: spec.is_moe,
    "mla_decode": lambda spec, w, g: spec.is_mla,
    "gemm fp8": lambda spec, w, g: w == "fp8",
    "gemm fp4": lambda spec, w, g: w == "nvfp4",
    "collectives": lambda spec, w, g: g > 1,
}


def datasheet_line(hw) -> str:
    """What a run without a profile rests on, and how far that sits from a calibrated one."""
    return (f"datasheet roofline of {hw.name}, not calibrated: where both exist it gives {DATASHEET_BIAS}; "
            "compare calibrated with calibrated, datasheet with datasheet; docs/calibration.md")


def profile_line(prof, hw) -> str:
    """'h100_sxm (h100_sxm.json: calibrated on ...)' or 'none (datasheet roofline ...)'."""
    if prof is None:
        return f"none ({datasheet_line(hw)})"
    return f"{prof.name} ({source_line(prof)})"


def run_notes(prof, hw, spec, weights: str, weights_given: bool, gpus: int, checkpoint: str | None,
              framework: str = "", version: str | None = None) -> list[str]:
    """Warnings for this run: the profile's caveats that apply to it, a profile for other hardware,
    a default weight format other than the checkpoint's own (`checkpoint`: its format, None unknown), and a
    `framework` `version` outside the cited ones (version_note)."""
    out = [n for n in (version_note(framework, version),) if n]
    if prof is not None:
        if prof.hardware != hw.name:
            out.append(f"profile {prof.name} was fitted for {prof.hardware}, not {hw.name}: its tables describe "
                       "another GPU")
        for key, text in getattr(prof, "caveats", {}).items():
            if RELEVANT.get(key, lambda *a: True)(spec, weights, gpus):
                out.append(f"profile {prof.name}: {text}")
    if not weights_given and checkpoint and weights != checkpoint:
        out.append(f"weights: {weights} (the checkpoint is {checkpoint}; --weights {checkpoint} to run it as "
                   "shipped)")
    return out


# The versions whose defaults docs/frameworks.md cites from source, oldest and newest per framework: vLLM 0.11.2-0.18.0
# (arg_utils.py, config/*.py), SGLang 0.5.1.post1-0.5.9 (server_args.py), TRT-LLM 1.0-1.3 (llm_args.py snapshots,
# the 1.0.0rc3 and 1.3.0rc20 files). A version outside is run with the nearest cited one's defaults and a note says so
# (version_note): `--framework-version 99.0` (or a typo such as 0.180) is not silently a known one.
CITED_VERSIONS = {"vllm": ((0, 11, 2), (0, 18, 0)), "sglang": ((0, 5, 1), (0, 5, 9)), "trtllm": ((1, 0, 0), (1, 3, 0))}
FRAMEWORK_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TRT-LLM"}  # as the frameworks write their names


def version_note(framework: str, version: str | None) -> str | None:
    """A line when `version` of `framework` lies outside the versions whose defaults are cited from source
    (CITED_VERSIONS): the run takes the nearest cited version's defaults, and says so. None inside, or
    without a version."""
    if not version or framework not in CITED_VERSIONS:
        return None
    v, (lo, hi) = version_tuple(version)[:3], CITED_VERSIONS[framework]
    v = v + (0,) * (3 - len(v))  # ('1.0' -> (1, 0, 0))
    name = FRAMEWORK_NAMES[framework]
    if v > hi:
        return (f"{name} {version} is newer than any version whose defaults are cited from source (newest "
                f"{'.'.join(map(str, hi))}, docs/frameworks.md): run with that one's defaults")
    if v < lo:
        return (f"{name} {version} is older than any version whose defaults are cited from source (oldest "
                f"{'.'.join(map(str, lo))}, docs/frameworks.md): run with the defaults this project knows, which may "
                f"not be that version's")
    return None


def checkpoint_format(name_or_path: str) -> str | None:
    """The weight format the checkpoint is shipped in: its quantisation (modelspec.checkpoint_weights),
    else bf16 for a 16-bit config (torch_dtype / dtype bfloat16 or float16: --weights has no fp16, and
    both cost the same bytes), None when the config does not say."""
    own = checkpoint_weights(name_or_path)
    if own:
        return own
    try:
        cfg = json.loads(resolve_model_path(name_or_path).read_text())
    except (ValueError, OSError):
        return None
    if not isinstance(cfg, dict):
        return None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype") or text.get("dtype")
    return "bf16" if str(dtype) in ("bfloat16", "float16") else None
