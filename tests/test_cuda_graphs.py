"""CUDA-graph capture sizes by framework, version, GPU and TP (perfmodel/graphs.py), as the frameworks' sources
list them, and the flags that set them (`simulate --cuda-graph-max-bs / --cuda-graph-padding`)."""
from __future__ import annotations

import dataclasses

import pytest

from perfmodel.batch import decode_batch
from perfmodel.cost import step_cost
from perfmodel.framework import framework_preset, graph_tokens, reserve_bytes_of, with_deployment
from perfmodel.graphs import capture_sizes, trtllm_sizes
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model

H100, H200 = load_hardware("h100"), load_hardware("h200")
TP1, TP8, DEP8 = ParallelLayout(tp=1), ParallelLayout(tp=8), ParallelLayout(dp=8, tp=1, ep=8)


def sizes(name, version=None, layout=TP1, hw=H200, **deploy):
    return capture_sizes(with_deployment(framework_preset(name, version), **deploy), layout, hw.hbm_bytes)


def test_sglang_from_053_captures_to_256_below_tp4_and_512_from_it():
    # server_args.py @ 0.5.9: H20/H200 and H100 (< 160 GiB): cuda_graph_max_bs 256 if tp < 4 else 512, the list
    # [1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, max + 1, 32) cut at the max
    small, big = sizes("sglang", "0.5.9", TP1), sizes("sglang", "0.5.9", TP8)
    assert small[:7] == (1, 2, 4, 8, 12, 16, 24) and small[-2:] == (248, 256) and len(small) == 36
    assert big[36:39] == (272, 288, 304) and big[-3:] == (480, 496, 512)
    assert sizes("sglang", "0.5.6", DEP8) == big  # attention DP over an EP group of 8: tp_size 8
    assert sizes("sglang", "0.5.9", TP1, H100) == small
    assert sizes("sglang", "0.5.9", TP8, cuda_graph_max_bs=64)[-3:] == (48, 56, 64)  # --cuda-graph-max-bs
    assert sizes("sglang", "0.5.9", TP8, cuda_graph_padding=False) == ()  # --disable-cuda-graph-padding


def test_sglang_051_captures_to_160_and_to_256_on_gpus_over_90_gib():
    # cuda_graph_runner.py get_batch_sizes_to_capture @ 0.5.1.post1: [1, 2, 4, 8] + range(16, 161, 8), + range(160,
    # 257, 8) above 90 GiB; no cuda_graph_max_bs default on GPUs of 35 GB or more
    h100 = sizes("sglang", None, TP8, H100)
    assert h100[:6] == (1, 2, 4, 8, 16, 24) and h100[-1] == 160 and 12 not in h100
    assert sizes("sglang", "0.5.2", TP1, H200)[-1] == 256
    assert sizes("sglang", None, TP1, H100, cuda_graph_max_bs=200)[-4:] == (152, 160, 176, 192)  # then every 16


def test_trtllm_pads_only_with_enable_padding():
    # TRT-LLM's CudaGraphConfig: enable_padding false by default (no step padded); with it, [1, 2, 4] + every 8 to
    # 128, powers of two from 256 below max_batch_size (default 128), and max_batch_size itself
    assert sizes("trtllm") == ()
    assert sizes("trtllm", cuda_graph_padding=True) == (1, 2, 4) + tuple(range(8, 129, 8))
    assert trtllm_sizes(1024)[-4:] == (128, 256, 512, 1024)
    assert trtllm_sizes(600)[-3:] == (128, 256, 600) and trtllm_sizes(48)[-2:] == (40, 48)
    assert sizes("trtllm", cuda_graph_padding=True, cuda_graph_max_bs=60)[-2:] == (56, 60)


def test_a_padded_decode_step_costs_its_captured_size():
    """SGLang 0.5.9 on 8 x H200: 300 decoders run the 304 graph; 0.5.1's list ends at 256, so it runs them as is."""
    spec = load_model("llama-3.1-70b")
    new, old = framework_preset("sglang", "0.5.9"), framework_preset("sglang", "0.5.1")
    assert graph_tokens(300, True, new, capture_sizes(new, TP8, H200.hbm_bytes)) == 304
    assert graph_tokens(300, True, old, capture_sizes(old, TP8, H200.hbm_bytes)) == 300
    padded, plain = (float(step_cost(spec, TP8, H200, decode_batch(300, 300_000), None, f).total_s) for f in (new, old))
    assert padded > plain  # the four padded rows' GEMM and communication work (the two are otherwise alike here)
    # 304 real decoders cost more still: their attention too (padding is paid by all but attention)
    assert float(step_cost(spec, TP8, H200, decode_batch(304, 304_000), None, old).total_s) > padded


def test_sglang_reserve_counts_the_deployments_graph_max():
    # server_args.py @ 0.5.9: reserved_mem += cuda_graph_max_bs * 2 (MB), the flag's value where one is given
    fw = framework_preset("sglang", "0.5.9")
    base = reserve_bytes_of(fw, 1, 1, H200.hbm_bytes)
    small = reserve_bytes_of(dataclasses.replace(fw, chunk_tokens=16384), 1, 1, H200.hbm_bytes)
    assert reserve_bytes_of(dataclasses.replace(fw, chunk_tokens=16384, cuda_graph_max_bs=64), 1, 1,
                            H200.hbm_bytes) == small - 2 * (256 - 64) * 2**20
    assert base <= small


def test_bad_graph_settings_are_one_line():
    with pytest.raises(ValueError, match="cuda_graph_max_bs=0 must be an integer >= 1"):
        with_deployment(framework_preset("sglang"), cuda_graph_max_bs=0)
    with pytest.raises(ValueError, match="graph_rule='sglang-0.5.9': one of"):  # (a rule no capture_sizes knows)
        dataclasses.replace(framework_preset("sglang"), graph_rule="sglang-0.5.9")


def test_simulate_flags_set_the_graphs_and_bad_ones_are_one_line(capsys):
    """`--cuda-graph-padding on` pads TRT-LLM's decode steps (slower TPOT, as many steps); a bad value exits 2."""
    import json

    from simulator.apps.cli import main

    base = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--policy", "tp", "--framework",
            "trtllm", "--trace", "synthetic:batch?n=5&input=300&output=40", "--format", "json"]

    def tpot(*argv):
        assert main([*base, *argv]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)["mean_tpot_ms"]
    assert tpot("--cuda-graph-padding", "on") > tpot() == tpot("--cuda-graph-padding", "off")  # 5 decoders -> 8
    assert tpot("--cuda-graph-padding", "on", "--cuda-graph-max-bs", "5") == tpot()  # a graph of 5: no padding
    rc = main([*base, "--cuda-graph-max-bs", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "cuda_graph_max_bs=0" in err and err.count("\n") == 1, err


def test_vllm_captures_to_m_from_its_limits():
    """vLLM's _set_cudagraph_sizes: M = min(max_cudagraph_capture_size or min(2 x max_num_seqs, 512),
    max_num_batched_tokens); [1, 2, 4] + every 8 below min(M + 1, 256) + every 16 from 256 to M."""
    from perfmodel.framework import VLLM_CUDA_GRAPH_SIZES
    from perfmodel.graphs import vllm_capture_max, vllm_sizes

    listed = (1, 2, 4) + tuple(range(8, 256, 8)) + tuple(range(256, 513, 16))  # vllm.py:847-875 @ 0.11.2, M = 512
    assert vllm_sizes(512) == listed == VLLM_CUDA_GRAPH_SIZES and sizes("vllm") == listed
    assert vllm_capture_max(None, 1024, 8192) == 512 and vllm_capture_max(None, 4, 8192) == 8
    assert vllm_capture_max(2048, 4, 8192) == 2048 and vllm_capture_max(2048, 4, 1024) == 1024
    assert vllm_sizes(8) == (1, 2, 4, 8) and vllm_sizes(2048)[-3:] == (2016, 2032, 2048)
    assert sizes("vllm", cuda_graph_max_bs=64)[-2:] == (56, 64)


def test_a_vllm_engine_with_few_seats_pads_no_step_past_twice_its_seats():
    """--max-num-seqs 4: M = 8, so a mixed step of 40 tokens runs as is (it ran the 40 graph before: 512 list),
    and --cuda-graph-max-bs 2048 pads it again; both through the simulator's own limits."""
    from simulator.cluster.simulate import SimConfig, simulate
    from simulator.engine.config import EngineConfig
    from simulator.workload import make_workload
    import numpy as np

    w = make_workload({"arrival_s": np.zeros(3), "input_tokens": [13, 13, 13], "output_tokens": [3, 3, 3]})
    spec = load_model("llama-3.1-8b")

    def total(fw):
        res = simulate(w, spec, H100, SimConfig(policy="tp", gpus=1, engine=EngineConfig(max_num_seqs=4),
                                                framework=fw), None)
        return float(res.steps.frame()["duration_s"].sum())
    base = framework_preset("vllm")
    assert total(base) < total(with_deployment(base, cuda_graph_max_bs=2048))  # 39 tokens -> the 40 graph
