"""Command-line edge: trace flags for any command, `describe` and `convert` subcommands."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings

from perfmodel.modelspec import load_model
from . import transforms as tf
from .canonical import write_csv
from .errors import TraceError, TraceWarning
from .load import load_trace
from .readers import READERS
from .workload import Workload

class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help with every option's default: "(default: X)" appended where the help does not already say
    its default in words (and flags / options without a default stay as they are); description and
    epilog keep their own line breaks."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if (not action.option_strings or re.search(r"\bdefault\b", text, re.IGNORECASE) or d is None or d is False
                or d is argparse.SUPPRESS or d == [] or d == ""):
            return text
        return f"{text} (default: %(default)s)".strip()


SPEC_HELP = "synthetic:KIND?key=value&... with KIND poisson|gamma|onoff|batch (traces/README.md)"


def add_trace_args(parser: argparse.ArgumentParser, *, default_trace: str | None = "burstgpt.csv",
                   seed: bool = True) -> argparse.ArgumentParser:
    """Add --trace and the reading / transformation flags (pass seed=False if --seed exists)."""
    g = parser.add_argument_group("workload")
    g.add_argument("--trace", default=default_trace, metavar="FILE|NAME|SPEC",
                   help=f"trace file, bundled trace name (traces/), or {SPEC_HELP}")
    g.add_argument("--trace-format", choices=sorted(READERS), help="skip format sniffing (default: sniffed)")
    g.add_argument("--drop-failed", action="store_true",
                   help="BurstGPT: exclude failed requests (0 response tokens) instead of "
                        "keeping them as prefill-only")
    g.add_argument("--burstgpt-model", metavar="ChatGPT|GPT-4", help="BurstGPT: keep one model")
    g.add_argument("--strict", action="store_true",
                   help="reject timestamps that go backwards instead of sorting with a warning")
    g.add_argument("--time-window", metavar="START:END", help="keep arrivals in [START, END) s")
    g.add_argument("--sample", metavar="N|FRACTION", help="random subset of requests (seeded)")
    g.add_argument("--rate-scale", type=float, metavar="K",
                   help="multiply the arrival rate by K (inter-arrivals divided by K)")
    g.add_argument("--max-context-clip", metavar="TOKENS|MODEL",
                   help="clip input+output to a context length or a model's max_model_len (as vLLM derives it)")
    if seed:
        g.add_argument("--seed", type=int, default=0, help="seed for synthetic traces and --sample")
    return parser


def workload_from_args(args: argparse.Namespace) -> Workload:
    """Load args.trace and apply window -> sample -> rate scale -> clip; warnings go to stderr."""
    if not args.trace:
        raise TraceError("--trace", "no trace given (a file, a bundled name, or a synthetic: spec)")
    seed = getattr(args, "seed", 0) or 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        w = load_trace(args.trace, args.trace_format, strict=args.strict,
                       drop_failed=args.drop_failed, burstgpt_model=args.burstgpt_model, seed=seed)
    for msg in caught:
        print(f"warning: {msg.message}", file=sys.stderr)
    if args.time_window:
        w = tf.time_window(w, **tf.parse_window(args.time_window))
    if args.sample:
        w = tf.sample(w, seed=seed, **tf.parse_sample(args.sample))
    if args.rate_scale is not None:
        w = tf.rate_scale(w, args.rate_scale)
    if args.max_context_clip:
        w = tf.clip_context(w, _context_tokens(args.max_context_clip))
    return w


def _context_tokens(value: str) -> int:
    """An integer token count, or a model preset / config.json whose max context to use."""
    if value.isdigit():
        return int(value)

    try:
        return load_model(value).max_model_len
    except ValueError as e:
        raise TraceError(value, str(e), field="--max-context-clip") from None


def format_summary(w: Workload) -> str:
    """The summary as an aligned two-column table plus the notes of what was changed."""
    rows = []
    for key, v in w.summary().items():
        if isinstance(v, float):  # 4 significant digits, but whole numbers of seconds/tokens above
            v = "n/a" if v != v else f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        elif isinstance(v, dict):
            v = ", ".join(f"{k}: {c}" for k, c in v.items())
        rows.append((key, str(v)))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"note: {n}" for n in w.notes]
    return "\n".join(lines)


def describe(w: Workload, plot_path: str | None = None, as_json: bool = False, out=None) -> None:
    """Print the summary (table or JSON) and optionally write the histogram figure (its `plot:` line goes
    to stderr with JSON, so that `out` holds the JSON alone)."""
    out = out or sys.stdout
    if as_json:
        s = {k: None if isinstance(v, float) and v != v else v for k, v in w.summary().items()}
        print(json.dumps({**s, "notes": list(w.notes)}, indent=2), file=out)  # NaN -> null
    else:
        print(format_summary(w), file=out)
    if plot_path:
        from .plot import plot_workload  # local: matplotlib only when a plot is asked for

        print(f"plot: {plot_workload(w, plot_path)}", file=sys.stderr if as_json else out)


def describe_main(argv: list[str] | None = None) -> int:
    """`describe TRACE [--plot out.png] [--json] [trace flags]`: exit 0, or 2 on bad input."""
    p = argparse.ArgumentParser(prog="python -m simulator.workload describe", formatter_class=DefaultsHelpFormatter,
                                description="Summarize a trace: rate, burstiness, lengths.")
    p.add_argument("file", nargs="?", metavar="TRACE", help="same as --trace")
    add_trace_args(p, default_trace=None)
    p.add_argument("--plot", metavar="PATH", help="write inter-arrival / length histograms (PNG)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    args.trace = args.file or args.trace
    return _run(lambda: describe(workload_from_args(args), args.plot, args.json))


def convert_main(argv: list[str] | None = None) -> int:
    """`convert TRACE OUT.csv [trace flags]`: write any trace or spec as canonical CSV."""
    p = argparse.ArgumentParser(prog="python -m simulator.workload convert", formatter_class=DefaultsHelpFormatter,
                                description="Write a trace (after flags) as canonical CSV.")
    p.add_argument("file", metavar="TRACE")
    p.add_argument("out", metavar="OUT.csv")
    add_trace_args(p, default_trace=None)
    args = p.parse_args(argv)
    args.trace = args.file

    def run():
        w = workload_from_args(args)
        print(f"wrote {len(w)} requests to {write_csv(w, args.out)}")
    return _run(run)


def _run(fn) -> int:
    """Exit code 0, or 2 with one `error:` line on stderr for bad input, 141 when stdout's reader went away
    (never a traceback)."""
    try:
        fn()
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`: quietly, 141 (128 + SIGPIPE) as `simulate`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python docs' recipe: no flush error)
        return 141
    except OSError as e:  # e.g. the --plot or OUT path is not writable
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m simulator.workload describe|convert ...`."""
    argv = sys.argv[1:] if argv is None else argv
    commands = {"describe": describe_main, "convert": convert_main}
    if not argv or argv[0] not in commands:
        print("usage: python -m simulator.workload {describe,convert} TRACE [options] "
              "(--help for each)", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return commands[argv[0]](argv[1:])
