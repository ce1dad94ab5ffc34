"""Flying Serving's knobs (policy arguments of the same names) and published constants."""
from __future__ import annotations

import dataclasses

SWITCHING = ("sequential", "soft", "hard")
WIDTHS = (2, 4, 8)  # aligned contiguous groups (SYSTEMS.md 5)
LIVE_SWITCH_MS = 15.0  # TARGETS.md, Flying Serving: live switch with pre-built communicators
COLD_RESTART_S = 146.0  # TARGETS.md: cold restart into a new static TP, 146-292 s (low end)


@dataclasses.dataclass(frozen=True, slots=True)
class FlyingConfig:
    """Scheduler knobs (policy arguments of the same names)."""

    switching: str = "hard"
    switch_ms: float = LIVE_SWITCH_MS
    restart: str = "live"  # live: switch_ms per switch; cold: cold_restart_s (the static comparison)
    cold_restart_s: float = COLD_RESTART_S
    priority_tp: int = 0  # priority < this runs TP (lower = more urgent, as in vLLM)
    priority_width: int = 0  # units per priority group; 0 = the widest group below all units (half)
    low_load: int = 0  # in-flight requests below which new requests run TP; 0 = the number of units

    def __post_init__(self):
        if self.switching not in SWITCHING or self.restart not in ("live", "cold"):
            raise ValueError(f"switching={self.switching!r} (one of {', '.join(SWITCHING)}), "
                             f"restart={self.restart!r} (live or cold)")
        if self.switch_ms < 0 or self.cold_restart_s < 0 or self.low_load < 0 or self.priority_width < 0:
            raise ValueError(f"negative flying argument in {self}")

    @property
    def switch_s(self) -> float:
        return self.switch_ms / 1e3 if self.restart == "live" else self.cold_restart_s
