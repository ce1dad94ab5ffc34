"""Issue 33, finding 15: kernels.serve --http answers every bad /v1/completions body with a 400 and a
message naming the field (never a Python exception's text), and a spawned world's rendezvous listens
on loopback only."""
from __future__ import annotations

import asyncio
import json
import os
import types

import pytest

from kernels.serve.http_app import App, request_lengths

VOCAB = 128


class FakeRequest:
    """What App.completions reads of an aiohttp request: its JSON body (or the decode error)."""

    def __init__(self, body=None, raw: str | None = None):
        self.body, self.raw = body, raw

    async def json(self):
        return json.loads(self.raw) if self.raw is not None else self.body


def answer(body=None, raw=None) -> tuple[int, dict]:
    app = App(types.SimpleNamespace(model_name="tiny"), 64, 0.0, None, None, VOCAB)
    resp = asyncio.run(app.completions(FakeRequest(body, raw)))
    return resp.status, json.loads(resp.body)


@pytest.mark.parametrize("body,raw,words", [
    ([1, 2], None, "a JSON object, got a JSON array"),  # was: 'list' object has no attribute 'get'
    ("hi", None, "a JSON object, got a JSON string"),
    (None, "{not json", "not JSON"),
    ({"prompt": [1, VOCAB]}, None, f"token id {VOCAB} out of vocabulary [0, {VOCAB})"),  # was: 200
    ({"prompt": [-1, 2]}, None, "token id -1 out of vocabulary"),
    ({"prompt": "hi hi", "temperature": -3}, None, "temperature: a number >= 0, got -3"),  # was: 200
    ({"prompt": "hi hi", "temperature": "hot"}, None, "temperature: a number >= 0"),
    ({"prompt": "hi hi", "top_p": 0}, None, "top_p: a number in (0, 1]"),
    ({"prompt": "hi hi", "stream_options": [1]}, None, "stream_options: an object"),
    ({"prompt": "hi hi", "max_tokens": 0}, None, "max_tokens: a positive integer"),
])
def test_bad_bodies_are_400_with_a_clear_message(body, raw, words):
    status, out = answer(body, raw)
    assert status == 400 and words in out["error"]["message"]
    assert "object has no attribute" not in out["error"]["message"]


def test_good_body_passes_the_checks():
    assert request_lengths({"prompt": [0, VOCAB - 1], "max_tokens": 3, "temperature": 0.7, "top_p": 1},
                           "tiny", VOCAB) == (2, 3)
    assert request_lengths({"prompt": "hi hi hi", "temperature": 0}, "tiny", VOCAB) == (3, 16)


def _listening_sockets(rank, world_size):
    """(local address hex, port hex) of every TCP socket this rank listens on (/proc/net/tcp{,6})."""
    import torch.distributed as dist

    dist.barrier()
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    mine = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # state 0A: LISTEN
                mine.append(tuple(f[1].split(":")))
    dist.barrier()
    return mine


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net/tcp")
def test_spawned_world_listens_on_loopback_only():
    pytest.importorskip("torch")
    from kernels.dist import spawn

    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc writes them
    per_rank = spawn(_listening_sockets, 2, timeout_s=120, backend="gloo")
    assert per_rank[0], "rank 0 should hold the rendezvous store's listening socket"
    for rank, socks in enumerate(per_rank):
        assert {addr for addr, _ in socks} <= loopback, (rank, socks)  # was: the store on :: (every interface)
