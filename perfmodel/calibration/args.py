"""The options of `perfmodel calibrate` and `perfmodel validate`. Apart from calibration/cli.py, which runs
them (pandas and the fits): perfmodel/cli.py builds its parser from these at every start, `--help` included."""
from __future__ import annotations

import argparse


def add_calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measurements", nargs="+", metavar="PATH",
                   help="measurement CSV files and/or directories (aiconfigurator layout or our schema)")
    p.add_argument("--base", required=True, help="hardware preset the profile is for (h100_sxm, cpu, ...)")
    p.add_argument("--out", required=True, help="profile JSON to write")
    p.add_argument("--name", default=None, help="profile name (default: the --out file's name without .json, "
                   "so a user-made h100.json never reads as the bundled h100_sxm)")
    p.add_argument("--allow-device-mismatch", action="store_true",
                   help="fit even when the measurements' device column names other hardware than --base "
                        "(recorded in the profile; every estimate with it says so)")
    p.add_argument("--split", default="fit", choices=("fit", "all"),
                   help="fit on the fixed fit split (default; validate reports held-out error) or on all rows")
    p.add_argument("--from-aiconfigurator", default=None, metavar="SYSTEM",
                   help="read aiconfigurator's kernel tables for SYSTEM (h100_sxm, h200_sxm, ...) from the installed "
                        "aiconfigurator-core package (extra 'aic'): the moe and mla_decode sections always, and the "
                        "GEMM, attention and collective tables unless --measurements gives them")
    p.add_argument("--aic-framework", default="trtllm", choices=("trtllm", "vllm", "sglang"),
                   help="whose kernel collection --from-aiconfigurator reads (its GEMM and attention tables)")
    p.add_argument("--derive-from", default=None, metavar="PROFILE",
                   help="derive a profile for --base from this profile and the two datasheets (no measurements)")


def add_validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measurements", nargs="+", required=True, metavar="PATH",
                   help="measurement CSV files and/or directories")
    p.add_argument("--profile", required=True, help="profile JSON path or shipped name (h100_sxm, ...)")
    p.add_argument("--hardware", default=None, help="datasheet to compare with (default: the profile's hardware)")
    p.add_argument("--format", default="table", choices=("table", "json"), help="output format")
    p.add_argument("--plot", default=None, metavar="PNG", help="predicted vs measured per op (log-log)")
