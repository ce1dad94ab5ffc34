# `make run` and `make test` work on a fresh clone: both build .venv first if needed.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml requirements-cpu.txt
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements-cpu.txt
	touch $(STAMP)

.PHONY: setup run test test-fast
setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/simulate --trace burstgpt.csv --policy shift

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m "not slow"
