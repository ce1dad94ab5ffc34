"""Executable reference implementations of every parallelism strategy (see docs/kernels.md)."""
