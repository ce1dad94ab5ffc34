"""One worker of a microbench run: join the process group, run the suites' cases in the same order on
every rank, and (rank 0) write each case's row as soon as it is measured."""
from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist

from . import env, writer
from .shapes import group_sizes, sweep
from .timing import cache_bytes

SUITES = ("gemm", "attention", "collectives", "memcpy", "moe", "mla")
LONG = datetime.timedelta(hours=24)  # how long ranks may wait while rank 0 times compute ops


@dataclasses.dataclass
class Ctx:
    """What a suite needs: the run's options and sweep, this rank's device, the perf model, groups."""

    args: object
    sweep: dict
    spec: object  # perfmodel ModelSpec of --model
    rank: int
    world: int
    device: torch.device
    backend: str  # collectives backend: nccl or gloo
    hw: object  # perfmodel Hardware for predicted_us (None: no preset for this device)
    prof: object  # calibrated profile or None
    common: dict  # device / version columns of every row
    ctrl: object  # gloo group over all ranks for barriers, agreement and gathering (--timeout-s)
    wait: object  # gloo group with a long timeout: ranks wait there while rank 0 times compute ops
    groups: dict  # group size -> process group of ranks 0..g-1
    local_world: int  # ranks per node: torchrun's LOCAL_WORLD_SIZE (node i holds ranks i*L..(i+1)*L-1), or
    # the spawned world (one node); group g of ranks 0..g-1 spans ceil(g / local_world) nodes
    cache: int  # last-level cache bytes (rotation target)
    max_bytes: int  # memory budget of one case's rotating inputs
    pool: dict = dataclasses.field(default_factory=dict)
    realtime: bool = False  # CPU collectives' timed samples run under SCHED_RR (where permitted)

    @property
    def single_backend(self) -> str:
        """backend column of single-device ops: cuda or cpu."""
        return self.device.type

    def barrier(self) -> None:
        dist.barrier(group=self.ctrl)

    def wait_for_rank0(self) -> None:
        dist.barrier(group=self.wait)

    def agree_max(self, xs: list) -> list:
        """Elementwise largest of `xs` over all ranks (same loop counts everywhere)."""
        t = torch.tensor([int(x) for x in xs], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.ctrl)
        return t.tolist()

    def gather(self, obj) -> list:
        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.ctrl)
        return out


def _suite(name: str):
    from .suites import attention, collectives, gemm, memcpy, mla, moe

    return {"gemm": gemm, "attention": attention, "collectives": collectives, "memcpy": memcpy, "moe": moe,
            "mla": mla}[name]


def _init(rank: int, world: int, port: int | None, args) -> tuple[torch.device, str]:
    timeout = datetime.timedelta(seconds=args.timeout_s)
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    url = f"tcp://127.0.0.1:{port}" if port else "env://"
    dist.init_process_group(backend, init_method=url, rank=rank, world_size=world, timeout=timeout)
    return device, backend


def _threads(args, device) -> int:
    """CPU: one core per rank by default (a rank is a 'device'); CUDA: torch's default."""
    if args.threads:
        torch.set_num_threads(args.threads)
    elif device.type == "cpu":
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", args.nproc or 1))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
    return torch.get_num_threads()


def local_world_size(world: int, torchrun: bool) -> int:
    """Ranks per node: LOCAL_WORLD_SIZE under torchrun (homogeneous --nproc-per-node, ranks node-major),
    else `world` (microbench spawned its workers on this one machine)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world)) if torchrun else world


def build_ctx(args, rank: int, world: int, device, backend, local_world: int | None = None) -> Ctx:
    from perfmodel.modelspec import load_model

    sw = sweep(device.type, args.quick, args.sweep)
    spec = load_model(args.model or sw["model"])
    name = env.device_name(device)
    preset = args.hardware or env.hardware_preset(device, name)
    hw, prof = env.perf_model(preset, args.profile)
    ctrl = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    wait = dist.new_group(backend="gloo", timeout=LONG)
    groups = {}
    for g in group_sizes(world):  # every rank creates every group, in the same order
        groups[g] = None if g == world else dist.new_group(list(range(g)), backend=backend)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        max_bytes = int(min(args.max_case_gb * 1e9, 0.25 * free))
    else:
        max_bytes = int(args.max_case_gb * 1e9)
    common = {"device": name, **env.versions(device)}
    return Ctx(args=args, sweep=sw, spec=spec, rank=rank, world=world, device=device, backend=backend,
               hw=hw, prof=prof, common=common, ctrl=ctrl, groups=groups, local_world=local_world or world,
               cache=cache_bytes(device) if args.cache_bytes is None else args.cache_bytes, max_bytes=max_bytes,
               wait=wait)


def _resume_state(ctx) -> set:
    """Keys to skip (rank 0 reads the CSV; every rank gets the same set)."""
    skip: set = set()
    if ctx.rank == 0 and ctx.args.resume:
        skip = writer.done_keys(ctx.args.out) | writer.table_done_keys(ctx.args.out)
        dead = writer.take_pending(ctx.args.out)
        if dead:  # the previous run died in this case: record it and do not try it again
            table = dead.pop("_table", None)  # a kernel-table case (moe / mla suites)
            dead["error"] = "run died during this case (crash, NCCL timeout or OOM kill); skipped on resume"
            dead["timestamp"] = env.now()
            for c in ("median_us", "p10_us", "p90_us", "achieved", "iterations", "latency", "p10_ms", "p90_ms"):
                dead.pop(c, None)
            if table:
                writer.write_table_row(ctx.args.out, table, dead)
                skip.add(writer.table_key(table, dead))
            else:
                writer.write_rows(ctx.args.out, [dead])
                skip.add(writer.row_key(dead))
    box = [skip]
    dist.broadcast_object_list(box, src=0, group=ctx.ctrl)
    return box[0]


def _measure(ctx, mod, case, row: dict) -> bool:
    """Fill `row` with the case's measurement or its error; True on success."""
    try:
        row.update(mod.run(ctx, case))
        return True
    except Exception as e:  # noqa: BLE001 - any failure becomes an error row; the suite goes on
        row["error"] = writer.error_text(e)
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
        return False


def run_cases(ctx, suites, skip: set) -> int:
    """Run every case of `suites` in the same order on every rank (rank-0 suites on rank 0 alone,
    the others waiting at the suite's end); returns the number of error rows written."""
    from tqdm import tqdm

    plan = [(name, _suite(name), case) for name in suites for case in _suite(name).cases(ctx)]
    bar = tqdm(total=len(plan), desc="microbench", unit="case", file=sys.stderr,
               disable=ctx.rank != 0 or ctx.args.no_progress, dynamic_ncols=True)
    errors, current, unspin, started = 0, None, None, set()
    try:
        for name, mod, case in plan:
            if name != current:
                if current and _suite(current).RANKS == "zero":
                    ctx.wait_for_rank0()  # the others waited here while rank 0 timed single-device ops
                if unspin:
                    unspin = unspin()
                ctx.pool.clear()  # the previous suite's rotating inputs (GPU memory)
                if name == "collectives" and ctx.device.type == "cpu" and ctx.args.isolate:
                    unspin = _isolate(ctx)
                current = name
                bar.set_description(f"microbench {name}")
            if mod.RANKS == "zero" and ctx.rank != 0:
                continue
            row = {**_common(ctx, mod.TABLE), **{k: v for k, v in case.items() if not k.startswith("_")}}
            if writer.is_done(row, skip, mod.TABLE):
                bar.update()
                continue
            if ctx.rank == 0:
                writer.mark_pending(ctx.args.out, row, mod.TABLE)
            errors += not _measure(ctx, mod, case, row)
            row["timestamp"] = env.now()
            if ctx.rank == 0 and mod.TABLE:  # moe / mla: aiconfigurator's columns, a file per table and version
                path = writer.table_path(ctx.args.out, mod.TABLE, row)
                writer.write_table_row(ctx.args.out, mod.TABLE, row, fresh=not ctx.args.resume and path not in started)
                started.add(path)
            elif ctx.rank == 0:
                writer.write_rows(ctx.args.out, [row])
            if ctx.rank == 0:
                writer.clear_pending(ctx.args.out)
            bar.update()
        if current and _suite(current).RANKS == "zero":
            ctx.wait_for_rank0()
    finally:
        if unspin:
            unspin()
        bar.close()
    return errors


def _common(ctx, table: str | None) -> dict:
    """The columns every row of a suite gets from the run: device and versions (a kernel table has no NCCL column)."""
    return {k: v for k, v in ctx.common.items() if k != "nccl_version"} if table else ctx.common


def _isolate(ctx):
    """CPU collectives: SCHED_IDLE spinners on every CPU (started by local rank 0); returns the undo."""
    return env.start_spinners(os.cpu_count() or 1) if _local_rank(ctx.rank) == 0 else (lambda: None)


def _local_rank(rank: int) -> int:
    return int(os.environ.get("LOCAL_RANK", rank))


def _raise_priority(args, by: int = -10) -> int:
    """CPU runs: nice the worker up (threads created later inherit it) so that other processes on a
    shared machine do not delay gloo wake-ups by a scheduler slice (ms); 0 where not permitted."""
    if args.device != "cpu" or not args.isolate:
        return 0
    env.limit_realtime()
    try:
        os.nice(by)
        return by
    except OSError:
        return 0


def worker(rank: int, world: int, port: int | None, args) -> None:
    """Entry of each rank (spawned by cli or started by torchrun)."""
    nice = _raise_priority(args)  # before the process group starts its threads: they inherit it
    device, backend = _init(rank, world, port, args)
    try:
        threads = _threads(args, device)
        ctx = build_ctx(args, rank, world, device, backend, local_world_size(world, torchrun=port is None))
        stop = env.start_sampler() if (device.type == "cuda" and _local_rank(rank) == 0) else (lambda: {})
        record = env.environment(device, world, threads) if rank == 0 else None
        skip = _resume_state(ctx)
        if rank == 0 and not args.resume:  # a fresh run starts a fresh file
            for p in (args.out, writer.pending_path(args.out)):
                if os.path.exists(p):
                    os.remove(p)
        ctx.barrier()
        errors = run_cases(ctx, args.suites, skip)
        telemetry = ctx.gather({"rank": rank, "host": socket.gethostname(), "nvml": stop()})
        if rank == 0:
            record.update(finished=env.now(), suites=list(args.suites), quick=bool(args.quick),
                          model=ctx.spec.name, hardware_preset=ctx.hw.name if ctx.hw else None,
                          profile=getattr(ctx.prof, "name", None), error_rows=errors, worker_nice=nice,
                          cache_bytes=ctx.cache,
                          collectives_realtime=ctx.realtime, local_world_size=ctx.local_world,
                          cpu_spinners=bool(device.type == "cpu" and args.isolate and "collectives" in args.suites),
                          telemetry=[t for t in telemetry if t["nvml"]], argv=list(args.argv or ()))
            writer.write_env(args.out, record, args.resume)
    finally:
        dist.destroy_process_group()
