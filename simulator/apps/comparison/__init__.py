"""`simulate compare MEASURED SIMULATED`: per-request and summary error of a simulated run against a
measured one (`cli.py`); `inputs.py` reads both kinds of input: a run directory as `simulate --out`
(or `simulate replay`) writes it, or a vLLM `bench serve --save-result --save-detailed` JSON file.
"""
