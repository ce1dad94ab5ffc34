# `make run` and `make test` work on a fresh clone: both build .venv first if needed.
# `make run` installs the core package only (requirements-run.txt: no torch, no Ray);
# `make setup` / `make test` install everything the tests need (requirements-cpu.txt: CPU torch pinned).
PY ?= python3
VENV := .venv
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# the compiled core (setup.py, perfmodel/native.py) is rebuilt whenever one of its sources changes
NATIVE_SRC := $(wildcard perfmodel/native.py perfmodel/steptable.py perfmodel/calibration/point.py \
                          simulator/engine/*.py simulator/cluster/*.py simulator/results/records.py)
PACKAGING := pyproject.toml setup.py requirements-run.txt $(NATIVE_SRC)

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(RUN_STAMP): $(PACKAGING) | $(VENV)/bin/python
	$(VENV)/bin/pip install -q -r requirements-run.txt
	touch $(RUN_STAMP)

$(STAMP): $(PACKAGING) requirements-cpu.txt | $(VENV)/bin/python
	$(VENV)/bin/pip install -q -r requirements-cpu.txt
	touch $(STAMP) $(RUN_STAMP)

.PHONY: setup setup-run run test test-fast
setup: $(STAMP)

setup-run: $(RUN_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/simulate --trace burstgpt.csv --policy shift

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m "not slow"
