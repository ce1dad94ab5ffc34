"""Paged KV cache, one engine step's batch and its context (positions, output rows).

A pool per layer holds `num_blocks` blocks of `block_numel` elements for K and for V. A
sequence's block holds `block_numel / (heads * head_dim)` tokens in HND order (heads, tokens,
head_dim), so a per-head slice of a block is contiguous (Seesaw's store copies) and sequences
stored with fewer heads per GPU get proportionally more tokens per block (Flying's KV adaptor).
"""
from __future__ import annotations

import dataclasses

import torch

from perfmodel.knobs import KV_BLOCK_TOKENS


@dataclasses.dataclass(frozen=True)
class TokenBatch:
    """One engine step: new tokens of each scheduled sequence, concatenated."""

    seq_ids: tuple
    lens: tuple  # new tokens per sequence
    tokens: torch.Tensor  # (n,) int64

    @property
    def num_tokens(self) -> int:
        return int(sum(self.lens))

    def subset(self, keep) -> "TokenBatch":
        """The sequences of this batch that are in `keep`, in batch order."""
        keep = set(keep)
        parts, ids, lens, start = [], [], [], 0
        for sid, n in zip(self.seq_ids, self.lens):
            if sid in keep:
                ids.append(sid), lens.append(n), parts.append(self.tokens[start:start + n])
            start += n
        tok = torch.cat(parts) if parts else self.tokens[:0]
        return TokenBatch(tuple(ids), tuple(lens), tok)


@dataclasses.dataclass
class Ctx:
    """What the attention core needs beyond its q, k, v: per-sequence offsets into the step's
    tokens, cached lengths, positions; and which rows the LM head produces (last_idx) for which
    sequences (out_ids). Mutable so that a strategy's hooks can re-target the output rows."""

    seq_ids: tuple
    lens: tuple
    cu: list  # token offset of each sequence in the step, plus the total
    pos0: list  # cached tokens of each sequence before this step
    positions: torch.Tensor  # (n,) absolute position of every new token
    last_idx: torch.Tensor  # (rows,) token index whose hidden state feeds the LM head
    out_ids: list  # sequence id of each real output row (pad rows follow, unnamed)
    cache: "KVCache"

    @property
    def n(self) -> int:
        return self.cu[-1]


def make_ctx(batch: TokenBatch, cache: "KVCache", device=None) -> Ctx:
    """Context of `batch` against the cached lengths in `cache`."""
    device = device or batch.tokens.device
    cu = [0]
    for n in batch.lens:
        cu.append(cu[-1] + n)
    pos0 = [cache.lengths.get(sid, 0) for sid in batch.seq_ids]
    pos = [p + i for p, n in zip(pos0, batch.lens) for i in range(n)]
    return Ctx(batch.seq_ids, batch.lens, cu, pos0, torch.tensor(pos, dtype=torch.long, device=device),
               torch.tensor([c - 1 for c in cu[1:]], dtype=torch.long, device=device),
               list(batch.seq_ids), cache)


class KVCache:
    """Paged K/V pools for the layers one GPU holds, with per-sequence block tables."""

    def __init__(self, layers, num_blocks: int, block_numel: int, dtype=torch.float32, device="cpu"):
        self.block_numel = block_numel
        self.k = {int(l): torch.zeros(num_blocks, block_numel, dtype=dtype, device=device) for l in layers}
        self.v = {int(l): torch.zeros(num_blocks, block_numel, dtype=dtype, device=device) for l in layers}
        self.free = list(range(num_blocks))
        self.tables: dict = {}  # sid -> [block ids]
        self.heads: dict = {}  # sid -> (kv heads per token on this GPU, head_dim)
        self.lengths: dict = {}  # sid -> cached tokens

    def block_tokens(self, sid) -> int:
        """Tokens per block of this sequence's layout."""
        heads, dh = self.heads[sid]
        return self.block_numel // (heads * dh)

    def reserve(self, sid, length: int, heads: int, head_dim: int) -> None:
        """Make room for `length` tokens of `sid` stored with `heads` KV heads per token."""
        if sid not in self.heads:
            if self.block_numel % (heads * head_dim):
                raise ValueError(f"block of {self.block_numel} elements does not hold whole tokens of "
                                 f"{heads} heads x {head_dim}")
            self.heads[sid], self.tables[sid] = (heads, head_dim), []
        elif self.heads[sid] != (heads, head_dim):
            raise ValueError(f"sequence {sid} is stored with {self.heads[sid]} (heads, head_dim), "
                             f"not {(heads, head_dim)}: a wrong head layout after a switch")
        need = -(-length // self.block_tokens(sid)) - len(self.tables[sid])
        if need > len(self.free):
            raise RuntimeError(f"KV cache full: sequence {sid} needs {need} blocks, {len(self.free)} free")
        self.tables[sid] += [self.free.pop(0) for _ in range(max(0, need))]

    def _pools(self, layer: int, sid):
        heads, dh = self.heads[sid]
        bt = self.block_tokens(sid)
        return (self.k[layer].view(-1, heads, bt, dh), self.v[layer].view(-1, heads, bt, dh), bt)

    def write(self, layer: int, sid, pos0: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v (t, heads, head_dim) of positions pos0.. of `sid`."""
        t, heads, dh = k.shape
        self.reserve(sid, pos0 + t, heads, dh)
        kp, vp, bt = self._pools(layer, sid)
        pos = torch.arange(pos0, pos0 + t, device=k.device)
        blk = torch.tensor(self.tables[sid], device=k.device)[pos // bt]
        kp[blk, :, pos % bt] = k  # (t, heads, dh) scattered into (block, heads, slot, dh)
        vp[blk, :, pos % bt] = v

    def read(self, layer: int, sid, length: int) -> tuple:
        """K, V of the first `length` tokens of `sid`: (heads, length, head_dim) each."""
        kp, vp, bt = self._pools(layer, sid)
        blk = torch.tensor(self.tables[sid], device=kp.device)
        heads, dh = self.heads[sid]

        def gather(p):  # (blocks, heads, bt, dh) -> (heads, blocks*bt, dh)
            return p[blk].transpose(0, 1).reshape(heads, -1, dh)[:, :length]
        return gather(kp), gather(vp)

    def commit(self, ctx: Ctx) -> None:
        """Advance the cached lengths by the step's new tokens."""
        for sid, p, n in zip(ctx.seq_ids, ctx.pos0, ctx.lens):
            self.lengths[sid] = p + n

    def release(self, sid) -> None:
        """Free a finished sequence's blocks."""
        self.free += self.tables.pop(sid, [])
        self.heads.pop(sid, None)
        self.lengths.pop(sid, None)


def make_cache(model, num_blocks: int = 64, block_tokens: int = KV_BLOCK_TOKENS) -> KVCache:
    """A cache for the layers `model` holds, blocks of `block_tokens` tokens of its KV heads
    (vLLM's block, as the simulator's; 64 blocks hold the request scripts' sequences)."""
    cores = [layer.attn.core for layer in model.layers]
    p = next(model.parameters())
    numel = block_tokens * cores[0].n_kv_heads * cores[0].head_dim
    return KVCache([c.layer_idx for c in cores], num_blocks, numel, p.dtype, p.device)


def run_step(model, cache: KVCache, batch: TokenBatch) -> dict:
    """One step of `model` on `batch`: {seq_id: logits (V,)} for the rows this rank produced."""
    ctx = make_ctx(batch, cache)
    logits = model(batch.tokens, ctx)  # (rows, V)
    cache.commit(ctx)
    return {sid: logits[i] for i, sid in enumerate(ctx.out_ids)}
