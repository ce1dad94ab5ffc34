"""Parsing `simulate --compare` items and `--policy-arg` values (what follows a policy after ':' is its
layout or its own knobs, told apart by the policy's knobs in simulator.policies.catalog)."""
from __future__ import annotations

import math
from typing import NamedTuple

from simulator.policies.catalog import KNOBS


class CompareItem(NamedTuple):
    """One --compare item: its policy, its layout (None: the policy's own) and its own arguments."""

    policy: str
    layout: str | None
    args: tuple

LAYOUT_KEYS = ("tp", "pp", "sp", "dp", "ep")  # in a --compare item, these keys build the layout (unless the
# policy takes the key as its own knob: sidp's tp and dp)


def policy_args_of(items) -> tuple:
    """--policy-arg KEY=VALUE strings -> ((key, value), ...); ValueError naming a malformed one."""
    out = []
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise ValueError(f"--policy-arg {it!r}: expected KEY=VALUE")
        out.append((k.strip(), v.strip()))
    return tuple(out)


def _split_outside_parens(text: str) -> list[str]:
    """Split on commas outside parentheses: disagg's pools keep theirs, prefill=2x(tp=2,pp=2)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth <= 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return parts + ["".join(cur)]


def compare_items(text: str) -> list[CompareItem]:
    """--compare 'tp,layout:tp=2,pp=4,shift:threshold=128' -> [('tp', None, ()), ('layout', 'tp=2,pp=4', ()),
    ('shift', None, (('threshold', '128'),))]: what follows a policy after ':' (a comma list, so it takes
    the '=' tokens after it) is its own: keys the policy takes as knobs are its arguments (sidp's tp, dp
    included), the other layout keys (tp, pp, sp, dp, ep) its layout."""
    items: list[list] = []
    for tok in filter(None, (t.strip() for t in _split_outside_parens(text))):
        if "=" in tok and ":" not in tok:
            if not items or items[-1][1] is None:
                raise ValueError(f"--compare {text!r}: {tok!r} is not a policy; a layout or knob follows its "
                                 "policy, e.g. --compare tp,layout:tp=2,pp=4,shift:threshold=128")
            items[-1][1].append(tok)
        else:
            policy, sep, rest = tok.partition(":")
            items.append([policy.strip(), ([rest.strip()] if rest.strip() else []) if sep else None])
    out = []
    for policy, parts in items:
        knobs = {k.name for k in KNOBS.get(policy, ())}
        layout, args = [], []
        for part in parts or ():
            k, sep, v = part.partition("=")
            k = k.strip()
            if not sep or not k:
                raise ValueError(f"--compare {text!r}: {part!r} after {policy}: expected KEY=VALUE")
            if k in knobs:
                args.append((k, v.strip()))
            elif k in LAYOUT_KEYS:
                layout.append(f"{k}={v.strip()}")
            elif policy in KNOBS:
                raise ValueError(f"--compare {text!r}: {policy} takes no {k!r}: its knobs are "
                                 f"{', '.join(sorted(knobs)) or 'none'}, layout keys {', '.join(LAYOUT_KEYS)}")
            else:  # an unknown policy: the run names it
                args.append((k, v.strip()))
        if policy == "layout" and not layout:
            raise ValueError(f"--compare {text!r}: 'layout' needs its layout, e.g. layout:tp=2,pp=4")
        out.append(CompareItem(policy, ",".join(layout) or None, tuple(args)))
    return out


def item_label(policy: str, layout: str | None, args: tuple = ()) -> str:
    """A --compare item's label: 'shift:threshold=128', 'layout:tp=2,pp=4', 'tp'."""
    rest = ([layout] if layout else []) + [f"{k}={v}" for k, v in args]
    return f"{policy}:{','.join(rest)}" if rest else policy


def compare_policy_args(items: list[tuple], given: tuple) -> list[tuple]:
    """Each --compare item's arguments: --policy-arg knobs that its policy takes, then its own (which win).
    A --policy-arg knob that no compared policy takes is an error naming it."""
    for k, _ in given:
        if not any(k in {n.name for n in KNOBS.get(it.policy, ())} or it.policy not in KNOBS for it in items):
            raise ValueError(f"--policy-arg {k}: none of the compared policies ({', '.join(it.policy for it in items)}) "
                             "takes it (`simulate policies` lists each one's knobs)")
    out = []
    for it in items:
        takes = {n.name for n in KNOBS.get(it.policy, ())}
        mine = dict((k, v) for k, v in given if k in takes or it.policy not in KNOBS)
        mine.update(it.args)
        out.append(tuple(mine.items()))
    return out


def check_flags(args) -> None:
    """Flags that are wrong together or out of range, refused before any work (ValueError, one line)."""
    if not (math.isfinite(args.window_s) and args.window_s > 0):  # a 0 s window divides by ~0: rates of 1e9
        raise ValueError(f"--window-s {args.window_s:g} must be a number of seconds > 0")
    if args.compare and args.policy is not None:  # it would be ignored: --compare names every policy run
        raise ValueError(f"--policy {args.policy} with --compare: --compare names the policies to run; add "
                         f"{args.policy} to it (--compare {args.compare},{args.policy}) or drop --compare")
