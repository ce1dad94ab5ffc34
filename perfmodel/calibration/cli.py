"""`perfmodel calibrate` and `perfmodel validate` (wired by perfmodel/cli.py; also runnable as
`python -m perfmodel.calibration.cli calibrate|validate ...`). Bad input: one line, exit 2."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from tqdm import tqdm

from ..cliutil import DefaultsHelp, atomic_write_text, check_writable, run_cli
from ..hardware import load_hardware
from . import aiconfigurator as aic
from . import kernel_tables, measured
from .args import add_calibrate_args, add_validate_args
from .calibrate import calibrate, derive, dumps
from .coverage import caveats
from .profile import load_profile
from .readers import read_measurements_any
from .validate import format_table, validate

PROGRESS_DELAY_S = 1.0  # the fit's progress bar (stderr) shows only when a fit takes longer than this


def _fail(e: Exception) -> int:
    print(f"error: {e}".splitlines()[0], file=sys.stderr)
    return 2


def calibrate_main(args, out=None) -> int:
    """Fit (or derive) a profile and write it; prints a one-screen summary of the fit errors. --out
    is checked before any work, and written atomically (a temporary file beside it, then renamed)."""
    out = out or sys.stdout
    try:
        check_writable(args.out)
        hw = load_hardware(args.base)
        name = args.name or Path(args.out).stem
        if args.derive_from:
            base = load_profile(args.derive_from)
            d = derive(Path(base.path), load_hardware(base.hardware), hw, name, Path(args.out).parent)
        else:
            if not args.measurements and not args.from_aiconfigurator:
                raise ValueError("--measurements or --from-aiconfigurator SYSTEM is required (or --derive-from PROFILE)")
            system = args.from_aiconfigurator
            with _progress_bar() as bar:
                # microbench's kernel tables (moe_perf_*.csv, generation_mla_perf_*.csv) named in or lying beside
                # the measurements fit the moe / mla_decode sections; the rest are the measurement CSVs
                rest, named = kernel_tables.split_paths(args.measurements or [])
                if args.measurements and not rest:
                    raise ValueError("--measurements names kernel tables only; the fits need the GEMM / attention / "
                                     "collective measurements too (microbench's --out CSV, or their folder)")
                tables = measured.read_tables(kernel_tables.find([*rest, *named])) if args.measurements else None
                meas = (read_measurements_any(rest) if args.measurements
                        else aic.read_system(system, args.aic_framework))
                extra = {aic.system_dir(system): aic.label(system)} if system else {}
                records = {"aiconfigurator": aic.provenance(system, args.aic_framework, not args.measurements)
                           } if system else {}
                d = calibrate(meas, hw, args.split, name, _command(args), progress=bar,
                              allow_device_mismatch=args.allow_device_mismatch, extra_dirs=extra, records=records,
                              tables=tables)
        atomic_write_text(args.out, dumps(d) + "\n")
    except (ValueError, FileNotFoundError, KeyError) as e:
        return _fail(e)
    except OSError as e:  # the folder changed between the check and the write
        return _fail(ValueError(f"--out {args.out}: {e.strerror or e}"))
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e3:.0f} kB): profile {d['name']} for {hw.name}",
          file=out)
    for key, how in d["provenance"].get("extra_sections", {}).items():
        print(f"  {key}: {how}", file=out)
    for key, text in caveats(d).items():  # what every estimate with this profile will also say
        print(f"warning: profile {d['name']}: {text}", file=sys.stderr)
    for op, e in d["provenance"].get("fit_error", {}).items():
        held = e.get("heldout_median_abs_rel_err")
        fit = 100 * e.get("fit_median_abs_rel_err", float("nan"))
        text = f"  {op:24s} fit rows {e['fit_rows']:6d} median {fit:5.1f}%"
        if held is not None:
            text += (f" | held-out rows {e['heldout_rows']:6d} median {100 * held:5.1f}% "
                     f"p90 {100 * e['heldout_p90_abs_rel_err']:5.1f}%")
        print(text, file=out)
    return 0


class _progress_bar:
    """A tqdm bar on stderr over the fit's stages (shown after PROGRESS_DELAY_S), as a callback."""

    def __enter__(self):
        self.bar = tqdm(total=1, desc="calibrate", unit="stage", file=sys.stderr, delay=PROGRESS_DELAY_S,
                        leave=False, dynamic_ncols=True)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.set_description(f"calibrate: {stage}", refresh=False)
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc) -> None:
        self.bar.close()


def _command(args) -> str:
    parts = ["perfmodel", "calibrate"]
    parts += ["--measurements", *map(str, args.measurements)] if args.measurements else []
    if args.from_aiconfigurator:
        parts += ["--from-aiconfigurator", args.from_aiconfigurator]
        parts += ["--aic-framework", args.aic_framework] if args.aic_framework != "trtllm" else []
    parts += ["--base", args.base, "--out", str(args.out)]
    if args.split != "fit":
        parts += ["--split", args.split]
    if args.name:
        parts += ["--name", args.name]
    if args.allow_device_mismatch:
        parts += ["--allow-device-mismatch"]
    return " ".join(shlex.quote(a) for a in parts)


def validate_main(args, out=None) -> int:
    """Print per-op error of the profile and of the datasheet roofline (table or JSON); optional plot."""
    out = out or sys.stdout
    try:
        prof = load_profile(args.profile)
        hw = load_hardware(args.hardware or prof.hardware)
        meas = read_measurements_any(args.measurements)
        rows = validate(meas, prof, hw)
        if not rows:
            raise ValueError(f"{', '.join(map(str, args.measurements))}: no rows of an op the profile fits")
        if args.plot:
            # matplotlib only when a plot is asked for (~0.2 s; validate_plot imports it at its top)
            from .validate_plot import plot

            plot(meas, prof, hw, args.plot)
    except (ValueError, FileNotFoundError, KeyError) as e:
        return _fail(e)
    if args.format == "json":  # NaN (e.g. no repeats to estimate noise from) is written as null
        json.dump(_finite(rows), out, indent=1)
        out.write("\n")
    else:
        title = (f"profile {prof.name} ({prof.path}) vs {', '.join(map(str, args.measurements))}; "
                 f"datasheet = {hw.name} roofline without calibration; |relative error| of predicted time")
        print(format_table(rows, title), file=out)
        if args.plot:
            print(f"plot: {args.plot}", file=out)
    return 0


def _finite(x):
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return None if isinstance(x, float) and x != x else x


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfmodel.calibration.cli", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    add_calibrate_args(sub.add_parser("calibrate", help="fit a calibrated profile from measurements", formatter_class=DefaultsHelp))
    add_validate_args(sub.add_parser("validate", help="predicted vs measured error per op", formatter_class=DefaultsHelp))
    args = p.parse_args(argv)
    return calibrate_main(args) if args.cmd == "calibrate" else validate_main(args)


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
