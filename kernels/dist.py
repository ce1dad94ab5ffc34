"""Process groups: gloo workers forked on CPU (tests, CI), NCCL under torchrun on GPUs.

`spawn(fn, world_size, *args)` runs fn(rank, world_size, *args) in fresh workers and returns
each rank's result; a worker's exception comes back as WorkerError with its traceback, and a
world that does not finish within `timeout_s` is killed (no test can hang).
"""
from __future__ import annotations

import datetime
import multiprocessing
import os
import pickle
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

from .comm import SOLO, Group

TIMEOUT = datetime.timedelta(seconds=60)  # every collective fails after this instead of hanging
_groups: dict = {}  # sorted rank tuple -> ProcessGroup, created once per process


class WorkerError(RuntimeError):
    """A spawned worker raised (message: its traceback) or the world timed out."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device() -> torch.device:
    """Under NCCL the GPU `init` selected (cuda:LOCAL_RANK under torchrun, cuda:rank when spawned: not
    LOCAL_RANK alone, which spawned workers lack), else cpu."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init(rank: int, world_size: int, port: int | None = None, backend: str | None = None) -> None:
    """Join the world: `backend`, by default NCCL when CUDA is present (torchrun env), gloo on CPU."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if not port:  # torchrun: its MASTER_ADDR / MASTER_PORT, the launcher's choice
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=TIMEOUT)
        return
    # a spawned world is one machine: nothing of it may listen beyond loopback. gloo's and NCCL's pair /
    # bootstrap sockets bind the interface these name (read from the environment of this worker process
    # only; the default is the hostname's address, often a public one)
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(backend, store=loopback_store(rank, world_size, port), rank=rank,
                            world_size=world_size, timeout=TIMEOUT)


def loopback_store(rank: int, world_size: int, port: int) -> dist.TCPStore:
    """The rendezvous store on 127.0.0.1:`port`. TCPStore binds its server to every interface (:: or
    0.0.0.0) whatever host it is given, so rank 0 binds a loopback socket and hands it over
    (master_listen_fd); an address in use raises OSError 'Address already in use' (spawn retries)."""
    if rank != 0:
        return dist.TCPStore("127.0.0.1", port, world_size, False, TIMEOUT)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(world_size)
    except OSError:
        sock.close()
        raise
    return dist.TCPStore("127.0.0.1", port, world_size, True, TIMEOUT, master_listen_fd=sock.detach())


def make_group(rank_lists, order=None) -> Group:
    """Create (once) every group in `rank_lists` on every rank, in the same order everywhere,
    and return this rank's Group (SOLO if it is in none). `order` maps a member list to its
    logical order (Shift's SP_TP order); default: as given."""
    me = dist.get_rank()
    mine = SOLO
    for ranks in rank_lists:
        ranks = tuple(int(r) for r in ranks)
        key = tuple(sorted(ranks))
        if len(key) > 1 and key not in _groups:
            _groups[key] = dist.new_group(list(key), timeout=TIMEOUT)
        if me in ranks:
            logical = tuple(order(ranks)) if order else ranks
            pg = _groups.get(key)
            mine = Group(logical, pg, logical.index(me)) if pg is not None else Group(logical, None, 0)
    return mine


def groups_created() -> int:
    """How many ProcessGroups this process has created (Flying's pool is built once)."""
    return len(_groups)


# ---- spawning a CPU world ------------------------------------------------------------------
def _worker(rank, world_size, port, out_dir, fn, args, backend=None):
    torch.set_num_threads(1)
    path = os.path.join(out_dir, f"rank{rank}.pkl")
    try:
        init(rank, world_size, port, backend)
        res = {"ok": fn(rank, world_size, *args)}
    except BaseException:
        res = {"error": f"rank {rank}:\n{traceback.format_exc()}"}
    with open(path, "wb") as f:
        pickle.dump(res, f)
    if "error" in res:
        os._exit(1)  # peers see the closed connection and fail fast instead of timing out
    dist.destroy_process_group()
    _groups.clear()


def spawn(fn, world_size: int, *args, timeout_s: float = 600.0, backend: str | None = None) -> list:
    """Run fn(rank, world_size, *args) on `world_size` workers; return [result per rank]. `backend`:
    "gloo" (CPU tensors), "nccl" (rank r on cuda:r), None: NCCL when CUDA is present, else gloo.
    A rendezvous port taken by another process between free_port() and bind is retried."""
    for attempt in range(3):
        try:
            return _spawn_once(fn, world_size, args, timeout_s, backend)
        except WorkerError as e:
            if attempt == 2 or "Address already in use" not in str(e):
                raise


def _spawn_once(fn, world_size: int, args, timeout_s: float, backend: str | None = None) -> list:
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "kernels.checks"])
    ctx = multiprocessing.get_context("forkserver")  # children fork from a process that imported torch once
    with tempfile.TemporaryDirectory() as out_dir:
        port = free_port()
        procs = [ctx.Process(target=_worker, args=(r, world_size, port, out_dir, fn, args, backend)) for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
            p.join()
        results, errors = [], []
        for r in range(world_size):
            try:
                with open(os.path.join(out_dir, f"rank{r}.pkl"), "rb") as f:
                    res = pickle.load(f)
            except FileNotFoundError:
                res = {"error": f"rank {r}: no result (exit code {procs[r].exitcode})"}
            results.append(res.get("ok"))
            if "error" in res:
                errors.append(res["error"])
    if alive:
        errors.insert(0, f"world of {world_size} timed out after {timeout_s:.0f} s")
    if errors:  # the crashing rank first, then peers that saw its connection close
        errors.sort(key=lambda e: "Connection closed" in e or "Connection reset" in e)
        raise WorkerError("\n".join(errors))
    return results
