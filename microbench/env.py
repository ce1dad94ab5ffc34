"""Environment record of a run (devices, driver, CUDA, NCCL, torch; CPU model and threads) and NVML
telemetry (clocks, power, temperature) sampled by a thread during the run. nvidia-ml-py is imported
lazily and only on CUDA: on CPU nothing here needs it."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import threading

import numpy as np
import torch

from perfmodel.calibration.device import OTHER, device_preset

TOPOLOGY = {0: "same board", 10: "single PCIe switch", 20: "multiple PCIe switches", 30: "PCIe host bridge",
            40: "same NUMA node", 50: "across NUMA nodes (SMP interconnect)"}


def now() -> str:
    """ISO-8601 UTC timestamp (the rows' timestamp column)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    """torch.cuda.get_device_name, or the CPU model (the rows' device column)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def versions(device: torch.device) -> dict:
    """torch / CUDA / NCCL versions for the rows (CUDA and NCCL blank on CPU)."""
    nccl = ""
    if device.type == "cuda":
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - a build without NCCL
            nccl = ""
    return {"torch_version": torch.__version__,
            "cuda_version": (torch.version.cuda or "") if device.type == "cuda" else "", "nccl_version": nccl}


def dist_version(dist: str) -> str:
    """An installed distribution's version, read without importing it (vllm, flashinfer-python), or
    'not-installed' (the kernel tables' version column and file name)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


def hardware_preset(device: torch.device, name: str) -> str | None:
    """The perfmodel hardware preset for a device name ('cpu' on CPU); None when there is none."""
    if device.type != "cuda":
        return "cpu"
    # the name -> preset table calibrate checks measurement files with (one table for both)
    preset = device_preset(name)
    return None if preset in (OTHER, "cpu") else preset


def perf_model(preset: str | None, profile: str | None = None):
    """(Hardware, calibrated profile or None) for the predicted_us column; (None, None) without a preset."""
    if not preset:
        return None, None
    from perfmodel.hardware import load_hardware

    hw = load_hardware(preset)
    try:
        from perfmodel.calibration.profile import default_profile, load_profile
    except ImportError:  # calibration not installed: datasheet roofline
        return hw, None
    return hw, (load_profile(profile) if profile else default_profile(hw))


def _nvml():
    import pynvml  # nvidia-ml-py; lazy: CUDA runs only

    pynvml.nvmlInit()
    return pynvml


def _try(fn, *a, default=None):
    try:
        v = fn(*a)
        return v.decode() if isinstance(v, bytes) else v
    except Exception:  # noqa: BLE001 - NVML calls differ across drivers and GPU kinds
        return default


def nvml_static() -> dict:
    """Per-GPU NVML facts: name, bus id, max clocks, power limit, NVLink links up, pairwise topology
    and P2P status; {'error': ...} when NVML is unavailable."""
    try:
        nv = _nvml()
    except Exception as e:  # noqa: BLE001
        return {"error": f"nvml unavailable: {e}"}
    n = nv.nvmlDeviceGetCount()
    hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    gpus = []
    for i, h in enumerate(hs):
        links = [_try(nv.nvmlDeviceGetNvLinkState, h, li) for li in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))]
        gpus.append({"index": i, "name": _try(nv.nvmlDeviceGetName, h),
                     "pci_bus_id": _try(lambda: nv.nvmlDeviceGetPciInfo(h).busId),
                     "max_sm_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                     "max_mem_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
                     "power_limit_w": (_try(nv.nvmlDeviceGetEnforcedPowerLimit, h) or 0) / 1e3,
                     "nvlink_links_up": sum(1 for s in links if s == 1)})
    topo = {}
    for i in range(n):
        for j in range(i + 1, n):
            lvl = _try(nv.nvmlDeviceGetTopologyCommonAncestor, hs[i], hs[j])
            p2p = _try(nv.nvmlDeviceGetP2PStatus, hs[i], hs[j], getattr(nv, "NVML_P2P_CAPS_INDEX_NVLINK", 3))
            topo[f"{i}-{j}"] = {"topology": TOPOLOGY.get(lvl, lvl), "nvlink_p2p_ok": p2p == 0}
    return {"driver_version": _try(nv.nvmlSystemGetDriverVersion),
            "cuda_driver_version": _try(nv.nvmlSystemGetCudaDriverVersion_v2), "gpus": gpus, "pairs": topo}


def start_sampler(interval_s: float = 0.5):
    """Start a thread sampling every GPU's SM/memory clock, power, temperature and utilisation;
    returns stop() -> {gpu index: {metric: {min, median, max}}} ({} on CPU or without NVML)."""
    try:
        nv = _nvml()
        hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no NVML: nothing to sample
        return lambda: {}
    metrics = {"sm_clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
               "mem_clock_mhz": lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
               "power_w": lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1e3,
               "temperature_c": lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
               "util_pct": lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu}
    samples = {i: {k: [] for k in metrics} for i in range(len(hs))}
    reasons = {i: set() for i in range(len(hs))}  # clock event (throttle) reason bitmasks seen
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            for i, h in enumerate(hs):
                for k, f in metrics.items():
                    v = _try(f, h)
                    if v is not None:
                        samples[i][k].append(float(v))
                r = _try(getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", lambda h: None), h)
                if r is not None:
                    reasons[i].add(int(r))
            stop.wait(interval_s)

    th = threading.Thread(target=loop, name="nvml-sampler", daemon=True)
    th.start()

    def finish() -> dict:
        stop.set()
        th.join(timeout=5)
        return {i: {**{k: {"min": min(v), "median": float(np.median(v)), "max": max(v), "samples": len(v)}
                       for k, v in m.items() if v}, "clock_event_reasons": sorted(reasons[i])}
                for i, m in samples.items()}
    return finish


def environment(device: torch.device, world: int, threads: int) -> dict:
    """The run's environment record (written as JSON beside the CSV)."""
    rec = {"started": now(), "hostname": socket.gethostname(), "platform": platform.platform(),
           "python": platform.python_version(), "world_size": world, "device_type": device.type,
           "device": device_name(device), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
           "torch_threads_per_rank": threads, **versions(device)}
    try:
        import flash_attn

        rec["flash_attn_version"] = flash_attn.__version__
    except ImportError:
        rec["flash_attn_version"] = ""
    if device.type == "cuda":
        rec["device_count"] = torch.cuda.device_count()
        rec["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        rec["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        rec["peer_access"] = {f"{i}-{j}": torch.cuda.can_device_access_peer(i, j)
                              for i in range(torch.cuda.device_count())
                              for j in range(torch.cuda.device_count()) if i != j}
        rec["nvml"] = nvml_static()
    else:
        rec["device_count"] = world
    return rec



def _idle_policy() -> None:
    """In a spinner child before exec: the lowest scheduling class (never the parent's)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        os.nice(19)


def start_spinners(n: int):
    """Start `n` busy loops under SCHED_IDLE (they run only when nothing else wants a CPU) and return
    stop(). On a VM an idle vCPU halts and takes milliseconds to wake, which lands in gloo latencies;
    spinners keep the vCPUs running. Used for CPU collectives only."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_idle_policy)
             for _ in range(n)]

    def stop() -> None:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
    return stop


RT_LIMIT_US = 3_000_000  # a real-time thread that runs 3 s without blocking is killed (RLIMIT_RTTIME)


def limit_realtime() -> None:
    """Safety net before any real-time use: the kernel kills a real-time thread of this process that
    spins RT_LIMIT_US without a blocking call, so a bug can never starve the machine."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_RTTIME, (RT_LIMIT_US, RT_LIMIT_US))
    except (OSError, ValueError, AttributeError):
        pass


def set_realtime(on: bool, priority: int = 10) -> bool:
    """Put every thread of this process under SCHED_RR (on) or back to SCHED_OTHER (off). Used only
    around the timed samples of CPU collectives, which are wake-up latency bound: on a shared machine
    a woken gloo thread otherwise waits a scheduler slice (ms) behind other processes. The threads
    block between messages; RLIMIT_RTTIME (limit_realtime) kills one that does not. False where not
    permitted (no CAP_SYS_NICE)."""
    policy, param = (os.SCHED_RR, os.sched_param(priority)) if on else (os.SCHED_OTHER, os.sched_param(0))
    ok = True
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), policy, param)
        except (OSError, AttributeError):
            ok = False
    return ok
