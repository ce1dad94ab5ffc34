"""One call from (trace, model, hardware, policy) to the summary dict: what the dynamic-policy
tests, sweeps and benchmarks share (the CLI's run_one without argparse)."""
from __future__ import annotations

from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model

from simulator.cluster.simulate import SimConfig, simulate
from simulator.engine.config import EngineConfig
from simulator.results.metrics import summarize
from simulator.workload.synthetic import generate, parse_spec


def workload(spec_text: str):
    """A synthetic workload from a spec string, e.g. 'onoff?n=300&input=4096&output=250'."""
    return generate(parse_spec(spec_text if spec_text.startswith("synthetic:") else "synthetic:" + spec_text))


def run_summary(wl, policy: str, model: str = "llama-3.3-70b", hardware: str = "h200", gpus: int = 8,
                weights: str = "fp8", policy_args: dict | None = None, layout: str | None = None,
                engine: EngineConfig = EngineConfig(), prof=None, frames: bool = False):
    """Simulate `wl` under `policy`; the summary (and, with frames, the request and step frames)."""
    spec = load_model(model, weights=weights)
    hw = load_hardware(hardware)
    cfg = SimConfig(policy=policy, layout=layout, gpus=gpus, engine=engine,
                    policy_args=tuple((k, str(v)) for k, v in (policy_args or {}).items()))
    res = simulate(wl, spec, hw, cfg, prof)
    req, steps = res.requests.frame(), res.steps.frame()
    summ = summarize(req, steps, res.engines)
    summ["kv_capacity_tokens"] = sum(e["kv_capacity_tokens"] for e in res.engines)
    return (summ, req, steps) if frames else summ
