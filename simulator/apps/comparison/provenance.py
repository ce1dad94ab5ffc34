"""Are the two sides of `simulate compare` runs of the same model on the same trace?

Each run directory's summary.json records its model (`model_id`) and its workload recipe
(`config.workload`, simulator.run_record.workload_recipe: the trace file's sha256, or the synthetic
spec, the transforms, and `requests_sha256` of the requests themselves); `simulate replay` writes the
same recipe. A different model or trace makes every error in the table meaningless: compare refuses
it (exit 2) unless --force. The same trace with other transforms (--sample, --rate-scale, replay's
--limit) gives other requests: a warning. What a side does not record (a vLLM bench file, an older
run) cannot be checked: a warning names it.
"""
from __future__ import annotations

from simulator.apps.recommend.serve import hf_name


def model_of(summary: dict) -> str | None:
    m = summary.get("model_id") or summary.get("model")
    return str(m) if m else None


# a preset is an architecture: its chat / instruct fine-tunes have its shapes, so the simulator's run of
# 'llama-3.1-8b' is a run of 'meta-llama/Llama-3.1-8B-Instruct' too
TUNE_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def same_model(a: str, b: str) -> bool:
    """A preset name and its Hugging Face id are one model ('llama-3.1-8b' and 'meta-llama/Llama-3.1-8B-Instruct'):
    both are reduced to the checkpoint's name without org and fine-tune suffix, case-blind."""
    def norm(x: str) -> str:
        name = hf_name(x).rstrip("/").rsplit("/", 1)[-1].lower()
        while name.endswith(TUNE_SUFFIXES):
            name = name[:name.rfind("-")]
        return name

    return norm(a) == norm(b)


def trace_of(summary: dict) -> dict | None:
    """The recorded workload recipe, None when the run records none."""
    w = (summary.get("config") or {}).get("workload") if isinstance(summary.get("config"), dict) else None
    return w if isinstance(w, dict) and (w.get("sha256") or w.get("synthetic")) else None


def check(m, s) -> tuple[list[str], list[str]]:
    """(mismatches that make the comparison meaningless, warnings) of two Loaded sides."""
    bad, warn = [], []
    ma, sa = model_of(m.summary), model_of(s.summary)
    if ma and sa:
        if not same_model(ma, sa):
            bad.append(f"different models: {ma!r} measured, {sa!r} simulated")
    else:
        warn.append(f"cannot check the model: {m.path if not ma else s.path} does not record one")
    ta, tb = trace_of(m.summary), trace_of(s.summary)
    if ta and tb:
        ka, kb = (ta.get("sha256") or ta.get("synthetic")), (tb.get("sha256") or tb.get("synthetic"))
        if ka != kb:
            bad.append(f"different traces: {_name(ta)} measured, {_name(tb)} simulated")
        elif ta.get("requests_sha256") and tb.get("requests_sha256") and ta["requests_sha256"] != tb["requests_sha256"]:
            warn.append(f"the same trace with other transforms ({_transforms(ta)} vs {_transforms(tb)}): "
                        f"{ta.get('num_requests')} vs {tb.get('num_requests')} requests, not the same ones")
    else:
        warn.append(f"cannot check the trace: {m.path if not ta else s.path} does not record its sha256")
    return bad, warn


def _name(w: dict) -> str:
    return f"{w.get('trace')} (sha256 {w['sha256'][:12]}...)" if w.get("sha256") else str(w.get("synthetic"))


def _transforms(w: dict) -> str:
    keys = ("time_window", "sample", "rate_scale", "max_context_clip", "drop_failed", "burstgpt_model", "limit")
    return ", ".join(f"{k}={w[k]}" for k in keys if w.get(k) not in (None, False)) or "none"
