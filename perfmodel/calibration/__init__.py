"""Calibration: measurement readers, fits, calibrated profiles, validation (docs/calibration.md).

`load_profile(name_or_path)` / `default_profile(hw)` give the Profile that perfmodel.ops asks first;
importing this package stays light (numpy only): readers and fits load pandas when used.
"""
from .profile import Profile, default_profile, load_profile

__all__ = ["Profile", "default_profile", "load_profile"]
