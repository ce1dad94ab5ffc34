"""`python -m kernels.serve --http PORT` (kernels/serve/http.py) driven by `simulate replay`: the same
per-request token counts as the in-process run of the same trace (`kernels.serve --trace`), and median
TTFT / TPOT close to it (issue 16's acceptance: "loose enough for a shared machine").

The `tiny` preset with 16 layers (a step ~18 ms, against ~2 ms for the HTTP path; with its 4 layers
a step is ~4 ms and the HTTP path alone moved TPOT by ~24%), at world size 1 (one gloo rank, TP=1):
with 2 ranks the two runs' step times alone differed by ~40% on the shared 2-core machine (other
jobs), which says nothing about the HTTP path; the loop, the plan broadcast and the HTTP thread are
the same code at any world size (run by hand at 2 ranks, docs/sim_vs_real.md section 2). The
server's own records (--out, written at SIGTERM) give the HTTP overhead in isolation: client-side
minus server-side TTFT of the same requests.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")

from kernels.dist import free_port  # noqa: E402
from kernels.serve.cli import main as serve_main  # noqa: E402
from kernels.serve.http import wait_healthy  # noqa: E402
from simulator.replay.cli import main as replay_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 30 requests, ~3 s of bursty arrivals; 48-token prompts, 16 output tokens (a tiny-model step: ~5 ms)
TRACE = "synthetic:gamma?rate=10&burstiness=0.5&n=30&input=48&output=16&seed=3"
ARGS = ["--strategy", "tp", "--nproc", "1", "--model", "tiny", "--layers", "16"]
# replayed over HTTP vs the nearer of two in-process runs (before and after), |relative difference| of the
# medians. TPOT: 20% (the bound; against one in-process run seen 1-26%, failing 3 of 11 runs on
# 2026-11-24 with either side the slow one). TTFT: 50%, because the in-process run's own median TTFT moved between 42.7 and
# 53.9 ms over 6 runs of this test on the shared 2-core machine (queueing behind bursts amplifies other
# jobs' load), so two runs differ with no HTTP in between (seen: -18% to +11%, and +31% in one fresh-clone
# CI run: 50.2 vs 38.3 ms); the HTTP path itself is bounded tightly below (client minus server TTFT of
# the same requests, < 5 ms: ~2 ms). The 20% bound itself, with the noise pooled out over rounds:
# benchmarks/http_replay.py (+10.7% / +5.7%, docs/sim_vs_real.md section 2).
REL = {"median_ttft_ms": 0.50, "median_tpot_ms": 0.20}


def _read(d: Path, name: str):
    return pd.read_parquet(d / name / "requests.parquet"), json.loads((d / name / "summary.json").read_text())


def _served_round(d: Path, tag: str) -> float:
    """Serve the trace over HTTP and replay it (-> replayed{tag}, server{tag}), then run it in process
    (-> inproc{tag}); the replay's wall time."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "kernels.serve", "--http", str(port), *ARGS, "--out", str(d / f"server{tag}")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_healthy(url, proc)
        t = time.perf_counter()
        rc = replay_main(["--url", url, "--trace", TRACE, "--out", str(d / f"replayed{tag}")])
        t_replay = time.perf_counter() - t
        proc.send_signal(signal.SIGTERM)  # rank 0 finishes, the launcher writes --out
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert rc == 0 and proc.returncode == 0, err.decode()[-2000:]
    assert serve_main([*ARGS, "--trace", TRACE, "--out", str(d / f"inproc{tag}")]) == 0
    return t_replay


def _medians_close(rep: dict, before: dict, after: dict) -> bool:
    return all(min(abs(rep[k] - m[k]) / m[k] for m in (before, after) if m[k] > 0) <= rel for k, rel in REL.items())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-http")
    # in-process runs before and after the served one (A B A): the VM's drift between runs falls on both
    # sides, and one slow in-process run alone cannot fail the comparison (seen: TPOT 27.3 ms in process
    # against 21.4 ms replayed, the next in-process runs 19.7-23.9 ms). A round whose medians fall outside
    # REL is served once more (B A again, against the in-process runs around it): a slow phase of the shared
    # VM during one served run (seen once in six fresh-clone CI runs: TPOT 33.1 ms replayed, 21.2 / 22.0 ms
    # in process before / after) passes on the second round, a slower HTTP path fails both.
    assert serve_main([*ARGS, "--trace", TRACE, "--out", str(d / "inproc_before")]) == 0
    tag, t_replay = "", _served_round(d, "")
    if not _medians_close(_read(d, "replayed")[1], _read(d, "inproc_before")[1], _read(d, "inproc")[1]):
        tag, t_replay = "_again", _served_round(d, "_again")
    before = "inproc" if tag else "inproc_before"
    return {"replayed": _read(d, f"replayed{tag}"), "inproc": _read(d, f"inproc{tag}"),
            "inproc_before": _read(d, before), "server": _read(d, f"server{tag}"), "t_replay": t_replay}


@pytest.mark.slow  # an in-process run, a server start (~5 s), 3 s of trace over HTTP, an in-process run: ~30 s
def test_replay_over_http_matches_the_in_process_run(runs):
    (rep, s_rep), (inp, s_inp), (srv, s_srv) = runs["replayed"], runs["inproc"], runs["server"]
    s_before = runs["inproc_before"][1]
    # (a) every request, the same token counts: prompt (the server's usage.prompt_tokens of "hi hi ...")
    # and output (max_tokens, forced), request by request in trace order
    assert (rep["status"] == "completed").all() and (inp["status"] == "completed").all() and len(rep) == 30
    assert list(rep["output_tokens"]) == list(inp["generated_tokens"]) == list(inp["output_tokens"])
    assert list(rep["generated_tokens"]) == list(rep["token_arrivals"]) == list(rep["output_tokens"])
    assert list(rep["input_tokens"]) == list(inp["input_tokens"]) == list(rep["trace_input_tokens"])
    # the server's own records of the same requests (arrival order = send order here)
    assert len(srv) == 30 and (srv["status"] == "completed").all()
    assert sorted(srv["output_tokens"]) == sorted(rep["output_tokens"])
    assert s_srv["trace"].startswith("http://127.0.0.1:")
    # (b) medians close to the in-process runs' (REL; the nearer of the runs before and after)
    print({k: (round(s_rep[k], 2), round(s_before[k], 2), round(s_inp[k], 2), round(s_srv[k], 2))
           for k in ("median_ttft_ms", "median_tpot_ms")}, "replayed / in-process before, after / server-side")
    for key, rel in REL.items():
        r = s_rep[key]
        errs = [abs(r - m) / m for m in (s_before[key], s_inp[key]) if m > 0]
        assert len(errs) == 2 and min(errs) <= rel, (key, "replayed", r, "in-process", s_before[key], s_inp[key])
    # the HTTP path's own cost: client-side TTFT minus the server's (same requests, same run)
    extra = np.median(np.sort(rep["ttft_ms"].to_numpy()) - np.sort(srv["ttft_ms"].to_numpy()))
    print(f"HTTP overhead on TTFT: {extra:.2f} ms (median, client minus server)")
    assert -1.0 < extra < 5.0, extra
    assert runs["t_replay"] < 20


def test_request_lengths_and_growing_records():
    from kernels.serve.http import new_records, resized
    from kernels.serve.http_app import request_lengths

    assert request_lengths({"prompt": "hi hi hi", "max_tokens": 5}, "m") == (3, 5)  # replay's prompt: a word a token
    assert request_lengths({"model": "m", "prompt": [[1, 2, 3, 4]]}, "m") == (4, 16)  # ids; OpenAI's default 16
    for bad in ({"prompt": ["a", "b"]}, {"prompt": ""}, {"prompt": "a", "max_tokens": 0}, {"prompt": "a", "n": 2}):
        with pytest.raises(ValueError):
            request_lengths(bad, "m")
    with pytest.raises(LookupError):
        request_lengths({"model": "other", "prompt": "a"}, "m")
    r = new_records(2)
    r.arrival_s[1], r.output_tokens[1], r.total_tokens[1] = 0.5, 7, 9
    g = resized(r, 4)
    assert len(g) == 4 and g.arrival_s[1] == 0.5 and g.output_tokens[1] == 7 and g.total_tokens[:2] == [0, 9]
    assert len(resized(g, 1)) == 1


def test_app_process_round_trip_and_bind_failure():
    """The app runs in its own process (kernels/serve/http_app.py): a request reaches rank 0's end of
    the pipe with the prompt/output lengths and an arrival on rank 0's clock, the events sent back
    become the SSE stream, "stopping" turns new requests into 503, and a port in use is one error."""
    import socket

    from kernels.serve.http import HttpOptions
    from kernels.serve.http_app import Server

    port = free_port()
    t0 = time.perf_counter()
    srv = Server(HttpOptions("127.0.0.1", port, "m", "/nonexistent/stop", os.getpid()), 64, t0)
    srv.start()
    try:
        body = json.dumps({"model": "m", "prompt": "hi hi hi", "max_tokens": 2, "stream": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
        import threading

        got = {}
        th = threading.Thread(target=lambda: got.setdefault("r", urllib.request.urlopen(req, timeout=30).read()))
        th.start()
        assert srv.requests.poll(30)
        tid, n_in, n_out, arrival_s = srv.requests.recv()
        assert (n_in, n_out) == (3, 2) and 0 <= arrival_s <= time.perf_counter() - t0
        srv.send([(tid, "accepted", None), (tid, "tokens", 1)])
        srv.send([(tid, "tokens", 1), (tid, "done", None), (None, "stopping", None)])
        th.join(30)
        chunks = [c for c in got["r"].decode().split("\n\n") if c.startswith("data: {")]
        assert len(chunks) == 2 and json.loads(chunks[-1][6:])["choices"][0]["finish_reason"] == "length"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 503
    finally:
        srv.stop()
    assert not srv.proc.is_alive()
    # rank 0 gone (its end of the events pipe closed, as when the process dies): the app stops by itself
    orphan = Server(HttpOptions("127.0.0.1", free_port(), "m", "/nonexistent/stop", os.getpid()), 64, t0)
    orphan.start()
    orphan.events.close()
    orphan.proc.join(30)
    assert not orphan.proc.is_alive()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = Server(HttpOptions("127.0.0.1", s.getsockname()[1], "m", "/x", os.getpid()), 64, t0)
        with pytest.raises(RuntimeError, match=f"http server: 127.0.0.1:{s.getsockname()[1]}"):
            busy.start()
