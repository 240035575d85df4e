# Every target bootstraps its own virtual environment: a fresh machine needs only python3 (>=3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A real kube-apiserver + etcd for tests/integration/realkube, built once into a cache outside
# the repo by hack/kube-apiserver.sh (about 15 minutes on 2 cores the first time).
KUBE_VERSION ?= v1.34.4
KUBE_BIN_DIR ?= $(HOME)/.cache/cd-dra-driver/kube-$(KUBE_VERSION)
export KUBE_VERSION KUBE_BIN_DIR

.PHONY: test lint typecheck imports unit kube-apiserver demo bench faults gpu-check protos check-protos clean

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

unit: $(STAMP) kube-apiserver
	$(BIN)/pytest tests

kube-apiserver:
	KUBE_CACHE=$(KUBE_BIN_DIR) hack/kube-apiserver.sh >/dev/null

test: lint typecheck imports unit

demo: $(STAMP)
	$(BIN)/computedomain demo

bench: $(STAMP)
	$(BIN)/python -m bench

faults: $(STAMP)
	$(BIN)/python -m bench.faults

# On a GPU host: the GPU plugin with real NVML, its slice and a prepared claim checked against
# nvidia-smi and the host's files (skipped where no GPU is present).
gpu-check: $(STAMP)
	hack/gpu-check.sh

protos: $(STAMP)
	$(BIN)/python -m adapters.grpc.generate

check-protos: $(STAMP)
	$(BIN)/pytest tests/unit/grpc/test_stub_freshness.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
