"""Absorbed-MLA decode kernels the mla suite times, imported from whichever framework the node has, in this order:
vLLM's FlashMLA ops (its default MLA decode on Hopper), the FlashMLA package (deepseek-ai/FlashMLA), FlashInfer's
BatchMLAPagedAttentionWrapper (SGLang's MLA decode); plus a float64 reference for the correctness check.

DeepSeek-V3's latent: one key = kv_lora_rank 512 + rope 64 = 576 elements shared by every query head; a query is
576 wide (q_nope absorbed into the latent space, then q_pe), the output 512 (V = the latent's first 512). Cache:
pages of PAGE keys, (pages, PAGE, 1, 576), each sequence's pages in a random order (what a paged cache holds
after a while). FlashMLA's interface changed in 2025 (get_mla_metadata returns a scheduler object); the call
below is the one both the old and the new interface take.
"""
from __future__ import annotations

import dataclasses
import importlib
import math

import torch

from .env import dist_version

LATENT, ROPE = 512, 64  # DeepSeek-V3's kv_lora_rank and qk_rope_head_dim: 576 elements a key
PAGE = 64  # keys per cache page (FlashMLA's page block size)
SCALE = (128 + 64) ** -0.5  # softmax scale: 1/sqrt(qk_nope + qk_rope head dim), as DeepSeek-V3 attends
TORCH_KV = {"bfloat16": torch.bfloat16, "fp8": getattr(torch, "float8_e4m3fn", None)}


@dataclasses.dataclass(frozen=True)
class Backend:
    """One importable MLA decode kernel: its kernel_source name, the framework (file name) and version, and
    make(seqlens (b,) int32, block_table (b, pages) int32, heads, kv_dtype) -> fn(q, cache) -> (b, 1, h, 512)."""

    name: str
    framework: str
    version: str
    make: object
    kv_dtypes: tuple = ("bfloat16",)


def _flashmla_make(m):
    def make(seqlens, block_table, heads, kv_dtype):
        meta, splits = m.get_mla_metadata(seqlens, heads, 1)  # one latent "KV head": s_q * h_q / h_kv = heads

        def op(q, cache):  # q (b, 1, h, 576), cache (pages, PAGE, 1, 576) -> (b, 1, h, 512)
            out, _ = m.flash_mla_with_kvcache(q, cache, block_table, seqlens, LATENT, meta, splits,
                                              softmax_scale=SCALE, causal=True)
            return out
        return op
    return make


def _flashinfer_make(mla):
    def make(seqlens, block_table, heads, kv_dtype):
        b, pages = block_table.shape
        dev = block_table.device
        wrapper = mla.BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=dev))
        wrapper.plan(torch.arange(b + 1, dtype=torch.int32, device=dev),  # one query per sequence
                     torch.arange(b + 1, dtype=torch.int32, device=dev) * pages, block_table.reshape(-1),
                     seqlens, heads, LATENT, ROPE, PAGE, False, SCALE, torch.bfloat16, TORCH_KV[kv_dtype])

        def op(q, cache):  # views, no copies: q_nope | q_pe and ckv | kpe of the 576-wide rows
            qq, c = q[:, 0], cache[:, :, 0]
            return wrapper.run(qq[..., :LATENT], qq[..., LATENT:], c[..., :LATENT], c[..., LATENT:]).unsqueeze(1)
        return op
    return make


def _vllm_flashmla() -> Backend | str:
    for path in ("vllm.v1.attention.ops.flashmla", "vllm.attention.ops.flashmla"):  # newer, older vLLM
        try:
            m = importlib.import_module(path)
        except ImportError:
            continue
        check = getattr(m, "is_flashmla_dense_supported", None) or getattr(m, "is_flashmla_supported", None)
        ok, why = check() if check else (True, None)
        return Backend("flashmla", "vllm", dist_version("vllm"), _flashmla_make(m)) if ok else f"vLLM FlashMLA: {why}"
    return "vLLM's FlashMLA ops do not import (vllm " + dist_version("vllm") + ")"


def _flash_mla() -> Backend | str:
    try:
        m = importlib.import_module("flash_mla")
    except ImportError as e:
        return f"flash_mla: {e}"
    return Backend("flashmla", "flash_mla", dist_version("flash_mla"), _flashmla_make(m))


def _flashinfer() -> Backend | str:
    try:
        mla = importlib.import_module("flashinfer.mla")
    except ImportError as e:
        return f"flashinfer: {e}"
    return Backend("flashinfer_mla", "flashinfer", dist_version("flashinfer-python"), _flashinfer_make(mla),
                   ("bfloat16", "fp8"))


PROBES = (_vllm_flashmla, _flash_mla, _flashinfer)


def backend(device: torch.device) -> Backend | str:
    """The first MLA decode kernel importable here, or why none is (the error row's text)."""
    if device.type != "cuda":
        return f"MLA decode needs a CUDA GPU with vLLM, FlashMLA or FlashInfer (device is {device.type})"
    return first_importable()


def first_importable() -> Backend | str:
    """The first of PROBES that imports and says it runs here, or every probe's reason."""
    why = []
    for probe in PROBES:
        try:
            found = probe()
        except Exception as e:  # noqa: BLE001 - a framework build that fails to import on this node
            found = f"{probe.__name__.strip('_')}: {type(e).__name__}: {e}"
        if isinstance(found, Backend):
            return found
        why.append(str(found).splitlines()[0] if str(found).strip() else probe.__name__)
    return "no MLA decode kernel importable: " + "; ".join(why)


def paged(batch: int, kv_len: int, sets: int, kv_dtype: str, device, gen) -> tuple:
    """(cache views, one per rotating set, each (pages, PAGE, 1, 576); block_table (batch, pages/seq) int32;
    seqlens (batch,) int32). Random N(0, 1) latents; every set's pages lie in one allocation."""
    per_seq = math.ceil(kv_len / PAGE)
    pages = batch * per_seq
    pool = torch.randn(sets * pages, PAGE, 1, LATENT + ROPE, device=device, generator=gen, dtype=torch.bfloat16)
    pool = pool.to(TORCH_KV[kv_dtype])
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(0)).to(torch.int32)
    table = order.view(batch, per_seq).to(device)
    seqlens = torch.full((batch,), kv_len, dtype=torch.int32, device=device)
    return [pool[i * pages:(i + 1) * pages] for i in range(sets)], table, seqlens


def reference(q, cache, block_table, kv_len: int, seq: int) -> torch.Tensor:
    """float64 (heads, 512) decode output of sequence `seq` on the CPU: softmax(q . K^T * SCALE) V, K = the
    576-wide latents, V their first 512."""
    idx = block_table[seq].long().to(cache.device)
    # fp8 pages are gathered through a uint8 view: index kernels need not exist for fp8
    raw = cache.view(torch.uint8)[idx].view(cache.dtype) if cache.element_size() == 1 else cache[idx]
    keys = raw.reshape(-1, LATENT + ROPE)[:kv_len].cpu().float().double()  # (kv_len, 576)
    qq = q[seq, 0].cpu().double()  # (h, 576)
    return torch.softmax(qq @ keys.t() * SCALE, dim=-1) @ keys[:, :LATENT]
