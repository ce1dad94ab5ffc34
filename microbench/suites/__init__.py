"""Microbenchmark suites: each module has RANKS ('zero': rank 0 alone, 'all': every rank), cases(ctx)
-> list of row-identity dicts, and run(ctx, case) -> the measured columns of that row."""
