"""`python -m kernels.serve --http PORT` (kernels/serve/http.py) driven by `simulate replay`: the same
requests with the same per-request token counts as the in-process run of the same trace
(`kernels.serve --trace`), the server's own records of them, a prediction for every step it ran.

Issue 38: nothing here bounds a wall-clock figure (how close the replayed medians come to the
in-process ones, the HTTP path's own cost in ms, the replay's duration): on a shared 2-core machine
those moved by tens of percent between identical runs and failed CI. They are printed by
`python benchmarks/http_replay.py` (pooled over rounds, with issue 16's 20% bound and the 5 ms HTTP-path
bound; docs/sim_vs_real.md section 2). What is asserted is what the machine's speed cannot change:
token counts, the request set, completion, and causality (a client sees its first token no sooner than
the server emitted it).

The `tiny` preset at world size 1 (one gloo rank, TP=1); the loop, the plan broadcast and the HTTP
thread are the same code at any world size (run by hand at 2 ranks, docs/sim_vs_real.md section 2).
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
from simulator.apps.replay.cli import main as replay_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 30 requests, ~3 s of bursty arrivals; 48-token prompts, 16 output tokens
TRACE = "synthetic:gamma?rate=10&burstiness=0.5&n=30&input=48&output=16&seed=3"
ARGS = ["--strategy", "tp", "--nproc", "1", "--model", "tiny", "--layers", "4"]


def _read(d: Path, name: str):
    return pd.read_parquet(d / name / "requests.parquet"), json.loads((d / name / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Serve the trace over HTTP and replay it (-> replayed, server), then run it in process (-> inproc)."""
    d = tmp_path_factory.mktemp("serve-http")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "kernels.serve", "--http", str(port), *ARGS, "--out", str(d / "server")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_healthy(url, proc, timeout_s=180)  # (hang guards only: under `pytest -n` the server shares 2 cores)
        rc = replay_main(["--url", url, "--trace", TRACE, "--out", str(d / "replayed")])
        proc.send_signal(signal.SIGTERM)  # rank 0 finishes, the launcher writes --out
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert rc == 0 and proc.returncode == 0, err.decode()[-2000:]
    assert serve_main([*ARGS, "--trace", TRACE, "--out", str(d / "inproc")]) == 0
    return {"replayed": _read(d, "replayed"), "inproc": _read(d, "inproc"), "server": _read(d, "server"),
            "server_steps": pd.read_parquet(d / "server" / "steps.parquet")}


@pytest.mark.slow  # a server start (~5 s), 3 s of trace over HTTP, an in-process run: ~20 s
def test_replay_over_http_serves_the_same_requests_as_the_in_process_run(runs):
    (rep, s_rep), (inp, s_inp), (srv, s_srv) = runs["replayed"], runs["inproc"], runs["server"]
    # (a) every request, the same token counts: prompt (the server's usage.prompt_tokens of "hi hi ...")
    # and output (max_tokens, forced), request by request in trace order
    assert (rep["status"] == "completed").all() and (inp["status"] == "completed").all() and len(rep) == 30
    assert list(rep["request_id"]) == list(inp["request_id"])
    assert list(rep["output_tokens"]) == list(inp["generated_tokens"]) == list(inp["output_tokens"])
    assert list(rep["generated_tokens"]) == list(rep["token_arrivals"]) == list(rep["output_tokens"])
    assert list(rep["input_tokens"]) == list(inp["input_tokens"]) == list(rep["trace_input_tokens"])
    assert s_rep["completed"] == s_inp["completed"] == s_srv["completed"] == 30
    # (b) the server's own records of the same requests (its arrival order need not be the send order)
    assert len(srv) == 30 and (srv["status"] == "completed").all()
    assert sorted(srv["output_tokens"]) == sorted(rep["output_tokens"])
    assert sorted(srv["input_tokens"]) == sorted(rep["input_tokens"])
    assert s_srv["trace"].startswith("http://127.0.0.1:")
    # (c) the server computed each prompt once and each later token once, and predicted every step
    steps = runs["server_steps"]
    assert steps["prefill_tokens"].sum() == srv["input_tokens"].sum()
    assert steps["decode_seqs"].sum() == (srv["output_tokens"] - 1).sum()
    assert len(steps) > 0 and (steps["predicted_s"] > 0).all() and np.isfinite(steps["predicted_s"]).all()
    # (d) causality, not speed: a client's TTFT spans the server's TTFT of the same request (sent before the
    # server saw it, received after it emitted), so the sorted client TTFTs dominate the server's
    ttft_c, ttft_s = np.sort(rep["ttft_ms"].to_numpy()), np.sort(srv["ttft_ms"].to_numpy())
    assert np.isfinite(ttft_c).all() and np.isfinite(ttft_s).all() and (ttft_s > 0).all()
    assert (ttft_c >= ttft_s).all(), (ttft_c - ttft_s).min()


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
    t0 = time.perf_counter()  # clock: the app's time origin (rank 0's clock), as the launcher sets it
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
        now_s = time.perf_counter() - t0  # clock: an ordering (arrival stamped before now), no duration bound
        assert (n_in, n_out) == (3, 2) and 0 <= arrival_s <= now_s
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
