# Slipway's front door. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BIN ?= python3.11
VENV       ?= .venv
PY         := $(VENV)/bin/python
EXTRAS     ?= serve,export,loadtest,deploy,dev
ifeq ($(GPU),1)
EXTRAS     := $(subst serve,gpu,$(EXTRAS))
endif
comma      := ,
STAMP      := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

MODEL_DIR    ?= build/artifacts/digits
HTTP_PORT    ?= 8080
GRPC_PORT    ?= 8081
METRICS_PORT ?= 8082
HOST         ?= 127.0.0.1
IMAGE        ?= slipway/mlserver-onnx:0.1.0
PYTEST_ARGS  ?=

.PHONY: help setup demo train convert serve smoke loadtest manifests deploy test clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv (Python 3.11) and install Slipway with its extras (GPU=1 for onnxruntime-gpu)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ "$(GPU)" = "1" ]; then $(PY) -m pip uninstall --yes --quiet onnxruntime || true; \
	 else $(PY) -m pip uninstall --yes --quiet onnxruntime-gpu || true; fi
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup ## the whole road on the digits model: train, convert, serve, query, load test, render
	$(PY) -m export train
	$(PY) -m export convert --out $(MODEL_DIR)
	$(PY) -m loadtest smoke --model-dir $(MODEL_DIR)
	$(PY) -m loadtest run --model-dir $(MODEL_DIR)
	$(PY) -m deployments render --model-dir $(MODEL_DIR) --image $(IMAGE)
	$(PY) -m slipway summary

train: setup ## train the digits CNN (reports/train.json, TensorBoard logs under build/train)
	$(PY) -m export train

convert: setup ## convert the trained model to ONNX, check parity, write the artifact folder
	$(PY) -m export convert --out $(MODEL_DIR)

serve: setup ## serve MODEL_DIR with MLServer in the foreground (HTTP_PORT, GRPC_PORT, METRICS_PORT, HOST)
	$(PY) -m wrappers serve --model-dir $(MODEL_DIR) --host $(HOST) \
	  --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

smoke: setup ## start MLServer on MODEL_DIR, check REST and gRPC answers with tritonclient, stop it
	$(PY) -m loadtest smoke --model-dir $(MODEL_DIR)

loadtest: setup ## a short headless Locust run against a local server on MODEL_DIR
	$(PY) -m loadtest run --model-dir $(MODEL_DIR)

manifests: setup ## render SeldonDeployment + HPA for MODEL_DIR into build/manifests and validate them
	$(PY) -m deployments render --model-dir $(MODEL_DIR) --image $(IMAGE)

deploy: setup ## apply the rendered manifests to the current kubectl context
	$(PY) -m deployments deploy --model-dir $(MODEL_DIR) --image $(IMAGE)

test: setup ## install what is needed and run the whole test suite
	$(PY) -m pytest $(PYTEST_ARGS)

clean: ## remove build outputs and reports (keeps .venv)
	rm -rf build reports .pytest_cache
