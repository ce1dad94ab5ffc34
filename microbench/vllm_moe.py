"""vLLM's fused-MoE kernel as the moe suite calls it: `fused_experts` (vllm.model_executor.layers.fused_moe), the
Triton kernel vLLM runs for unquantised and block-fp8 MoE layers, with the weights, routing and expert map of
one GPU of a moe_tp x moe_ep group, plus a float64 reference of the same layer for the correctness check.

vLLM is imported only here, only when the suite runs on CUDA, and defensively: the call is built from
fused_experts' signature (vLLM >= 0.11 takes `quant_config=fp8_w8a8_moe_quant_config(...)`, older releases
`use_fp8_w8a8=True, w1_scale=..., block_shape=...`), so any release that has the function is timed or gives an
error row that says why. Layouts (vLLM's): w1 (E_loc, 2 I_loc, H) gate rows then up rows, w2 (E_loc, H, I_loc);
block fp8: e4m3 weights with one fp32 scale per 128 x 128 block, (E_loc, 2 I_loc / 128, H / 128) and
(E_loc, H / 128, I_loc / 128); activations are quantised by the kernel per token and 128 channels.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect

import torch

from .env import dist_version

KERNEL = "vllm_fused_experts"  # kernel_source column: the function timed (vLLM picks Triton or DeepGEMM inside)
BLOCK = 128  # block-fp8 quantisation block (DeepSeek-V3 / Qwen3-FP8 checkpoints: 128 x 128)
FP8_MAX = 448.0  # largest e4m3 value
# aiconfigurator moe_dtype -> block shape of the fp8 weights (None: bf16) of the formats timed here; nvfp4 and
# MXFP4 MoE run other vLLM kernels (CUTLASS / FlashInfer / Marlin) whose entry points change per release
QUANTS = {"bfloat16": None, "fp8_block": (BLOCK, BLOCK)}


def version() -> str:
    """The installed vLLM's version (read without importing it), or 'not-installed'."""
    return dist_version("vllm")


def fused_experts():
    """vLLM's fused_experts; ImportError where vLLM (or its Triton build) is missing."""
    from vllm.model_executor.layers.fused_moe import fused_experts as fn  # optional: only where vLLM is installed

    return fn


def unavailable(device: torch.device) -> str:
    """'' when vLLM's fused MoE can run on `device`, else why not (the error row's text)."""
    if device.type != "cuda":
        return f"fused MoE needs a CUDA GPU with vLLM installed (device is {device.type}): vLLM's kernels are Triton"
    try:
        fused_experts()
    except Exception as e:  # noqa: BLE001 - ImportError, or a vLLM build that fails to import on this node
        return f"vLLM's fused MoE does not import here (vllm {version()}): {type(e).__name__}: {e}".splitlines()[0]
    return ""


def config_context():
    """The context fused_experts is called in: vLLM >= 0.14's custom ops assert a current VllmConfig (its
    collector in aiconfigurator sets a default one the same way); a null context where vLLM has none."""
    try:
        from vllm.config import VllmConfig, set_current_vllm_config  # optional: vLLM >= 0.14

        return set_current_vllm_config(VllmConfig())
    except Exception:  # noqa: BLE001 - an older vLLM, or a VllmConfig that cannot be built without a model
        return contextlib.nullcontext()


def dtype_unsupported(dtype: str, device: torch.device) -> str:
    """'' when `dtype` (an aiconfigurator moe_dtype) is timed here on `device`, else why not."""
    if dtype not in QUANTS:
        return (f"unsupported moe_dtype {dtype!r}: microbench times {', '.join(QUANTS)} through vLLM's fused_experts "
                "(nvfp4 / MXFP4 MoE run other vLLM kernels, not measured yet)")
    if QUANTS[dtype] and device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return f"unsupported moe_dtype {dtype!r}: fp8 needs compute capability >= 8.9, device has {cap}"
    return ""


@dataclasses.dataclass(frozen=True)
class Experts:
    """One GPU's expert weights: w1 (E_loc, 2 I_loc, H), w2 (E_loc, H, I_loc); fp8 scales or None."""

    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None


def block_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 weights, fp32 scales (E, N/128, K/128)) of w (E, N, K), N and K multiples of 128; power-of-two scales
    (UE8M0, what DeepGEMM takes on Blackwell), one expert at a time (no fp32 copy of every expert at once)."""
    e, n, k = w.shape
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    scale = torch.empty(e, n // BLOCK, k // BLOCK, dtype=torch.float32, device=w.device)
    for i in range(e):
        b = w[i].float().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
        amax = b.abs().amax(dim=(1, 3)).clamp_min(1e-12)
        scale[i] = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
        q[i] = (b / scale[i][:, None, :, None]).to(torch.float8_e4m3fn).view(n, k)
    return q, scale


def make_experts(local_experts: int, hidden: int, inter_local: int, dtype: str, device, gen) -> Experts:
    """Random N(0, 1/fan-in) weights (activations stay O(1), as in a trained layer) in `dtype`'s format."""
    w1 = torch.randn(local_experts, 2 * inter_local, hidden, device=device, generator=gen, dtype=torch.bfloat16)
    w2 = torch.randn(local_experts, hidden, inter_local, device=device, generator=gen, dtype=torch.bfloat16)
    w1, w2 = w1.mul_(hidden ** -0.5), w2.mul_(inter_local ** -0.5)
    if QUANTS[dtype] is None:
        return Experts(w1, w2)
    (q1, s1), (q2, s2) = block_fp8(w1), block_fp8(w2)
    return Experts(q1, q2, s1, s2)


def expert_map(num_experts: int, ep: int, device) -> torch.Tensor | None:
    """(E,) int32 global -> local expert id on EP rank 0 (experts 0 .. E/ep - 1; -1 elsewhere), vLLM's linear
    placement (FusedMoE's determine_expert_map); None without EP."""
    if ep == 1:
        return None
    m = torch.full((num_experts,), -1, dtype=torch.int32)
    m[: num_experts // ep] = torch.arange(num_experts // ep, dtype=torch.int32)
    return m.to(device)


def make_op(num_experts: int, emap, block, experts: list):
    """fn(x (n, H) bf16, j, topk_weights (n, k) fp32, topk_ids (n, k) int32) -> (n, H) bf16: one call of
    fused_experts on weight set experts[j], with the arguments this vLLM release takes (read from its signature;
    built once per set, so the timed call does no more Python work than vLLM's own layer)."""
    fn = fused_experts()
    params = inspect.signature(fn).parameters
    anykw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    takes = lambda name: anykw or name in params  # noqa: E731
    kw = {k: v for k, v in (("inplace", False), ("global_num_experts", num_experts), ("expert_map", emap))
          if takes(k)}
    config = None
    if block and takes("quant_config"):
        from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config  # optional, vLLM >= 0.11

        config = fp8_w8a8_moe_quant_config
    elif block:
        kw.update(use_fp8_w8a8=True, block_shape=list(block))

    def scales(ex: Experts) -> dict:
        if config is not None:
            return {"quant_config": config(w1_scale=ex.w1_scale, w2_scale=ex.w2_scale, block_shape=list(block))}
        return {"w1_scale": ex.w1_scale, "w2_scale": ex.w2_scale} if block else {}

    args = [{**kw, **scales(ex)} for ex in experts]
    return lambda x, j, tw, ti: fn(x, experts[j].w1, experts[j].w2, tw, ti, **args[j])


def _dequant(w: torch.Tensor, scale) -> torch.Tensor:
    """float64 weights of one expert: w (N, K) times its block scales (N/128, K/128) where fp8."""
    w = w.double()
    if scale is None:
        return w
    return w * scale.double().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)


def reference(x, ex: Experts, tw, ti, emap, rows) -> torch.Tensor:
    """float64 (len(rows), H) of the layer for tokens `rows`, on the CPU: sum over the token's local experts of
    weight x down(silu(gate x) * up x); remote experts (emap -1) give nothing (vLLM writes zeros for them)."""
    inter = ex.w2.shape[2]
    out = torch.zeros(len(rows), ex.w1.shape[2], dtype=torch.float64)
    for r, t in enumerate(rows.tolist()):
        xt = x[t].cpu().double()
        for j, e in enumerate(ti[t].tolist()):
            le = e if emap is None else int(emap[e])
            if le < 0:
                continue
            s1 = None if ex.w1_scale is None else ex.w1_scale[le].cpu()
            s2 = None if ex.w2_scale is None else ex.w2_scale[le].cpu()
            h = _dequant(ex.w1[le].cpu(), s1) @ xt  # (2 I_loc,)
            act = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out[r] += float(tw[t, j]) * (_dequant(ex.w2[le].cpu(), s2) @ act)
    return out
