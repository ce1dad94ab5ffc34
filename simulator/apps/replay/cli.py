"""`simulate replay`: replay a trace against a live OpenAI-compatible server and write the measured run
in the simulator's result schema, so `simulate compare MEASURED SIMULATED` can set it beside a run.

    simulate replay --url http://localhost:8000 --trace T --out DIR [--model NAME] [--max-concurrency C]
                    [--sample N|F] [--rate-scale K] [--time-window A:B] [--seed S] [--ignore-timestamps]
                    [--prompt-word W]
    simulate replay --import-vllm RESULT.json --out DIR      # a vLLM bench serve --save-detailed result

The trace flags are simulate's own (simulator.workload.cli: --sample, --rate-scale, --time-window, ...),
applied by the same code, so one transform gives the same requests on both sides. The client
(simulator/apps/replay/client.py) sends each request at its (transformed) timestamp, with a synthetic prompt
of the trace's input length and max_tokens = its output length with ignore_eos, and times the first
token and every streamed token. A prefill-only row (0 output tokens; simulate completes it after its
prefill, with no TTFT/TPOT) is sent with max_tokens 1, the least an OpenAI server accepts (vLLM
refuses 0), and recorded as simulate records it: completed, 0 output tokens, no TTFT, its end at
its one token. Old flags, kept: --time-scale X (= --rate-scale 1/X) and --limit N (the first N
requests after the other transforms; --sample N draws N at random, as simulate does). requires aiohttp
(`pip install 'parallelism-sim[replay]'`). Files written (docs/outputs.md; simulator/apps/replay/records.py):
requests.parquet, steps.parquet (empty), timeseries.csv, summary.json.

Exit codes: 0 done; 1 every request failed (the files are still written); 2 bad input, an unreachable
server when the model must be asked for, or an unwritable --out; 130 interrupted.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from simulator.apps.comparison.inputs import InputError, load
from simulator.results.files import OutputPathError, check_writable_dir, write_run
from simulator.run_record import workload_recipe
from simulator.workload import TraceError
from simulator.workload.cli import DefaultsHelpFormatter, add_trace_args, workload_from_args
from .records import empty_steps, measured_summary, replay_frame


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simulate replay", formatter_class=DefaultsHelpFormatter,
                                description="Replay a trace against an OpenAI-compatible server (/v1/completions, "
                                            "streamed) and write the measured run as simulate --out does.")
    p.add_argument("--url", help="server base URL, e.g. http://localhost:8000")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--model", help="model name to send (default: the first one the server lists at /v1/models)")
    p.add_argument("--max-concurrency", type=int, default=0, help="most requests in flight (0: no limit)")
    p.add_argument("--time-scale", type=float,
                   help="deprecated: --rate-scale 1/X says the same as simulate does (time-scale 0.5 = rate-scale 2)")
    p.add_argument("--ignore-timestamps", action="store_true",
                   help="send every request at t=0 (with --max-concurrency: a closed loop)")
    p.add_argument("--limit", type=int, help="replay only the first N requests (after --sample / --rate-scale / "
                                             "--time-window; simulate has no such flag: prefer --sample N)")
    p.add_argument("--prompt-word", default="hi", help="the word the synthetic prompt repeats")
    p.add_argument("--timeout-s", type=float, default=6 * 3600, help="per-request time limit")
    p.add_argument("--import-vllm", metavar="JSON",
                   help="instead of replaying: convert a vLLM bench serve --save-result --save-detailed file")
    add_trace_args(p, default_trace=None)  # simulate's --trace and transforms, with simulate's meaning
    return p


def import_vllm(path, out) -> dict:
    """Write a vLLM bench result file as a run directory; the summary keeps the file's own measured
    figures (duration, throughput, latency statistics) where it has them."""
    side = load(path)
    if side.kind != "vllm":
        raise InputError(f"{path}: not a vLLM bench result file (a run directory needs no import)")
    itls = side.itls or [[] for _ in range(len(side.requests))]
    d = side.summary
    summ = measured_summary(side.requests, itls, model=d.get("model_id"), max_concurrency=d.get("max_concurrency"),
                            backend=d.get("backend"), config={"imported_from": str(Path(path).resolve())})
    keep = {k: v for k, v in d.items() if v is not None and not isinstance(v, (list, dict))}
    summ.update(keep)
    write_run(out, summ, side.requests, empty_steps())
    return summ


def replay_trace(args) -> dict:
    """Replay args.trace against args.url; write args.out; the summary."""
    try:
        from .client import fetch_model, replay  # needs aiohttp: the optional [replay] extra, imported only here
    except ImportError:  # (client imports nothing else that could be missing)
        raise ValueError("simulate replay needs aiohttp: pip install 'parallelism-sim[replay]'") from None
    wl = workload_from_args(args)
    if args.limit is not None:
        wl = wl.replace(requests=wl.requests.iloc[:args.limit].reset_index(drop=True))
    trace = wl.requests.reset_index(drop=True)
    time_scale = 1.0 if args.time_scale is None else args.time_scale
    model = args.model or asyncio.run(fetch_model(args.url))
    arrivals = np.zeros(len(trace)) if args.ignore_timestamps else trace["arrival_s"].to_numpy(float) * time_scale
    progress = Progress(len(trace))
    t0, outcomes = asyncio.run(replay(args.url, model, trace["arrival_s"].to_numpy(float),
                                      trace["input_tokens"].to_numpy(), trace["output_tokens"].to_numpy(),
                                      max_concurrency=args.max_concurrency, time_scale=time_scale,
                                      ignore_timestamps=args.ignore_timestamps, word=args.prompt_word,
                                      timeout_s=args.timeout_s, progress=progress))
    progress.close()
    req, itls = replay_frame(trace, t0, outcomes, arrivals)
    config = {"replay": {"url": args.url, "trace": str(args.trace), "model": model, "limit": args.limit,
                         "max_concurrency": args.max_concurrency, "time_scale": args.time_scale,
                         "ignore_timestamps": args.ignore_timestamps, "prompt_word": args.prompt_word},
              # as simulate's summary records it (trace file sha256, transforms, requests_sha256): compare checks it
              "workload": {**workload_recipe(wl, args), "limit": args.limit}}
    summ = measured_summary(req, itls, model=model, max_concurrency=args.max_concurrency, backend="openai",
                            config=config)
    summ["trace"] = str(args.trace)
    write_run(args.out, summ, req, empty_steps())
    return summ


class Progress:
    """A tqdm bar on stderr when it is a terminal; nothing otherwise (tests, pipes)."""

    def __init__(self, total: int):
        self.bar = None
        if sys.stderr.isatty():
            self.bar = tqdm(total=total, unit="req", file=sys.stderr)

    def __call__(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main(argv=None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))

    try:
        check_writable_dir(args.out, "--out")
        if args.import_vllm:
            summ = import_vllm(args.import_vllm, args.out)
            print(f"imported {summ['completed']} of {summ['num_prompts']} requests into {args.out}")
            return 0
        if not args.url or not args.trace:
            raise ValueError("replay needs --url and --trace (or --import-vllm JSON)")
        if (args.time_scale is not None and args.time_scale <= 0) or args.max_concurrency < 0 or (
                args.limit is not None and args.limit < 1):
            raise ValueError("--time-scale must be > 0, --max-concurrency >= 0, --limit >= 1")
        if args.time_scale is not None and args.rate_scale is not None:
            raise ValueError("give --rate-scale K (simulate's flag) or the deprecated --time-scale 1/K, not both")
        summ = replay_trace(args)
    except (InputError, OutputPathError, TraceError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = summ["failed"]
    print(f"replayed {summ['num_prompts']} requests: {summ['completed']} completed, {failed} failed; "
          f"median TTFT {_ms(summ.get('median_ttft_ms'))}, median TPOT {_ms(summ.get('median_tpot_ms'))}; "
          f"wrote {args.out}")
    if failed:
        reasons = [r for r in summ.get("errors") or [] if r]
        print(f"warning: {failed} request(s) failed, e.g. {reasons[0] if reasons else '?'}", file=sys.stderr)
    return 1 if summ["completed"] == 0 else 0


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f} ms"


if __name__ == "__main__":
    sys.exit(main())
