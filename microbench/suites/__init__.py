"""Microbenchmark suites: each module has RANKS ('zero': rank 0 alone, 'all': every rank), TABLE (None: its rows
go to the measurement CSV; a kernel_tables name: to that table's file beside it, moe / mla), cases(ctx) -> list of
row-identity dicts, and run(ctx, case) -> the measured columns of that row."""
