# make setup: toolchains + .venv (idempotent); make demo / make test run it first.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) scripts/demo.py

test: setup
	@$(VENV)/bin/pytest -n 2 -q
