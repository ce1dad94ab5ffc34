"""The serving front end's tokenization (simulator/cluster/frontend.py, Framework.tokenize_s_per_token):
hand-worked FIFO delays, TTFT counted from the client's send, the closed form agreeing, rejections at the
front end freeing closed-loop slots, the knob on the CLIs and the replay harness's per-benchmark choice."""
import json

import numpy as np
import pytest
from test_sim_util import assert_same_requests, hardware, model, run, workload

from perfmodel.cli import main as perfmodel_main
from perfmodel.deploy import deployment
from perfmodel.estimate import ttft_s
from perfmodel.framework import DEFAULT_FRAMEWORK, FRAMEWORKS, TOKENIZE_S_PER_TOKEN, vllm_default_limits, with_knobs
from simulator.apps.cli import main
from simulator.run import RunSpec

C = 2e-6  # seconds per prompt token in these hand-worked cases (measured presets are 1.5 / 3 us)


def test_a_lone_request_reaches_its_engine_after_its_tokenization():
    """1000 tokens on an idle engine: scheduled 1000 C after it was sent, TTFT longer by exactly that."""
    w = workload([0.0], [1000], [20])
    plain = run(w).requests.frame().iloc[0]
    front = run(w, tokenize_s_per_token=C).requests.frame().iloc[0]
    assert front["issued_s"] == front["arrival_s"] == plain["scheduled_s"]  # the client's send: TTFT's start
    assert front["scheduled_s"] == pytest.approx(front["arrival_s"] + 1000 * C, abs=1e-12)
    assert front["ttft_ms"] - plain["ttft_ms"] == pytest.approx(1e3 * 1000 * C, rel=1e-9)
    assert front["tpot_ms"] == pytest.approx(plain["tpot_ms"], rel=1e-12)  # decode is not the front end's


def test_prompts_sent_together_are_tokenized_one_after_another():
    """Three prompts at t = 0 of 3000, 1000, 2000 tokens: the tokenizer thread frees at 3000 C, 4000 C and
    6000 C (FIFO, in send order); the first is admitted the moment it is tokenized, the others no earlier
    than theirs. Far-apart arrivals never wait for each other."""
    ins = [3000, 1000, 2000]
    f = run(workload([0.0] * 3, ins, [5] * 3), tokenize_s_per_token=C).requests.frame()
    ready = C * np.cumsum(ins)
    assert f["scheduled_s"].iloc[0] == pytest.approx(ready[0], abs=1e-12)
    assert (f["scheduled_s"].to_numpy() >= ready - 1e-12).all()
    assert (f["issued_s"] == 0.0).all()
    apart = run(workload([0.0, 5.0, 10.0], ins, [5] * 3), tokenize_s_per_token=C).requests.frame()
    np.testing.assert_allclose(apart["scheduled_s"] - apart["arrival_s"], C * np.asarray(ins), atol=1e-12)


def test_no_tokenization_is_the_engine_alone_and_runs_repeat():
    w = workload(np.cumsum(np.full(40, 0.02)), np.full(40, 700), np.full(40, 30))
    assert_same_requests(run(w), run(w, tokenize_s_per_token=0.0), rel=0.0)
    a, b = run(w, tokenize_s_per_token=C), run(w, tokenize_s_per_token=C)
    assert_same_requests(a, b, rel=0.0)  # deterministic
    both = run(w, tokenize_s_per_token=C, engine=dict(fast_forward=False))
    assert_same_requests(a, both)  # fast-forward and step by step agree with the front end too


def test_the_closed_form_adds_the_same_tokenization():
    spec, hw = model(), hardware()
    dep = deployment("tp", spec, hw, 1)
    lim = vllm_default_limits(hw)
    fw0 = with_knobs(DEFAULT_FRAMEWORK, tokenize_us_per_token=0)
    fw = with_knobs(DEFAULT_FRAMEWORK, tokenize_us_per_token=C * 1e6)
    assert ttft_s(dep, spec, hw, 5000, lim, fw=fw) - ttft_s(dep, spec, hw, 5000, lim, fw=fw0) == pytest.approx(
        fw.tokenize_batch_wait_s + 5000 * C)


def test_a_request_the_admission_cap_turns_away_after_tokenization_frees_its_slot():
    """Closed loop of 3 clients, admission cap of 1 waiting request: requests tokenized while one already
    waits are rejected there, and each rejection hands the client's slot on (every request ends, the
    loop keeps 3 in flight)."""
    w = workload(np.zeros(30), np.full(30, 2000), np.full(30, 40))
    f = run(w, tokenize_s_per_token=C, max_concurrency=3, engine=dict(max_waiting=1)).requests.frame()
    assert set(f["status"]) == {"completed", "rejected"}
    assert (f["status"] == "rejected").sum() > 0
    assert f.loc[f["status"] == "rejected", "reject_reason"].str.startswith("admission cap").all()
    assert f["issued_s"].notna().all()  # every request was sent and ended one way or the other
    # hand-worked: the 3rd prompt is tokenized at 3 x 2000 C while the 2nd waits, so it is turned away then,
    # and its client sends the 4th at that very instant
    assert f["status"].iloc[2] == "rejected" and f["issued_s"].iloc[3] == pytest.approx(3 * 2000 * C, abs=1e-12)


def test_presets_carry_the_measured_cost_and_the_knob_reaches_the_runs(capsys):
    assert all(fw.tokenize_s_per_token == TOKENIZE_S_PER_TOKEN["text"] for fw in FRAMEWORKS.values())
    assert TOKENIZE_S_PER_TOKEN["random"] > TOKENIZE_S_PER_TOKEN["text"] > 0
    argv = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--policy", "tp", "--profile", "none",
            "--trace", "synthetic:poisson?n=20&rate=2&input=4000&output=16", "--format", "json"]
    assert main(argv) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*argv, "--tokenize-us-per-token", "0"]) == 0
    none = json.loads(capsys.readouterr().out)
    assert base["tokenize_us_per_token"] == 1e6 * TOKENIZE_S_PER_TOKEN["text"] and none["tokenize_us_per_token"] == 0
    # light load (a request every ~0.5 s): each waits out vLLM's 2 ms window, then its 4000 tokens
    assert base["mean_ttft_ms"] - none["mean_ttft_ms"] == pytest.approx(
        1e3 * (0.002 + 4000 * TOKENIZE_S_PER_TOKEN["text"]), rel=0.05)
    with pytest.raises(ValueError, match="tokenize_us_per_token=-1 must be a finite number >= 0"):
        RunSpec(tokenize_us_per_token=-1)
    assert main([*argv, "--tokenize-us-per-token", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "tokenize_us_per_token" in err
    est = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--strategies", "tp",
           "--profile", "none", "--input", "4000", "--output", "16", "--format", "json"]
    assert perfmodel_main(est) == 0
    e1 = json.loads(capsys.readouterr().out)[0]
    assert perfmodel_main([*est, "--tokenize-us-per-token", "0"]) == 0
    e0 = json.loads(capsys.readouterr().out)[0]
    assert e1["ttft_ms"] - e0["ttft_ms"] == pytest.approx(1e3 * (0.002 + 4000 * TOKENIZE_S_PER_TOKEN["text"]), rel=1e-9)
    assert e1["tokenize_us_per_token"] == 1e6 * TOKENIZE_S_PER_TOKEN["text"]


def test_the_replay_harness_tokenizes_each_benchmarks_own_prompt_text():
    """aiperf sends natural corpus text, benchmark_serving (InferenceX, sa-bench) random token ids."""
    from simulator.apps.validate.harness import PROMPT_TEXT, harness
    from simulator.apps.validate.rows import Case
    aic = Case(row=0, id="a", backend="trtllm", version="1.0.0rc3", model="meta-llama/Llama-3.1-8B-Instruct",
               hardware="h100", layout="tp=1", gpus=1, isl=1024, osl=128, concurrency=8, batch_size=8,
               weights="bf16", ttft_ms=1.0, tpot_ms=1.0)
    ix = Case(row=1, id="b", backend="vllm", version="0.18.0", model="openai/gpt-oss-120b", hardware="h100",
              layout="tp=2", gpus=2, isl=1024, osl=1024, concurrency=8, batch_size=8, weights="mxfp4",
              ttft_ms=1.0, tpot_ms=1.0)
    assert PROMPT_TEXT == {"aic": "text", "ix": "random", "srt": "random"}
    assert harness(aic).tokenize_s_per_token == TOKENIZE_S_PER_TOKEN["text"]
    assert harness(ix).tokenize_s_per_token == TOKENIZE_S_PER_TOKEN["random"]


def test_the_tokenizer_thread_is_a_fifo_server():
    """Deliveries at C x the running sum of prompts sent together; after an idle gap, from the send."""
    import simpy

    from simulator.cluster.frontend import Tokenizer
    env, got = simpy.Environment(), []
    tok = Tokenizer(env, C, lambda pos: got.append((pos, env.now)))

    def client():
        for pos, n in enumerate([3000, 1000, 2000]):
            tok.send(pos, n)
        yield env.timeout(1.0)
        tok.send(3, 500)

    env.process(client())
    env.run()
    assert [p for p, _ in got] == [0, 1, 2, 3]
    np.testing.assert_allclose([t for _, t in got], [3000 * C, 4000 * C, 6000 * C, 1.0 + 500 * C], rtol=1e-12)
    with pytest.raises(ValueError, match="tokenize_s_per_token"):
        Tokenizer(env, -1.0, print)


def test_vllm_micro_batches_wait_out_their_window():
    """vLLM's AsyncMicrobatchTokenizer (2 ms window, at most 32 prompts), hand-worked with C = 2 us/token:
    a lone 1000-token prompt reaches the engine at 2 ms + 2 ms; three prompts sent 0.5 ms apart share one
    window opened by the first (closing at 2 ms) and all reach it at 2 + 2 x (1000 + 500 + 1500) C; a
    batch of 32 sent at once does not wait for the window; a fourth prompt sent while the thread works
    opens the next window after it."""
    import simpy

    from simulator.cluster.frontend import Tokenizer

    def deliveries(sends, wait=0.002, max_batch=32):
        env, got = simpy.Environment(), {}
        tok = Tokenizer(env, C, lambda pos: got.setdefault(pos, env.now), wait, max_batch)

        def client():
            for pos, (t, n) in enumerate(sends):
                yield env.timeout(max(0.0, t - env.now))
                tok.send(pos, n)

        env.process(client())
        env.run()
        return [got[p] for p in range(len(sends))]

    assert deliveries([(0.0, 1000)]) == pytest.approx([0.002 + 1000 * C])
    assert deliveries([(0.0, 1000), (0.0005, 500), (0.001, 1500)]) == pytest.approx([0.002 + 3000 * C] * 3)
    assert deliveries([(0.0, 100)] * 32) == pytest.approx([3200 * C] * 32)
    t1 = 0.002 + 1000 * C  # the first batch ends; the prompt sent at 3 ms waits for it, then a window
    assert deliveries([(0.0, 1000), (0.003, 400)]) == pytest.approx([t1, t1 + 0.002 + 400 * C])
    # the closed form of a lone request says the same
    from perfmodel.estimate import frontend_s
    assert frontend_s(DEFAULT_FRAMEWORK, 1000) == pytest.approx(DEFAULT_FRAMEWORK.tokenize_batch_wait_s
                                                                + 1000 * DEFAULT_FRAMEWORK.tokenize_s_per_token)
    assert frontend_s(with_knobs(DEFAULT_FRAMEWORK, tokenize_us_per_token=0), 1000) == 0.0
    assert DEFAULT_FRAMEWORK.tokenize_batch_wait_s == 0.002 and DEFAULT_FRAMEWORK.tokenize_max_batch == 32
    assert FRAMEWORKS["sglang"].tokenize_batch_wait_s == FRAMEWORKS["trtllm"].tokenize_batch_wait_s == 0.0


@pytest.mark.parametrize("policy, gpus", [("tp", 2), ("dp", 2), ("shift", 2), ("flying", 2), ("seesaw", 2),
                                          ("disagg", 2), ("sidp", 2)])
def test_every_policy_counts_the_front_end_in_ttft(policy, gpus):
    """A lone request: every policy's TTFT is longer by exactly the front end's time (each engine kind and
    front door keeps the client's send time as the request's issue time)."""
    from simulator.run import run as sim_run
    from simulator.workload import make_workload
    wl = make_workload({"arrival_s": np.array([0.0]), "input_tokens": np.array([3000]),
                        "output_tokens": np.array([8])}, source="lone")
    setup = dict(policy=policy, gpus=gpus, model="llama-3.1-8b", hardware="h100", profile="none")
    on = sim_run(wl, RunSpec(**setup, tokenize_us_per_token=2.0)).requests.iloc[0]
    off = sim_run(wl, RunSpec(**setup, tokenize_us_per_token=0.0)).requests.iloc[0]
    assert on["status"] == off["status"] == "completed"
    front = DEFAULT_FRAMEWORK.tokenize_batch_wait_s + 3000 * 2e-6
    assert on["ttft_ms"] - off["ttft_ms"] == pytest.approx(1e3 * front, rel=1e-6)


def test_a_request_longer_than_the_model_is_refused_before_the_tokenizer():
    """prompt + max_tokens > max_model_len is refused when sent, at no tokenizer cost (issue 33: a bogus
    1e11-token row must not hold the front end for 150,000 s), and its closed-loop client sends the next
    one at that instant. (vLLM tokenizes first; the simulator does not charge what it then throws away.)"""
    w = workload(np.zeros(4), [1000, 9000, 1000, 1000], [10] * 4)
    f = run(w, tokenize_s_per_token=C, max_concurrency=1, engine=dict(max_model_len=4096)).requests.frame()
    assert f["status"].tolist() == ["completed", "rejected", "completed", "completed"]
    assert f["reject_reason"].iloc[1].startswith("context_length")
    # the 2nd is sent when the 1st finishes and turned away at once; the 3rd is sent then
    assert f["issued_s"].iloc[1] == f["finish_s"].iloc[0]
    assert f["issued_s"].iloc[2] == f["issued_s"].iloc[1]


def test_a_slow_front_end_caps_the_saturated_throughput():
    """At 50 us per prompt token the tokenizer passes 1 / (50 us x 4096) = 4.9 requests a second, fewer
    than 8 DP engines would serve: the estimate's saturated throughput is that rate x (I + O) tokens, and the
    simulated deployment under a flood of requests completes them no faster."""
    from perfmodel.estimate import estimate
    spec, hw = model(), hardware()
    fast = estimate("dp", spec, hw, 8, 4096, 64, fw=with_knobs(DEFAULT_FRAMEWORK, tokenize_us_per_token=0))
    slow = estimate("dp", spec, hw, 8, 4096, 64, fw=with_knobs(DEFAULT_FRAMEWORK, tokenize_us_per_token=50))
    cap = (4096 + 64) / (50e-6 * 4096)
    assert fast["throughput_tokens_per_s"] > 3 * cap
    assert slow["throughput_tokens_per_s"] == pytest.approx(cap, rel=1e-9)
    f = run(workload(np.zeros(60), np.full(60, 4096), np.full(60, 64)), gpus=8, policy="dp",
            tokenize_s_per_token=50e-6).requests.frame()
    rate = (len(f) - 1) / (f["scheduled_s"].max() - f["scheduled_s"].min())  # admissions follow the tokenizer
    assert rate == pytest.approx(1 / (50e-6 * 4096), rel=0.02)


def test_explain_names_the_front_end(capsys):
    est = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "1", "--strategies", "tp",
           "--profile", "none", "--input", "4096", "--output", "16", "--explain"]
    assert perfmodel_main(est) == 0
    out = capsys.readouterr().out
    assert "front end (in TTFT): 8.144 ms" in out and "measure_tokenizer.py" in out  # 2 ms + 4096 x 1.5 us
    assert perfmodel_main([*est, "--tokenize-us-per-token", "0"]) == 0
    assert "front end" not in capsys.readouterr().out


def test_the_tokenizer_measurement_script_refuses_a_missing_file_in_one_line(capsys, tmp_path):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "measure_tokenizer.py"
    spec = importlib.util.spec_from_file_location("measure_tokenizer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--tokenizer", str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "absent.json" in err


@pytest.mark.parametrize("max_batch", [0, 1, 3, 32])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 264])
def test_an_open_loop_fed_to_the_tokenizer_returns_what_sends_at_each_arrival_return(seed, max_batch):
    """Tokenizer.feed (no event per arrival, issue 36) delivers the same requests at the same instants, bit for
    bit and in the same order, as a send at each arrival time: bursts inside a window, full windows (a window
    closing early moves its return earlier than a lone prompt's), prompts queued while a batch is tokenized, idle
    gaps, simultaneous sends, send times on a 1 ms grid (even seeds; seed 264 needs a second wait to land on a
    send time) and requests refused before the front end (None, never delivered). max_batch 0: one at a time
    (SGLang's and TRT-LLM's tokenizer, no window)."""
    import simpy

    from simulator.cluster.frontend import Tokenizer
    from simulator.engine.stretch import delay_toward
    rng = np.random.default_rng(seed)
    n = 200
    gaps = rng.choice([0.0, 1e-4, 5e-4, 0.0015, 0.004, 0.03], n) * rng.uniform(0.5, 1.5, n)
    times = np.cumsum(np.round(gaps, 3) if seed % 2 == 0 else gaps).tolist()
    tokens = rng.integers(1, 3000, n).tolist()
    refused = set(rng.choice(n, 20, replace=False).tolist())
    sent = [None if p in refused else tokens[p] for p in range(n)]  # what the cluster answers (Tokenizer.feed)
    window = (0.002, max_batch) if max_batch else (0.0, 1)  # (batch_wait_s, max_batch)

    def eager():
        env, got = simpy.Environment(), []
        tok = Tokenizer(env, C, lambda pos: got.append((pos, env.now)), *window)

        def client():
            for pos, t in enumerate(times):
                while env.now < t:
                    yield env.timeout(delay_toward(env.now, t))
                if sent[pos] is not None:
                    tok.send(pos, tokens[pos])

        env.process(client())
        env.run()
        return got

    def fed():
        env, got, asked = simpy.Environment(), [], []
        tok = Tokenizer(env, C, lambda pos: got.append((pos, env.now)), *window)
        tok.feed(times, lambda pos: asked.append(pos) or sent[pos])
        env.run()
        assert asked == list(range(n))  # each request is taken in once, in order
        return got

    want = eager()
    assert len(want) == n - len(refused)
    assert fed() == want
