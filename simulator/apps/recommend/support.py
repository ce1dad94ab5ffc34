"""Which serving framework can run which candidate: `simulate recommend --framework F` simulates and
recommends only what F can serve, so the command it prints is the deployment it simulated.

Sources (the flags simulator/apps/recommend/serve.py prints):
* TP / PP / DP: vLLM --tensor-/--pipeline-/--data-parallel-size; SGLang --tp / --pp-size / --dp;
  TRT-LLM --tp_size / --pp_size (DP: replicas behind a load balancer).
* EP: vLLM --enable-expert-parallel; SGLang --ep-size; TRT-LLM --ep_size.
* Ulysses SP and Shift Parallelism: only vLLM with Snowflake's ArcticInference plugin
  (snowflakedb/ArcticInference docs/shift-parallel.rst: --ulysses-sequence-parallel-size,
  --enable-shift-parallel); neither SGLang nor TRT-LLM has either.
* Disaggregated prefill/decode: vLLM NixlConnector, SGLang PD disaggregation, TRT-LLM disaggregated
  serving (the docs simulator/apps/recommend/serve.py names).
* Flying Serving, Seesaw, SiDP: research systems (papers and prototypes) with no flag in any of the
  three: RESEARCH. They are simulated only when asked for (`--research`), and marked
  "research: no <framework> command" then.
"""
from __future__ import annotations

from perfmodel.notes import FRAMEWORK_NAMES as NAMES

ALL = frozenset({"vllm", "sglang", "trtllm"})
RESEARCH = frozenset({"flying", "seesaw", "sidp"})
# policy (RunSpec.policy) -> the frameworks that serve it; static layouts also need SUPPORTS_SP for sp > 1
POLICY_FRAMEWORKS = {"layout": ALL, "disagg": ALL, "shift": frozenset({"vllm"}),
                     **{p: frozenset() for p in RESEARCH}}
SUPPORTS_SP = frozenset({"vllm"})  # Ulysses SP: the ArcticInference plugin of vLLM
WHY = {"shift": "Shift Parallelism runs only in vLLM with Snowflake's ArcticInference plugin",
       "sp": "Ulysses sequence parallelism (sp > 1) runs only in vLLM with Snowflake's ArcticInference plugin",
       "flying": "Flying Serving is a research prototype", "seesaw": "Seesaw is a research prototype",
       "sidp": "SiDP is a research prototype"}


def frameworks_of(policy: str, degrees: dict | None = None) -> frozenset:
    """The frameworks that can serve `policy` (with a static layout's `degrees`)."""
    fws = POLICY_FRAMEWORKS.get(policy, ALL)
    if (degrees or {}).get("sp", 1) > 1:
        fws = fws & SUPPORTS_SP
    return fws


def why_not(policy: str, degrees: dict | None, framework: str) -> str | None:
    """Why `framework` cannot serve this candidate (None: it can)."""
    if framework in frameworks_of(policy, degrees):
        return None
    if policy in RESEARCH:
        return f"research: no {NAMES.get(framework, framework)} command ({WHY[policy]})"
    key = "sp" if policy == "layout" else policy
    return f"not servable by {NAMES.get(framework, framework)}: {WHY.get(key, policy)}"


def keep(cands, framework: str, research: bool) -> tuple[list, list[tuple[str, str]]]:
    """(the candidates `framework` can serve, plus research policies when `research`; (label, reason)
    for the others)."""
    ok, dropped = [], []
    for c in cands:
        why = why_not(c.policy, dict(c.degrees), framework)
        if why is None or (research and c.policy in RESEARCH):
            ok.append(c)
        else:
            dropped.append((c.label, why + ("; --research simulates it" if c.policy in RESEARCH else "")))
    return ok, dropped
