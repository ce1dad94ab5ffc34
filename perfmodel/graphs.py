"""CUDA-graph capture sizes: the batch sizes each serving framework captures, by its own rule and version.

A step that runs in a graph runs the graph of the smallest captured size >= its tokens and is costed at that
many tokens for everything but attention (perfmodel.framework.graph_tokens); a step above the largest size runs
eagerly, as is. `capture_sizes(fw, layout, hbm_bytes)` gives the sizes of one instance (Framework.graph_rule
says which rule; Framework.cuda_graph_max_bs and cuda_graph_padding are the deployment's flags):

  vllm          vllm/config/vllm.py _set_cudagraph_sizes, every step (piecewise graphs): [1, 2, 4] + every 8
                below min(M + 1, 256) + every 16 from 256 to M, M = min(max_cudagraph_capture_size or min(2 x
                max_num_seqs, 512), max_num_batched_tokens) (vllm_capture_max; :847-875 @ 0.11.2, :1034-1075 @
                0.12.0, :1333-1385 @ 0.18.0; docs/frameworks.md): `cuda_graph_max_bs` holds M (simulator.cluster.
                simulate sets it from the engine's limits), default 512;
  sglang-0.5.1  SGLang 0.5.1-0.5.2, decode steps only: [1, 2, 4, 8] + every 8 to 160, and every 8 from 160 to
                256 on GPUs over 90 GiB (model_executor/cuda_graph_runner.py get_batch_sizes_to_capture,
                :165-215 @ 0.5.1.post1, the same @ 0.5.2); `cuda_graph_max_bs` (--cuda-graph-max-bs) cuts it
                there, or extends it every 16 up to it; no default cut on GPUs of 35 GB or more (server_args.py);
  sglang-0.5.3  SGLang >= 0.5.3, decode steps only: ServerArgs._generate_cuda_graph_batch_sizes ([1, 2, 4, 8, 12]
                + every 8 to 256 + every 16 from 272 to 496 + every 32 from 512) up to cuda_graph_max_bs, by
                default 256 at tp < 4 and 512 from tp 4 on GPUs of 60-160 GiB (the table of sglang_defaults;
                server_args.py:1079-1106 and :930-1004 @ 0.5.9, the same @ 0.5.5-0.5.8 and @ 0.5.3-0.5.4 but
                for the speculative list, PyPI wheels);
  trtllm        TRT-LLM, generation-only steps: none unless `cuda_graph_config: enable_padding: true`
                (`cuda_graph_padding`; TRT-LLM's default is false: graphs run only at their exact sizes, which
                costs the same as running eagerly here), then CudaGraphConfig._generate_cuda_graph_batch_sizes
                (tensorrt_llm/llmapi/llm_args.py): [1, 2, 4] + every 8 to 128, the powers of two from 256
                below max_batch_size (default 128), and max_batch_size. Up to 128 every version seen agrees;
                some later ones add every 64 above 128 instead of the powers of two.

`--cuda-graph-padding off` runs graphs at their exact sizes only (SGLang's --disable-cuda-graph-padding, TRT-LLM's
default): no step is padded. Not modelled: SGLang's smaller list under speculative decoding, its capture of
max-running-requests where that is below the list's top, and the unit under speculative decoding: a verify pass
of n requests x (1 + d) rows is padded as n (1 + d) rows here (perfmodel.specdec.per_token_affine), where the
frameworks pad n to a captured batch and run that many x (1 + d) rows (a few rows' weight-bound work).
"""
from __future__ import annotations

GiB = 2**30
VLLM, SGLANG_OLD, SGLANG, TRTLLM = "vllm", "sglang-0.5.1", "sglang-0.5.3", "trtllm"
GRAPH_RULES = ("", VLLM, SGLANG_OLD, SGLANG, TRTLLM)  # "": Framework.cuda_graph_sizes as they are
TRTLLM_DEFAULT_MAX_BS = 128  # CudaGraphConfig: `max_batch_size = self.max_batch_size or 128`
VLLM_DEFAULT_M = 512  # min(2 x 1024 seqs, 512): vLLM's default seats on H100 / H200 (vllm_default_limits)


def vllm_sizes(m: int) -> tuple:
    """vLLM's capture sizes up to M (_set_cudagraph_sizes)."""
    bs = [1, 2, 4] + list(range(8, min(m + 1, 256), 8)) + list(range(256, m + 1, 16))
    return tuple(b for b in bs if b <= m)


def vllm_capture_max(capture_size: int | None, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's M: max_cudagraph_capture_size where given, else min(2 x max_num_seqs, 512), at most the step's tokens."""
    return min(capture_size or min(2 * max_num_seqs, VLLM_DEFAULT_M), max_num_batched_tokens)


def sglang_defaults(hbm_bytes: float, tp: int) -> tuple:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang >= 0.5.3 picks for a GPU of hbm_bytes at tp_size tp
    (ServerArgs._handle_gpu_memory_settings, server_args.py:935-992 @ 0.5.9; the same from 0.5.3)."""
    gib, small = hbm_bytes / GiB, tp < 4
    return ((2048, 8) if gib < 20 else (2048, 24 if small else 80) if gib < 35
            else (4096, 32 if small else 160) if gib < 60 else (8192, 256 if small else 512) if gib < 160
            else (16384, 512))


def sglang_sizes(max_bs: int) -> tuple:
    """SGLang >= 0.5.3's capture list up to max_bs (_generate_cuda_graph_batch_sizes, the padded case)."""
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    return tuple(b for b in bs if b <= max_bs)


def sglang_old_sizes(hbm_bytes: float, max_bs: int | None) -> tuple:
    """SGLang 0.5.1-0.5.2's capture list (get_batch_sizes_to_capture, the padded case)."""
    bs = [1, 2, 4, 8] + list(range(16, 161, 8)) + (list(range(160, 257, 8)) if hbm_bytes > 90 * GiB else [])
    if max_bs:
        bs = [b for b in bs if b <= max_bs]
        if max(bs) < max_bs:
            bs += list(range(max(bs), max_bs + 1, 16))
    return tuple(sorted(set(bs)))


def trtllm_sizes(max_bs: int) -> tuple:
    """TRT-LLM's padded capture list up to max_batch_size (_generate_cuda_graph_batch_sizes, enable_padding)."""
    bs = [1, 2, 4] + [8 * i for i in range(1, 17)]
    k = 8
    while 2 ** (k + 1) <= max_bs:  # 2**i for i in range(8, floor(log2(max_bs))): below max_bs, from 256
        bs.append(2**k)
        k += 1
    bs = sorted(b for b in bs if b <= max_bs)
    return tuple(bs if bs and bs[-1] == max_bs else bs + [max_bs])


def server_tp(layout) -> int:
    """The serving engine's tp_size for an instance: its TP (and SP) group, or the EP group its attention-DP
    ranks share (SGLang --tp 8 --dp 8 --enable-dp-attention is tp_size 8)."""
    return max(layout.tp * layout.sp, layout.ep)


def capture_sizes(fw, layout, hbm_bytes: float) -> tuple:
    """The CUDA-graph capture sizes of one `layout` instance of framework `fw` on a GPU of hbm_bytes (module
    docstring); () when nothing is padded."""
    rule, max_bs = fw.graph_rule, fw.cuda_graph_max_bs
    if not fw.cuda_graph_padding:
        return ()
    if rule == SGLANG:
        return sglang_sizes(max_bs or sglang_defaults(hbm_bytes, server_tp(layout))[1])
    if rule == SGLANG_OLD:
        return sglang_old_sizes(hbm_bytes, max_bs)
    if rule == TRTLLM:
        return trtllm_sizes(max_bs or TRTLLM_DEFAULT_MAX_BS)
    if rule == VLLM:
        return vllm_sizes(max_bs or VLLM_DEFAULT_M)
    sizes = fw.cuda_graph_sizes
    return tuple(s for s in sizes if s <= max_bs) if max_bs else sizes
