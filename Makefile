VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: venv demo test lint format bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/nodefence demo --fencing redfish

test: venv
	$(BIN)/pytest -q

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
