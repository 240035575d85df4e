# Every target bootstraps its own virtual environment: a fresh machine needs only python3 (>=3.11).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Real Kubernetes components (kube-apiserver, kube-scheduler, kube-controller-manager, kubelet)
# + etcd for tests/integration/realkube and tests/integration/controlplane, built once per
# version into a cache outside the repo by hack/kube-components.sh. KUBE_VERSION is the floor we
# support; KUBE_LATEST, the newest release, runs the control-plane tier a second time.
KUBE_VERSION ?= v1.34.4
KUBE_LATEST ?= v1.37.2
KUBE_CACHE_ROOT ?= $(HOME)/.cache/cd-dra-driver
KUBE_BIN_DIR ?= $(KUBE_CACHE_ROOT)/kube-$(KUBE_VERSION)
export KUBE_VERSION KUBE_BIN_DIR

.PHONY: test lint typecheck imports unit cdi-hook kube-components kube-latest controlplane-latest demo bench faults gpu-check protos check-protos clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check core adapters apps tests bench

typecheck: $(STAMP)
	$(BIN)/mypy core adapters apps

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP) kube-components cdi-hook
	$(BIN)/pytest tests

# NVIDIA's nvidia-cdi-hook (nvidia-container-toolkit, from the Go module proxy) for
# tests/integration/gpuplugin/test_cdi_hooks_run.py, cached beside the kube components.
cdi-hook:
	@if command -v go >/dev/null; then hack/nvidia-cdi-hook.sh >/dev/null; \
	else echo "make: go not found: the nvidia-cdi-hook tests will be skipped" >&2; fi

kube-components:
	KUBE_CACHE=$(KUBE_BIN_DIR) hack/kube-components.sh >/dev/null

kube-latest:
	KUBE_VERSION=$(KUBE_LATEST) KUBE_CACHE=$(KUBE_CACHE_ROOT)/kube-$(KUBE_LATEST) \
		hack/kube-components.sh >/dev/null

# The control-plane tier again on the newest Kubernetes release (the rest ran on the floor).
controlplane-latest: $(STAMP) kube-latest
	KUBE_VERSION=$(KUBE_LATEST) KUBE_BIN_DIR=$(KUBE_CACHE_ROOT)/kube-$(KUBE_LATEST) \
		$(BIN)/pytest tests/integration/controlplane

test: lint typecheck imports unit controlplane-latest

demo: $(STAMP)
	$(BIN)/computedomain demo

bench: $(STAMP)
	KUBE_LATEST=$(KUBE_LATEST) $(BIN)/python -m bench

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
