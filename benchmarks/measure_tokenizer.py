"""Measure a serving front end's tokenizer: microseconds per prompt token (perfmodel.framework
Framework.tokenize_s_per_token).

vLLM, SGLang and TRT-LLM tokenize a request's prompt with Hugging Face `tokenizers` in one thread of their
API-server process before the engine sees it (docs/frameworks.md, "Front end"), so a prompt of n tokens
reaches the engine ~n x this later, and the client's TTFT clock is already running. This times exactly that
call on prompts built the way the two benchmark clients of the e2e rows build them:
  random  benchmark_serving's random dataset: random token ids decoded to text (the server re-tokenizes it)
  corpus  aiperf's synthetic prompts: contiguous blocks of a natural-text corpus (--corpus FILE; aiperf ships
          one, aiperf/dataset/generator/assets/shakespeare.txt)

Needs `tokenizers` (pip install -e .[tokenize]; transformers, if installed, is used for its call path, as the
servers call it) and a production tokenizer.json: the 2026-11-26 figure used DeepSeek-V3's (129,280-token
byte-level BPE; the copy in the litellm 1.110.2 wheel, litellm/litellm_core_utils/tokenizers/
deepseek_tokenizer.json, MIT), the one HF-format production tokenizer reachable without the hub.

Usage: python benchmarks/measure_tokenizer.py --tokenizer tokenizer.json [--corpus FILE] [--lengths 1024 4096 8192]
Prints one line per (kind, length) and the median over them (the figure the preset carries).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _encoder(path: str):
    """encode(text) -> token count, through transformers' fast tokenizer where installed (the servers' path)."""
    try:
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast(tokenizer_file=path)
        return (lambda text: len(tok(text, add_special_tokens=False).input_ids)), tok.backend_tokenizer, "transformers"
    except ImportError:
        from tokenizers import Tokenizer
        raw = Tokenizer.from_file(path)
        return (lambda text: len(raw.encode(text, add_special_tokens=False).ids)), raw, "tokenizers"


def _time_us_per_token(encode, text: str, repeats: int) -> float:
    times, n = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = encode(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / max(n, 1) * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", required=True, help="a tokenizer.json (Hugging Face tokenizers format)")
    p.add_argument("--corpus", help="natural-text file for aiperf-like prompts (else only the random kind)")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        encode, raw, via = _encoder(a.tokenizer)
    except Exception as e:  # a missing or malformed file: one line
        print(f"error: {a.tokenizer}: {e}", file=sys.stderr)
        return 2
    vocab = raw.get_vocab_size()
    rng = np.random.default_rng(a.seed)
    corpus_ids = raw.encode(open(a.corpus).read()[:2_000_000]).ids if a.corpus else None
    print(f"{a.tokenizer}: vocabulary {vocab}, timed through {via}, median of {a.repeats} calls")
    out = []
    for n in a.lengths:
        kinds = [("random", raw.decode(rng.integers(100, vocab - 200, n).tolist()))]
        if corpus_ids is not None:
            start = int(rng.integers(0, max(1, len(corpus_ids) - n)))
            kinds.append(("corpus", raw.decode(corpus_ids[start:start + n])))
        for kind, text in kinds:
            us = _time_us_per_token(encode, text, a.repeats)
            out.append(us)
            print(f"  {kind:6s} {n:6d} tokens: {us:.2f} us/token")
    print(f"median: {statistics.median(out):.2f} us per prompt token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
