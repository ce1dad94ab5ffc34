"""The applications built on the simulator core: the `simulate` CLI (cli.py, cli_items.py) and its
subcommands recommend/, sweep/, validate/, replay/ and comparison/ (`simulate compare`).

The core (simulator.workload, cluster, engine, policies, results, run, run_record, rerun) never imports
this package (tests/test_core_apps_split.py checks); the applications import the core.
"""
