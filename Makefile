# make setup: toolchains + .venv (idempotent); make demo / make test run it first.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-fast

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) scripts/demo.py

test: setup
	@$(VENV)/bin/pytest -n 2 -q

# The pure-Python layers only (pytest -m fast: no compiler, emulator or
# board; tests/conftest.py lists them): under 2 minutes on 2 cores.
test-fast:
	@test -x $(VENV)/bin/pytest || { echo "make test-fast: no $(VENV): run make setup first" >&2; exit 2; }
	@$(VENV)/bin/pytest -n 2 -q -m fast
