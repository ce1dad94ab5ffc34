"""microbench: measure GEMM, attention, collectives and copies for perfmodel calibrate (docs/microbench.md)."""
