# Every target bootstraps its own virtual environment: a fresh machine needs only python3 (>=3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck imports unit demo bench protos check-protos clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check core adapters apps tests bench

typecheck: $(STAMP)
	$(BIN)/mypy core adapters apps

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest tests

test: lint typecheck imports unit

demo: $(STAMP)
	$(BIN)/computedomain demo

bench: $(STAMP)
	$(BIN)/python -m bench

protos: $(STAMP)
	$(BIN)/python -m adapters.grpc.generate

check-protos: $(STAMP)
	$(BIN)/pytest tests/unit/grpc/test_stub_freshness.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
