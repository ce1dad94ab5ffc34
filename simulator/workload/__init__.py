"""Workloads: read real traces (BurstGPT, Azure, Mooncake, ShareGPT lengths, canonical CSV) or
generate synthetic ones, transform them, and hand the simulator one validated Workload."""
from .canonical import read_canonical, write_csv
from .checks import ReadOptions
from .errors import TraceError, TraceWarning
from .generators import (batch_arrivals_s, empirical_lengths, gamma_arrivals_s, onoff_arrivals_s,
                         poisson_arrivals_s, priority_mix, uniform_lengths)
from .files import bundled_traces, bundled_traces_dir, resolve_trace_path
from .load import load_trace
from .readers import READERS, sniff_format
from .synthetic import SyntheticSpec, generate, parse_spec
from .transforms import clip_context, parse_sample, parse_window, rate_scale, sample, time_window
from .workload import Workload, make_workload

__all__ = [
    "Workload", "make_workload", "load_trace", "TraceError", "TraceWarning", "ReadOptions",
    "READERS", "sniff_format", "read_canonical", "write_csv", "bundled_traces",
    "bundled_traces_dir", "resolve_trace_path",
    "SyntheticSpec", "parse_spec", "generate",
    "poisson_arrivals_s", "gamma_arrivals_s", "onoff_arrivals_s", "batch_arrivals_s",
    "uniform_lengths", "empirical_lengths", "priority_mix",
    "time_window", "rate_scale", "sample", "clip_context", "parse_window", "parse_sample",
]
