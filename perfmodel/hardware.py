"""Hardware presets: one TOML file per GPU in perfmodel/hardware/, every number with its source."""
from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HARDWARE_DIR = Path(__file__).parent / "hardware"
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv",
                  "custom_all_reduce")


@dataclasses.dataclass(frozen=True)
class Collective:
    """Alpha-beta parameters of one collective: t = alpha + bus_bytes / busbw."""

    alpha_us: float
    busbw_gbs: float


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One GPU kind and the node it sits in. Capacities in bytes, rates in GB/s and TFLOP/s."""

    name: str
    description: str
    hbm_bytes: float
    hbm_bw_gbs: float
    bf16_tflops: float
    fp8_tflops: float
    achieved_bf16_tflops: float
    achieved_fp8_tflops: float
    achieved_hbm_gbs: float
    gpus_per_node: int
    link_type: str
    link_bw_gbs: float  # per GPU per direction
    link_latency_us: float
    host_link: str
    h2d_bw_gbs: float
    host_mem_bytes: float
    collectives: dict  # op name -> Collective (defaults before calibration)
    profile: str = ""  # name of a calibrated profile in perfmodel/profiles/
    cuda_graphs: bool = True  # steps can run as captured CUDA graphs (False: a CPU; no graph padding)
    # host time the device waits on per layer and per collective call of a step (eager execution: a CPU
    # running the reference implementations); 0 on GPUs, where graphs and async launches hide it
    host_layer_s: float = 0.0
    host_collective_s: float = 0.0
    host_all_to_all_s: float = 0.0  # per all_to_all call where it differs from host_collective_s (0: the same)
    host_prefill_seq_s: float = 0.0  # per sequence with a prefill chunk in the step (admission, its first pass)
    host_step_s: float = 0.0  # per step, beyond the framework's step overhead (the reference loop's turn)
    # from a request's arrival at an idle engine to its first step's start (the serving loop's wake-up:
    # the reference loop kernels.serve broadcasts an empty plan first); 0 on GPUs (vLLM's engine core
    # blocks on its input socket and wakes within microseconds)
    host_wake_s: float = 0.0
    # inter-node network, per GPU per direction (one NIC per GPU on HGX/DGX nodes); 0: the preset has
    # none, so multi-node layouts are refused for it rather than costed on a made-up link
    nic_type: str = ""
    nic_bw_gbs: float = 0.0
    nic_latency_us: float = 0.0
    # 4-bit tensor cores (Blackwell's NVFP4 / MXFP4 MMA); 0: none, so 4-bit weights run weight-only (W4A16)
    fp4_tflops: float = 0.0
    achieved_fp4_tflops: float = 0.0
    # GPUs of one host (CPU, host memory, NICs' server) where that differs from the NVLink domain: GB200 /
    # GB300 NVL72 is one NVLink domain (gpus_per_node = 72, the model's node: collectives inside it run
    # on NVLink) built of 18 compute trays of 4 GPUs; 0: the node is one host
    gpus_per_host: int = 0
    aliases: tuple = ()
    sources: dict = dataclasses.field(default_factory=dict)  # field -> source text

    def __post_init__(self):
        for f in ("hbm_bytes", "hbm_bw_gbs", "bf16_tflops", "achieved_hbm_gbs", "link_bw_gbs"):
            if getattr(self, f) <= 0:
                raise ValueError(f"hardware {self.name}: {f}={getattr(self, f)} must be > 0")
        if self.gpus_per_node < 1:
            raise ValueError(f"hardware {self.name}: gpus_per_node={self.gpus_per_node} must be >= 1")
        if self.gpus_per_host and self.gpus_per_node % self.gpus_per_host:
            raise ValueError(f"hardware {self.name}: gpus_per_node={self.gpus_per_node} is not a whole number of "
                             f"hosts of gpus_per_host={self.gpus_per_host}")
        missing = [op for op in COLLECTIVE_OPS if op not in self.collectives]
        if missing:
            raise ValueError(f"hardware {self.name}: [collectives] lacks {', '.join(missing)}")

    def matmul_tflops(self, dtype: str) -> float:
        """Achieved dense matmul rate for a compute dtype (fp4 falls back to fp8, fp8 to bf16 where absent)."""
        if dtype == "fp4" and self.achieved_fp4_tflops > 0:
            return self.achieved_fp4_tflops
        if dtype in ("fp4", "fp8") and self.achieved_fp8_tflops > 0:
            return self.achieved_fp8_tflops
        return self.achieved_bf16_tflops

    def peak_tflops(self, dtype: str) -> float:
        if dtype == "fp4" and self.fp4_tflops > 0:
            return self.fp4_tflops
        if dtype in ("fp4", "fp8") and self.fp8_tflops > 0:
            return self.fp8_tflops
        return self.bf16_tflops

    @property
    def has_network(self) -> bool:
        """Whether the preset names an inter-node network (multi-node layouts need one)."""
        return self.nic_bw_gbs > 0

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops > 0

    @property
    def has_fp4(self) -> bool:
        return self.fp4_tflops > 0

    @property
    def hosts_per_node(self) -> int:
        """Hosts (CPU + host memory) of one node, the NVLink domain (18 for GB200 NVL72, else 1)."""
        return self.gpus_per_node // self.gpus_per_host if self.gpus_per_host else 1


# host time terms a preset may give in microseconds (`host_<term>_us = { value, source }`: Hardware's
# host_<term>_s; absent = 0, as on every GPU preset)
HOST_TERMS = ("layer", "collective", "all_to_all", "prefill_seq", "step", "wake")


def _value(raw: dict, key: str, path: Path, sources: dict) -> float:
    try:
        item = raw[key]
    except KeyError:
        raise ValueError(f"{path}: missing field {key!r}") from None
    if isinstance(item, dict):
        if "source" not in item:
            raise ValueError(f"{path}: field {key!r} has no source")
        sources[key] = item["source"]
        return item["value"]
    raise ValueError(f"{path}: field {key!r} must be {{ value = ..., source = \"...\" }}")


def _optional(raw: dict, key: str, path: Path, sources: dict, absent: float = 0.0) -> float:
    """A sourced field a preset may leave out (`absent`: what its absence means)."""
    return _value(raw, key, path, sources) if key in raw else absent


def load_hardware_file(path: Path) -> Hardware:
    raw = tomllib.loads(Path(path).read_text())
    src: dict = {}
    gb = 1e9
    coll_raw = raw.get("collectives", {})
    src["collectives"] = coll_raw.get("source", "")
    colls = {op: Collective(float(v["alpha_us"]), float(v["busbw_gbs"]))
             for op, v in coll_raw.items() if isinstance(v, dict)}
    return Hardware(
        name=raw["name"], description=raw.get("description", ""),
        hbm_bytes=_value(raw, "hbm_gb", path, src) * gb,
        hbm_bw_gbs=_value(raw, "hbm_bw_gbs", path, src),
        bf16_tflops=_value(raw, "bf16_tflops", path, src),
        fp8_tflops=_value(raw, "fp8_tflops", path, src),
        achieved_bf16_tflops=_value(raw, "achieved_bf16_tflops", path, src),
        achieved_fp8_tflops=_value(raw, "achieved_fp8_tflops", path, src),
        achieved_hbm_gbs=_value(raw, "achieved_hbm_gbs", path, src),
        gpus_per_node=int(_value(raw, "gpus_per_node", path, src)),
        link_type=raw.get("link_type", "nvswitch"),
        link_bw_gbs=_value(raw, "link_bw_gbs", path, src),
        link_latency_us=_value(raw, "link_latency_us", path, src),
        host_link=raw.get("host_link", ""),
        cuda_graphs=bool(raw.get("cuda_graphs", True)),
        **{f"host_{k}_s": _optional(raw, f"host_{k}_us", path, src) / 1e6
           for k in HOST_TERMS},
        h2d_bw_gbs=_value(raw, "h2d_bw_gbs", path, src),
        nic_type=raw.get("nic_type", ""),
        nic_bw_gbs=_optional(raw, "nic_bw_gbs", path, src),
        nic_latency_us=_optional(raw, "nic_latency_us", path, src),
        host_mem_bytes=_value(raw, "host_mem_gb", path, src) * gb,
        fp4_tflops=_optional(raw, "fp4_tflops", path, src),
        achieved_fp4_tflops=_optional(raw, "achieved_fp4_tflops", path, src),
        gpus_per_host=int(_optional(raw, "gpus_per_host", path, src)),
        collectives=colls, profile=raw.get("profile", ""),
        aliases=tuple(raw.get("aliases", ())), sources=src)


def hardware_names() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.toml"))


def _index() -> dict:
    """Preset name or alias (lower case, "_" for "-") -> its TOML file. Parsed once per state of the presets'
    folder (each file's path and modification time): every replay of `validate` looks its hardware up, and
    parsing all 13 presets each time took 4.2 s of the 967 H200 rows' 4.3 s setup (2026-12-02)."""
    return dict(_index_of(tuple(sorted((str(p), p.stat().st_mtime_ns) for p in HARDWARE_DIR.glob("*.toml")))))


@functools.lru_cache(maxsize=4)
def _index_of(files: tuple) -> tuple:
    """_index's (key, path) pairs for these (path, mtime_ns) files."""
    idx = {}
    for name, _ in files:
        p = Path(name)
        raw = tomllib.loads(p.read_text())
        for key in (p.stem, raw.get("name", p.stem), *raw.get("aliases", ())):
            idx[key.lower().replace("-", "_")] = p
    return tuple(idx.items())


def load_hardware(name_or_path: str) -> Hardware:
    """A preset name or alias (h100, h200, a100-80gb, a10, l4, cpu, ...) or a TOML path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return load_hardware_file(p)
    idx = _index()
    key = name_or_path.lower().replace("-", "_")
    if key not in idx:
        names = sorted({k for k in idx})
        raise ValueError(f"unknown hardware {name_or_path!r}: choose one of {', '.join(names)}")
    return load_hardware_file(idx[key])
