"""Rerun a finished run from its summary.json and check that it reproduces bit for bit.

    simulate rerun OUT_DIR|summary.json     # exit 0: identical; 1: the keys that differ; 2: cannot rerun

`rerun(path)` rebuilds the workload from summary["config"]["workload"] (the same trace file, refused
with one ValueError when its sha256 changed, or the synthetic spec; then the recorded window /
sample / rate scale / clip) and the RunSpec from config["run_spec"], checks the profile file's
sha256, and runs it. `main` compares the new summary with the old one key by key after the JSON round
trip summary.json went through (floats keep every bit), ignoring IGNORED keys.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from perfmodel.framework import Framework
from perfmodel.modelspec import load_model
from simulator import make_callable
from simulator.results.files import write_run
from simulator.run import file_sha256, hardware_and_profile, run, run_spec_from_config, workload_sha256
from simulator.workload import load_trace, resolve_trace_path, transforms as tf

# not results: when the run happened, where the (sha256-checked) trace file lies, and the interpreter /
# library versions it ran under (a change of those is printed as a note; it fails the check only if it
# changes a result). The simulator has no wall-clock-dependent result keys.
IGNORED = ("date", "config.workload.path", "config.environment", "config.tool")


def summary_path(path) -> Path:
    """summary.json in a run's --out folder, or the file itself."""
    p = Path(path)
    return p / "summary.json" if p.is_dir() else p


def load_summary(path) -> dict:
    p = summary_path(path)
    try:
        summ = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file (give a run's --out folder or its summary.json)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e})") from None
    if not isinstance(summ, dict) or not isinstance(summ.get("config"), dict):
        raise ValueError(f"{p}: no `config` block (written by a version before reruns were recorded)")
    return summ


def build_workload(recipe: dict, where: str = "summary.json"):
    """The workload a config["workload"] recipe describes; ValueError when its trace file is gone or
    changed, or when the rebuilt workload is not the one the run had."""
    trace = recipe.get("trace") or ""
    if recipe.get("synthetic"):
        source = recipe["synthetic"]
    elif recipe.get("path") or recipe.get("sha256"):
        source = Path(recipe["path"]) if recipe.get("path") else None
        if source is None or not source.is_file():
            try:
                source = resolve_trace_path(trace)
            except Exception:  # noqa: BLE001
                raise ValueError(f"{where}: trace {recipe.get('path') or trace} no longer exists") from None
        sha = file_sha256(source)
        if sha != recipe.get("sha256"):
            raise ValueError(f"{where}: trace {source} changed since the run (sha256 {sha[:12]}..., "
                             f"the run read {str(recipe.get('sha256'))[:12]}...): cannot reproduce it")
    else:
        raise ValueError(f"{where}: the run's workload {trace!r} was built in memory; nothing to rebuild it from")
    opts = {k: recipe[k] for k in ("strict", "drop_failed", "burstgpt_model") if recipe.get(k) is not None}
    seed = int(recipe.get("seed") or 0)
    w = load_trace(str(source), recipe.get("trace_format"), seed=seed, **opts)
    # the CLI's order (simulator.workload.cli.workload_from_args): window -> sample -> rate scale -> clip
    if recipe.get("time_window"):
        w = tf.time_window(w, **tf.parse_window(recipe["time_window"]))
    if recipe.get("sample"):
        w = tf.sample(w, seed=seed, **tf.parse_sample(recipe["sample"]))
    if recipe.get("rate_scale") is not None:
        w = tf.rate_scale(w, float(recipe["rate_scale"]))
    if recipe.get("max_context_clip"):
        clip = str(recipe["max_context_clip"])
        if not clip.isdigit():
            clip = load_model(clip).max_model_len
        w = tf.clip_context(w, int(clip))
    if recipe.get("requests_sha256") and workload_sha256(w) != recipe["requests_sha256"]:
        raise ValueError(f"{where}: the rebuilt workload differs from the run's ({len(w)} requests, the run had "
                         f"{recipe.get('num_requests')}): it was changed in a way summary.json does not record "
                         f"(run() without workload_args, or another reader version)")
    return w


def check_profile(profile: dict, hardware: str, name, where: str = "summary.json") -> None:
    """The profile the rerun resolves must be the recorded one, file for file."""
    _, prof = hardware_and_profile(hardware, name)
    now = getattr(prof, "name", None) or "datasheet"
    if now != profile.get("name"):
        raise ValueError(f"{where}: the run used profile {profile.get('name')!r}, this version resolves {now!r}")
    if prof is not None and profile.get("sha256") and file_sha256(prof.path) != profile["sha256"]:
        raise ValueError(f"{where}: profile {prof.path} changed since the run (sha256 differs): cannot reproduce it")


def rerun(path, progress=None):
    """Rerun the run whose summary.json (or --out folder) is `path`; the new simulator.run.Run
    (summary with per-request lists when the old one had them)."""
    where = str(summary_path(path))
    old = load_summary(path)
    cfg = old["config"]
    wl = build_workload(cfg["workload"], where)
    rs = run_spec_from_config(cfg["run_spec"])
    check_profile(cfg.get("profile") or {}, rs.hardware, rs.profile, where)
    fw = Framework(**cfg["framework_override"]) if cfg.get("framework_override") else None
    recipe = {k: v for k, v in cfg["workload"].items() if k not in ("sha256", "synthetic")}
    if not cfg["workload"].get("synthetic") and old.get("trace"):
        # the file is read by its resolved path (from any folder); the run named it as it did (a relative path,
        # a bundled trace's name resolved): the summary's `trace` stays the run's
        wl = dataclasses.replace(wl, source=old["trace"])
    return run(wl, rs, progress=progress, framework=fw, workload_args=recipe,
               detail=old.get("input_lens") is not None)


def differences(old, new, path: str = "", ignored=IGNORED) -> list[str]:
    """'key: old -> new' for every key whose value differs (nested keys dotted; NaN equals NaN;
    numbers compared exactly, int 1 and float 1.0 as different)."""
    if path.rstrip(".") in ignored:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in differences(old.get(k, _MISSING), new.get(k, _MISSING), f"{path}{k}.", ignored)]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}{i}.", ignored)][:1]
    same = type(old) is type(new) and (old == new or (isinstance(old, float) and math.isnan(old) and math.isnan(new)))
    return [] if same else [f"{path.rstrip('.')}: {_short(old)} -> {_short(new)}"]


_MISSING = "<missing>"


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def main(argv=None) -> int:
    """`simulate rerun OUT_DIR|summary.json [--out DIR]`: 0 when the rerun's summary equals the old
    one (bit for bit, IGNORED keys aside), 1 listing the keys that differ, 2 when it cannot rerun."""
    p = argparse.ArgumentParser(prog="simulate rerun",
                                description="Rerun a run from its summary.json and check it reproduces bit for bit.")
    p.add_argument("path", metavar="OUT_DIR|summary.json", help="a run's --out folder or its summary.json")
    p.add_argument("--out", help="also write the rerun's files here (as simulate --out)")
    args = p.parse_args(argv)
    try:
        old = load_summary(args.path)
        r = rerun(args.path)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    new = json.loads(json.dumps(r.summary))  # the round trip summary.json went through
    if args.out:
        write_run(args.out, r.summary, r.requests, r.steps)
    env_old, env_new = old["config"].get("environment"), new["config"].get("environment")
    if env_old != env_new:
        print(f"note: environment differs: run {env_old}, rerun {env_new}", file=sys.stderr)
    diff = differences(old, new)
    if diff:
        print(f"rerun differs from {summary_path(args.path)} in {len(diff)} key(s):")
        for d in diff:
            print(f"  {d}")
        return 1
    print(f"rerun reproduces {summary_path(args.path)}: every key identical (ignoring {', '.join(IGNORED)})")
    return 0


make_callable(__name__, "rerun")  # `from simulator import rerun` gives this module, callable as rerun(...)


if __name__ == "__main__":
    sys.exit(main())
