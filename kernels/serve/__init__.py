"""A serving loop over the reference implementations: `python -m kernels.serve`.

Continuous batching with the simulator's own pure scheduler (simulator.engine.scheduler.schedule on
a simulator.engine.batch.RunningBatch, carried out by simulator.engine.step), so that the steps it
runs are the ones the simulator would run for the same arrivals and a comparison isolates time.
Each step runs on real ranks (gloo on CPU) through the strategy's reference model and paged KV
cache (kernels/), timed on the wall clock; the perf model's time for the same step sits beside it.

Strategies: tp, sp, shift (one engine over all ranks) and dp (one engine per rank). Token ids are
seeded per request (kernels/scenario.py's rule), not sampled: timing does not depend on them.
DP replicas step in lockstep ticks (rank 0 schedules every replica each tick), so a replica with a
short step waits for the longest one before its next step; TP/SP/Shift have one engine and no such
wait. Request times are rank 0's wall clock (first token and finish: when the step's timings are
back at rank 0), so they include scheduling and the plan broadcast; duration_s is the step itself.
`--http PORT` serves the same loop as an OpenAI-compatible /v1/completions server (kernels/serve/http.py).
"""
