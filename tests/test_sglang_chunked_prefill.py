"""SGLang's chunked prefill on the run path (2026-12-02, found by a fast-vs-step-by-step fuzz over feature mixes).

A 0-output request (prefill only) whose prompt is being chunked, with a second request arriving at once, under
SGLang's prefill-first order and a 512-token chunk: the second request's prompt-only step left the chunked one
waiting, and since nothing advanced the running requests that step, its completion key (output 0: the clock)
counted it done with 1,024 of its 2,418 prompt tokens computed. Now the chunked prompt continues first, as SGLang's
scheduler does, and a prompt-only step reports no running request done."""
import dataclasses

import numpy as np
import pandas as pd

from simulator.engine.config import framework_engine
from simulator.results.invariants import check_run
from simulator.run import RunSpec, run
from simulator.workload.workload import Workload


def _run(fast: bool):
    w = Workload(pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 0.0], "input_tokens": [2418, 941],
                               "output_tokens": [0, 120], "priority": [0, 0]}))
    eng = dataclasses.replace(framework_engine("sglang"), max_num_batched_tokens=512, fast_forward=fast)
    return run(w, RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=2, framework="sglang", engine=eng))


def test_a_chunked_prefill_only_request_ends_after_its_whole_prompt():
    for fast in (True, False):
        r = _run(fast)
        assert check_run(r.result) == []
        steps, req = r.steps, r.requests
        assert steps["prefill_tokens"].sum() == 2418 + 941
        # request 0's five chunks (4 x 512 + 370) run first; request 1's first chunk shares the fifth step
        ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
        assert req["finish_s"].iloc[0] == ends[4] and steps["prefill_tokens"].iloc[:5].tolist() == [512.0] * 5
        assert np.isnan(req["first_token_s"].iloc[0]) and req["first_token_s"].iloc[1] > req["finish_s"].iloc[0]
