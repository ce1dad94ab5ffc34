"""Policies decide layouts and per-step modes; perfmodel decides every time and every byte.

A policy turns (model, hardware, GPUs, arguments, profile) into EnginePlans: for each engine, its
modes (name -> instance ParallelLayout), the rule picking a mode from a step's batched tokens, and
its KV capacity (perfmodel's memory plan). This registry is the one place names map to builders.
"""
from __future__ import annotations

from simulator.policies.base import EnginePlan, parse_args
from simulator.policies.disagg.policy import disagg_plans
from simulator.policies.flying.policy import flying_plans
from simulator.policies.seesaw.policy import seesaw_plans
from simulator.policies.shift import shift_plans
from simulator.policies.sidp.policy import sidp_plans
from simulator.policies.static import STATIC, static_plans

POLICIES = {**{p: static_plans for p in STATIC}, "shift": shift_plans, "sidp": sidp_plans,
            "flying": flying_plans, "seesaw": seesaw_plans, "disagg": disagg_plans}
LAYOUT_POLICIES = {"layout": "runs it", "shift": "reads it as its base", "sidp": "reads its tp"}  # take --layout

__all__ = ["POLICIES", "LAYOUT_POLICIES", "EnginePlan", "parse_args"]
