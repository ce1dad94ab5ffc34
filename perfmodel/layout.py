"""ParallelLayout: degrees, rank grid and groups, shared by perfmodel, simulator and kernels.

The rank grid is one array reshaped to (dp, pp, sp, tp), tp fastest (picotron's topology):
global rank g = ((dp_i * pp + pp_i) * sp + sp_i) * tp + tp_i. Inside one SP x TP instance this
is SYSTEMS.md's g = sp_rank * TP + tp_rank (TP groups contiguous, SP groups strided).
EP groups are contiguous blocks of `ep` ranks inside one pipeline stage's (dp, sp, tp) ranks.
"""
from __future__ import annotations

import dataclasses

import numpy as np

GROUP_KINDS = ("tp", "sp", "pp", "dp", "ep", "instance")


class LayoutError(ValueError):
    """A layout that cannot run: the message names the numbers at fault."""


@dataclasses.dataclass(frozen=True, slots=True)
class ParallelLayout:
    """Degrees of tensor, pipeline, sequence (Ulysses), data and expert parallelism."""

    tp: int = 1
    pp: int = 1
    sp: int = 1
    dp: int = 1
    ep: int = 1

    def __post_init__(self):
        for f in ("tp", "pp", "sp", "dp", "ep"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise LayoutError(f"layout {f}={v!r} must be a positive integer")
        if (self.dp * self.sp * self.tp) % self.ep:
            raise LayoutError(f"ep={self.ep} must divide dp*sp*tp={self.dp * self.sp * self.tp} "
                              f"(expert groups live inside one pipeline stage)")

    # ---- sizes ------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.sp * self.dp

    @property
    def gpus_per_instance(self) -> int:
        """GPUs of one model replica (a DP rank): tp * pp * sp."""
        return self.tp * self.pp * self.sp

    def __str__(self) -> str:
        parts = [f"{k}={getattr(self, k)}" for k in ("dp", "tp", "pp", "sp", "ep") if getattr(self, k) > 1]
        return ",".join(parts) or "tp=1"

    @classmethod
    def parse(cls, text: str) -> "ParallelLayout":
        """'tp=2,pp=4' -> ParallelLayout(tp=2, pp=4). Unknown keys or bad numbers raise LayoutError."""
        kw = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in ("tp", "pp", "sp", "dp", "ep"):
                raise LayoutError(f"layout {text!r}: expected key=value with key in tp,pp,sp,dp,ep, got {part!r}")
            try:
                kw[key] = int(val)
            except ValueError:
                raise LayoutError(f"layout {text!r}: {key}={val!r} is not an integer") from None
        return cls(**kw)

    # ---- rank grid and groups ------------------------------------------------------------
    @property
    def grid(self) -> np.ndarray:
        """Global ranks as an int array of shape (dp, pp, sp, tp)."""
        return np.arange(self.world_size).reshape(self.dp, self.pp, self.sp, self.tp)

    def coords(self, rank: int) -> dict:
        """{'dp': i, 'pp': j, 'sp': k, 'tp': l, 'ep': m} of a global rank."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank {rank} outside world_size={self.world_size}")
        dp_i, pp_i, sp_i, tp_i = (int(x) for x in np.unravel_index(rank, self.grid.shape))
        in_stage = (dp_i * self.sp + sp_i) * self.tp + tp_i
        return {"dp": dp_i, "pp": pp_i, "sp": sp_i, "tp": tp_i, "ep": in_stage % self.ep}

    def groups(self, kind: str) -> list[list[int]]:
        """Rank lists of every group of one kind ('tp', 'sp', 'pp', 'dp', 'ep', 'instance')."""
        g = self.grid
        if kind == "tp":
            return g.reshape(-1, self.tp).tolist()
        if kind == "sp":
            return g.transpose(0, 1, 3, 2).reshape(-1, self.sp).tolist()
        if kind == "pp":
            return g.transpose(0, 2, 3, 1).reshape(-1, self.pp).tolist()
        if kind == "dp":
            return g.transpose(1, 2, 3, 0).reshape(-1, self.dp).tolist()
        if kind == "ep":
            return g.transpose(1, 0, 2, 3).reshape(self.pp, -1, self.ep).reshape(-1, self.ep).tolist()
        if kind == "instance":
            return g.reshape(self.dp, -1).tolist()
        raise LayoutError(f"unknown group kind {kind!r}: one of {', '.join(GROUP_KINDS)}")

    def shift_tp_order(self) -> list[int]:
        """Shift Parallelism's SP_TP order: the TP rank order of the shift config (TP = sp*tp)
        over one SP x TP instance, [s*TP + t for t in range(TP) for s in range(SP)], so that
        every GPU keeps the KV heads it owned in the base config (SYSTEMS.md section 2)."""
        return [s * self.tp + t for t in range(self.tp) for s in range(self.sp)]

    def head_block(self, sp_rank: int, tp_rank: int) -> int:
        """Index of the head block (of sp*tp blocks) that GPU (sp_rank, tp_rank) owns in attention."""
        return tp_rank * self.sp + sp_rank

    # ---- validation against a model and a node ------------------------------------------
    def kv_replication(self, num_kv_heads: int) -> int:
        """How many GPUs of one instance hold each KV head (1: no replication)."""
        shards = self.tp * self.sp
        return max(1, shards // num_kv_heads)

    def kv_heads_per_gpu(self, num_kv_heads: int) -> int:
        return max(1, num_kv_heads // (self.tp * self.sp))

    def sp_split(self, num_kv_heads: int) -> tuple[int, int]:
        """(SP_AA, SP_AG) of Algorithm 1: all-to-all group over KV heads, all-gather group that
        replicates each KV head, per TP shard. (sp, 1) when no replication is needed."""
        kv_per_tp = max(1, num_kv_heads // self.tp)
        if self.sp <= kv_per_tp:
            return self.sp, 1
        return kv_per_tp, self.sp // kv_per_tp

    def validate(self, spec=None, gpus: int | None = None) -> "ParallelLayout":
        """Raise LayoutError naming the numbers when this layout cannot run `spec` on `gpus`."""
        if gpus is not None and self.world_size > gpus:
            raise LayoutError(f"layout {self} needs tp*pp*sp*dp={self.world_size} GPUs but only {gpus} are given")
        if spec is None:
            return self
        h, hkv, shards = spec.num_heads, spec.num_kv_heads, self.tp * self.sp
        if self.sp > 1 and getattr(spec, "is_mla", False):
            raise LayoutError(f"{spec.name}: sp={self.sp} (Ulysses) over MLA attention (kv_lora_rank="
                              f"{spec.kv_lora_rank}) is not modelled: its all-to-alls would move per-head K/V, "
                              f"but the cache holds one latent per token; use tp or dp")
        if self.sp > 1 and getattr(spec, "num_linear_layers", 0):
            raise LayoutError(f"{spec.name}: sp={self.sp} (Ulysses) over its num_linear_layers="
                              f"{spec.num_linear_layers} linear-attention layers is not modelled (their recurrent "
                              f"state runs over the whole sequence); use tp or dp")
        if h % shards:
            raise LayoutError(f"{spec.name}: num_heads={h} is not divisible by tp*sp={shards} "
                              f"(tp={self.tp}, sp={self.sp})")
        if self.tp > hkv and self.tp % hkv:
            raise LayoutError(f"{spec.name}: tp={self.tp} exceeds num_kv_heads={hkv} and is not a multiple "
                              f"of it, so KV heads cannot be replicated evenly")
        if self.tp <= hkv and hkv % self.tp:
            raise LayoutError(f"{spec.name}: num_kv_heads={hkv} is not divisible by tp={self.tp}")
        kv_per_tp = max(1, hkv // self.tp)
        if self.sp > kv_per_tp and self.sp % kv_per_tp:
            raise LayoutError(f"{spec.name}: sp={self.sp} exceeds the {kv_per_tp} KV heads per TP shard and is "
                              f"not a multiple of it (KV replication needs SP = SP_AA x SP_AG)")
        if self.sp <= kv_per_tp and kv_per_tp % self.sp:
            raise LayoutError(f"{spec.name}: {kv_per_tp} KV heads per TP shard are not divisible by sp={self.sp}")
        if self.pp > spec.num_layers:
            raise LayoutError(f"{spec.name}: pp={self.pp} exceeds num_layers={spec.num_layers}")
        if self.ep > 1:
            if not spec.is_moe:
                raise LayoutError(f"{spec.name}: ep={self.ep} but the model has no experts")
            if self.ep > spec.num_experts:
                raise LayoutError(f"{spec.name}: ep={self.ep} exceeds num_experts={spec.num_experts}")
            # ep not dividing num_experts: ceil(E / ep) expert slots per rank, the spare ones redundant copies
            # of the busiest experts (expert_slots)
        return self

    def expert_slots(self, num_experts: int) -> int:
        """Expert slots of one EP rank: ceil(E / ep). Where ep does not divide E the ep * slots - E spare
        slots hold redundant copies of hot experts placed by expert-parallel load balancing, as the
        frameworks require for such layouts (TensorRT-LLM wide EP: moe_config.load_balancer.num_slots, a
        multiple of the EP size, e.g. 288 = 256 + 32 on 72 GPUs for DeepSeek-R1; vLLM
        --num-redundant-experts with --enable-eplb; SGLang --ep-num-redundant-experts); the load is then
        taken as balanced over the ep ranks."""
        return -(-num_experts // self.ep)

    def layers_per_stage(self, num_layers: int) -> list[int]:
        """Contiguous layer counts per pipeline stage (the first stages take the remainder)."""
        base, extra = divmod(num_layers, self.pp)
        return [base + (1 if i < extra else 0) for i in range(self.pp)]
