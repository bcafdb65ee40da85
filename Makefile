# Slipway's front door. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BIN ?= python3.11
VENV       ?= .venv
PY         := $(VENV)/bin/python
# Every target below runs Slipway's one command (slipway/command.py), which `make setup` installs; the local cluster's
# run the checkout's development package, `python -m localcluster`.
SLIPWAY    := $(VENV)/bin/slipway
EXTRAS     ?= serve,export,loadtest,deploy,dev
ifeq ($(GPU),1)
EXTRAS     := $(subst serve,gpu,$(EXTRAS))
endif
comma      := ,
STAMP      := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

# Left unset, a setting is not passed and the command's own default holds (`slipway COMMAND --help` says which: the
# demo's artifact for MODEL_DIR, loopback and ports 8080-8082 for `serve`, ./model-store for STORE, namespace slipway):
# each default lives in one place, the command line it belongs to. `$(call flag,--option,$(VAR))` passes VAR if set.
flag = $(if $(2),$(1) $(2))
# The artifact folder the targets serve, load-test, publish and deploy: MODEL_DIR=, else with NAME= on the command line
# build/artifacts/NAME, the one `make convert` wrote for that name (its NAME=, else the model file's), else the demo's.
MODEL_DIR    ?= $(if $(filter command line,$(origin NAME)),build/artifacts/$(NAME))
HTTP_PORT    ?=
GRPC_PORT    ?=
METRICS_PORT ?=
HOST         ?=
IMAGE        ?=
PYTEST_ARGS  ?=
# pytest-xdist workers for `make test` and `make test-fast` (0: one process); the cluster tests stay together on one
# worker, beside the rest of the suite on the other (tests/localcluster/conftest.py)
PYTEST_WORKERS ?= 2
STORE        ?=
KEEP         ?= 5

.PHONY: help setup setup-torch tools node-tools cluster cluster-build cluster-hpa cluster-image cluster-down versions-resolve demo train convert serve smoke loadtest tune tune-check recommend manifests deploy upload secret undeploy image image-tools push test clean bench bench-gpu bench-peers
.PHONY: export import profile bench-export bench-slim bench-keras

# export variants, import, profile, bench-export
MODEL        ?= digits
KERAS_MODEL  ?= build/train/digits/model.keras
ONNX         ?=
NAME         ?= $(basename $(notdir $(ONNX)))
CALIBRATION  ?=
LABELS       ?=
VARIANT      ?= int8
EXPORT_ARGS  ?=

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv (Python 3.11) and install Slipway with its extras (GPU=1 for onnxruntime-gpu)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ "$(GPU)" = "1" ]; then $(PY) -m pip uninstall --yes --quiet onnxruntime || true; \
	 else $(PY) -m pip uninstall --yes --quiet onnxruntime-gpu || true; fi
	$(PY) -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup ## the whole road on the digits model: train, convert, serve, query, load test, render
	$(SLIPWAY) export train
	$(SLIPWAY) export convert $(call flag,--out,$(MODEL_DIR))
	$(SLIPWAY) smoke $(call flag,--model-dir,$(MODEL_DIR))
	$(SLIPWAY) loadtest $(call flag,--model-dir,$(MODEL_DIR)) --shape step --max-users 16 --slo loadtest/slo.example.yaml
	$(SLIPWAY) render $(call flag,--model-dir,$(MODEL_DIR)) $(call flag,--image,$(IMAGE))
	$(SLIPWAY) summary

train: setup ## train the digits CNN (reports/train.json, TensorBoard logs under build/train)
	$(SLIPWAY) export train

# Your own model: KERAS_MODEL=model.keras|model.h5|savedmodel/ DATA=held-out.npz [NAME=] [CUSTOM_OBJECTS=module:attr]
# [MODEL_DIR=] (default build/artifacts/<name>); without KERAS_MODEL= on the command line, the demo's digits model.
# Then `make serve NAME=<name>`, `make deploy NAME=<name>` (and the rest that take MODEL_DIR) take that artifact.
DATA           ?=
CUSTOM_OBJECTS ?=
USER_MODEL_ARGS = $(if $(DATA),--data $(DATA)) $(if $(filter command line,$(origin NAME)),--name $(NAME)) \
  $(if $(CUSTOM_OBJECTS),--custom-objects $(CUSTOM_OBJECTS))

convert: setup ## convert the trained model (or KERAS_MODEL= with DATA=) to ONNX, check parity, write the artifact folder
	$(SLIPWAY) export convert $(if $(filter command line,$(origin KERAS_MODEL)),$(KERAS_MODEL) $(USER_MODEL_ARGS)) \
	  $(call flag,--out,$(MODEL_DIR))

serve: setup ## serve MODEL_DIR with MLServer in the foreground (HTTP_PORT, GRPC_PORT, METRICS_PORT, HOST)
	$(SLIPWAY) serve $(call flag,--model-dir,$(MODEL_DIR)) $(call flag,--host,$(HOST)) $(call flag,--http-port,$(HTTP_PORT)) \
	  $(call flag,--grpc-port,$(GRPC_PORT)) $(call flag,--metrics-port,$(METRICS_PORT))

smoke: setup ## start MLServer on MODEL_DIR, check REST and gRPC answers with tritonclient, stop it
	$(SLIPWAY) smoke $(call flag,--model-dir,$(MODEL_DIR))

# --- load tests (loadtest/) -------------------------------------------------
# `make loadtest` serves MODEL_DIR locally for the run unless HOST= is given on the command
# line (HOST from elsewhere is only the address `make serve` binds to).
SHAPE         ?= step
PROTOCOL      ?= rest
SLO           ?=
LOADTEST_ARGS ?=

loadtest: setup ## load-test a local server on MODEL_DIR or HOST=url; SHAPE=step|constant|spike|soak PROTOCOL=rest|grpc SLO=file.yaml
	$(SLIPWAY) loadtest $(call flag,--model-dir,$(MODEL_DIR)) --shape $(SHAPE) --protocol $(PROTOCOL) \
	  $(if $(filter command line,$(origin HOST)),--host $(HOST)) $(if $(SLO),--slo $(SLO)) $(LOADTEST_ARGS)

# --- tuning and resource recommendations (loadtest/tuning, deployments/sizing/recommend/) ---
# Measurements take the bench lock so they never overlap other benchmarks on a shared machine.
BENCH_LOCK     ?= /tmp/slipway-bench.lock
VARIANTS       ?=
TUNE_ARGS      ?=
CPU            ?=
MEMORY         ?=
RPS            ?=
RECOMMEND_ARGS ?=
TUNE_SPACE     := $(call flag,--model-dir,$(MODEL_DIR)) $(foreach v,$(VARIANTS),--variant $(v))

tune: setup ## search serving specs by real step loads (VARIANTS="fp32=DIR int8=DIR", TUNE_ARGS=): reports/tune.json, build/tune/
	flock $(BENCH_LOCK) $(SLIPWAY) tune $(TUNE_SPACE) $(TUNE_ARGS)

tune-check: setup ## measure the whole grid; the tuner must reach 95% of its best in 25% of its trials: reports/tune-check.json
	flock $(BENCH_LOCK) $(SLIPWAY) tune-check $(TUNE_SPACE) $(TUNE_ARGS)

recommend: setup ## requests, limits and HPA replicas from usage history: CPU= MEMORY= RPS= [GPU_UTIL= GPU_MEMORY=] query_range files, or PROMETHEUS_URL
	$(SLIPWAY) recommend $(call flag,--namespace,$(NAMESPACE)) $(call flag,--model,$(MODEL_NAME)) $(if $(CPU),--cpu $(CPU)) $(if $(MEMORY),--memory $(MEMORY)) $(if $(RPS),--rps $(RPS)) \
	  $(if $(GPU_UTIL),--gpu-util $(GPU_UTIL)) $(if $(GPU_MEMORY),--gpu-memory $(GPU_MEMORY)) $(RECOMMEND_ARGS)

# --- export: variants, bring-your-own ONNX, profiling, benchmark -------------
# Your own model's variants: KERAS_MODEL=model.keras DATA=held-out.npz [TRAIN=train.npz (pruned, slim)] [CALIBRATION=]
# [LOSS=] [NAME=] [CUSTOM_OBJECTS=]; KERAS_MODEL= without DATA= is a digits model file, as before.
TRAIN ?=
LOSS  ?=
export: setup ## ONNX variants of MODEL=digits|mobilenetv2, or KERAS_MODEL= with DATA= (fp32/int8/fp16/pruned/slim), measured, best one chosen
	@if [ "$(MODEL)" = "digits" ] && [ -z "$(DATA)" ] && [ ! -f "$(KERAS_MODEL)" ]; then $(SLIPWAY) export train; fi
	$(if $(DATA),$(SLIPWAY) export variants $(KERAS_MODEL) $(USER_MODEL_ARGS) $(if $(TRAIN),--train $(TRAIN)) \
	  $(if $(CALIBRATION),--calibration $(CALIBRATION)) $(if $(LOSS),--loss $(LOSS)),$(SLIPWAY) export variants $(MODEL) \
	  --keras-model $(KERAS_MODEL)) $(EXPORT_ARGS)

import: setup ## bring any ONNX model: ONNX=model.onnx [NAME=] [CALIBRATION=x.npz] [LABELS=y.npz] -> variants + report
	@test -n "$(ONNX)" || { echo "error: pass ONNX=path/to/model.onnx (e.g. from torch.onnx.export)" >&2; exit 2; }
	$(SLIPWAY) export import $(ONNX) --name $(NAME) $(if $(CALIBRATION),--calibration $(CALIBRATION)) \
	  $(if $(LABELS),--labels $(LABELS)) $(EXPORT_ARGS)

profile: setup ## ONNX Runtime profile of VARIANT (default int8) of MODEL: top operators + trace for Perfetto
	$(SLIPWAY) export profile $(VARIANT) --model $(MODEL)

bench-export: setup ## digits + MobileNetV2 variants in one run (under the bench lock) -> reports/bench-export.* + docs/benchmarks.md
	@if [ ! -f "$(KERAS_MODEL)" ]; then $(SLIPWAY) export train; fi
	flock $(BENCH_LOCK) $(SLIPWAY) export bench --keras-model $(KERAS_MODEL)

bench-slim: setup ## MobileNetV2 at half the channels vs whole, batch 32 (under the bench lock) -> reports/bench-slim.* + docs/benchmarks.md
	flock $(BENCH_LOCK) $(SLIPWAY) export bench-slim $(BENCH_SLIM_ARGS)

# The Keras corpus (benchmarks/corpus_models.py): each model converted, made into fp32/int8/fp16 and timed on the CPU.
BENCH_KERAS_ARGS ?=
bench-keras: setup ## every Keras corpus model: convert time, parity, ONNX size, rows/s per variant, the chosen one -> reports/keras-corpus.* + docs/benchmarks.md
	flock $(BENCH_LOCK) $(SLIPWAY) bench-keras $(BENCH_KERAS_ARGS)

# The suite proves KEDA's and KServe's paths too, so `make test` builds both (`make test KEDA= KSERVE=` leaves them out).
test: KEDA = 1
test: KSERVE = 1
test: setup setup-torch tools dashboard-schema image-tools node-tools cluster-build lint ## install what is needed, run `make lint`, then the whole test suite
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

.PHONY: lint test-fast
lint: setup ## ruff's checks and layout ([tool.ruff] in pyproject.toml), mypy on every package, the import contracts
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The tests write bytecode whatever the environment says (PYTHONDONTWRITEBYTECODE=1 in many containers): without it
# each pytest-xdist worker and each command a test runs compiles the project again (on a fresh checkout, ~3 s of
# collection a worker and ~0.1 s a command).
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test-fast: setup ## the tests that neither train a model nor start a server (not marked slow)
	$(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# constraints.txt: every package the extras bring (torch's aside), pinned per platform (Linux x86_64, macOS arm64)
# with wheels only, so `make setup` and both images install the same versions until it is regenerated
# (slipway/lock.py says how). tests/slipway/test_lock.py checks it, and that .venv holds it.
.PHONY: lock
lock: ## regenerate constraints.txt from pyproject.toml (UPGRADE=1: the newest versions the extras allow); the next target reinstalls
	@test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	@$(PY) -c "import uv, packaging, pydantic, rich" 2>/dev/null || $(PY) -m pip install --quiet "uv>=0.9" packaging pydantic rich
	$(PY) -m slipway.lock $(if $(UPGRADE),--upgrade)

.PHONY: docs
docs: setup ## build the documentation site (docs/, mkdocs.yml) into build/site; `mkdocs build --strict` also runs in `make test`
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site

# PyTorch (several GB from PyPI) only for the test that round-trips a PyTorch model; never for `make demo`.
TORCH_STAMP := $(VENV)/.installed-torch
setup-torch: $(TORCH_STAMP)

$(TORCH_STAMP): pyproject.toml constraints.txt | $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[torch]"
	@touch $@

# ---- deployments: manifests, deploy, images ------------------------------------------------
# VERSION= or TAG= pins the manifests to a version in the model store; without them they are rendered for the
# unpublished artifact MODEL_DIR (NAME=: build/artifacts/NAME; neither: the demo's). Canary: CANARY_VERSION= or CANARY_TAG=.
OVERLAY          ?=
# ENGINE=kserve: a ServingRuntime + InferenceService (RawDeployment) instead of a SeldonDeployment (docs/deploying.md).
ENGINE           ?=
AUTOSCALING      ?=
HPA_METRIC_SOURCE ?=
NAMESPACE        ?=
# The model's name in the store and on the cluster: MODEL_NAME=, else NAME= when given (the name `make convert` and
# `make import` wrote); unset, the commands' own: publish takes the artifact's, a store reference without its name
# (:3, @champion) the store's only model or the only one carrying the tag, and the commands on a deployed model (undeploy,
# alerts, recommend, shadow-off, canary-abort) the one model Slipway deployed in NAMESPACE, found by its labels.
MODEL_NAME       ?= $(if $(filter command line,$(origin NAME)),$(NAME))
VERSION          ?=
TAG              ?=
CANARY_VERSION   ?=
CANARY_TAG       ?=
CANARY_PERCENT   ?=
MODEL_URI        ?=
IMAGE_PULL_POLICY ?=
INGRESS_NAMESPACE ?=
MONITORING_NAMESPACE ?=
CANARY_MODEL_URI ?=
# MLServer's model repository API (load, unload): closed, or open to loopback callers and holders of the
# bearer token in the Secret REPOSITORY_TOKEN_SECRET names (key `token`).
REPOSITORY_API   ?=
REPOSITORY_TOKEN_SECRET ?=
# OVERLAY=gpu on a cloud's GPU nodes: space-separated KEY=VALUE labels and KEY[=VALUE][:EFFECT] taints
# (they replace the overlay's GPU Feature Discovery label and nvidia.com/gpu toleration); a PVC for TensorRT's engines.
GPU_NODE_SELECTOR ?=
GPU_TOLERATIONS  ?=
TRT_CACHE_CLAIM  ?=
# Any overlay: every pod on nodes with these KEY=VALUE labels, tolerating these KEY[=VALUE][:EFFECT] taints (added to
# the overlay's), e.g. the local cluster's real node: NODE_SELECTOR=slipway.dev/node=real TOLERATIONS=slipway.dev/node=real:NoSchedule
NODE_SELECTOR    ?=
TOLERATIONS      ?=
# SPLIT=cpu-gpu: decoding/resizing and top-k in CPU pods of their own around the model's (a Seldon graph run by its
# executor), each with its own autoscaler (docs/manifests.md).
SPLIT            ?=
# FRONTENDS=N: N serving processes per model pod feeding one session host, CPUs sized for them (docs/manifests.md).
FRONTENDS        ?=
# DASHBOARD=1: also render the model's Grafana dashboard, a ConfigMap that Grafana's dashboard sidecar loads.
DASHBOARD        ?=
# Where the model's bytes go: a version without a URI of its own is uploaded to STORAGE_ROOT/<name>/<version>
# with the Secret `make secret` writes (SCHEME=s3|gs); STORAGE_ENDPOINT= reaches the store from here when the
# Secret's endpoint is the pods' address; PVC_MOUNT= is where a pvc:// claim is mounted on this machine.
STORAGE_ROOT     ?=
STORAGE_ENDPOINT ?=
PVC_MOUNT        ?=
SCHEME           ?=
DRY_RUN          ?=
WAIT             ?=
# PUSH=1: `make deploy` first pushes the images to IMAGE_REPO, then deploys the one for OVERLAY from there and
# checks, before anything is applied, that every model image resolves in its registry (--check-image).
PUSH             ?=
PUSHED_IMAGE      = $(IMAGE_REPO)/$(notdir $(if $(filter gpu,$(OVERLAY)),$(IMAGE_GPU),$(IMAGE_CPU)))
IMAGE_CPU        ?= slipway/mlserver-onnx:0.1.0
IMAGE_GPU        ?= slipway/mlserver-onnx-gpu:0.1.0
TOOLS_VENV       ?= .venv-tools
CHECKOV_VERSION  ?= 3.3.30
RECORD           := build/model-version.json
CANARY_RECORD    := build/model-version-canary.json
TOOLS_STAMP      := $(TOOLS_VENV)/.installed-checkov-$(CHECKOV_VERSION)

# Ask the model store for a version record: $(1) = NAME@VERSION-or-TAG, $(2) = the file (written whole or not at all).
define version_record
	@mkdir -p $(dir $(2))
	@$(SLIPWAY) versions show $(1) $(call flag,--store,$(STORE)) --json > $(2).tmp || { rm -f $(2).tmp; exit 1; }
	@mv $(2).tmp $(2)
endef
RENDER_ARGS = $(call flag,--engine,$(ENGINE)) $(call flag,--overlay,$(OVERLAY)) $(call flag,--autoscaling,$(AUTOSCALING)) \
  $(call flag,--namespace,$(NAMESPACE)) $(if $(VERSION)$(TAG),--version-record $(RECORD),$(call flag,--model-dir,$(MODEL_DIR))) \
  $(if $(CANARY_VERSION)$(CANARY_TAG),--canary-record $(CANARY_RECORD)) \
  $(if $(CANARY_PERCENT),--canary-percent $(CANARY_PERCENT)) $(if $(IMAGE),--image $(IMAGE)) \
  $(if $(IMAGE_PULL_POLICY),--image-pull-policy $(IMAGE_PULL_POLICY)) \
  $(if $(INGRESS_NAMESPACE),--ingress-namespace $(INGRESS_NAMESPACE)) \
  $(if $(MONITORING_NAMESPACE),--monitoring-namespace $(MONITORING_NAMESPACE)) \
  $(if $(MODEL_URI),--model-uri $(MODEL_URI)) $(if $(CANARY_MODEL_URI),--canary-model-uri $(CANARY_MODEL_URI)) \
  $(if $(SHARED_MEMORY),--shared-memory $(SHARED_MEMORY)) $(if $(STORAGE_ROOT),--storage-root $(STORAGE_ROOT)) \
  $(if $(REPOSITORY_API),--repository-api $(REPOSITORY_API)) \
  $(if $(REPOSITORY_TOKEN_SECRET),--repository-token-secret $(REPOSITORY_TOKEN_SECRET)) \
  $(if $(HPA_METRIC_SOURCE),--hpa-metric-source $(HPA_METRIC_SOURCE)) \
  $(foreach label,$(GPU_NODE_SELECTOR),--gpu-node-selector $(label)) \
  $(foreach taint,$(GPU_TOLERATIONS),--gpu-toleration $(taint)) $(if $(TRT_CACHE_CLAIM),--trt-cache-claim $(TRT_CACHE_CLAIM)) \
  $(foreach label,$(NODE_SELECTOR),--node-selector $(label)) $(foreach taint,$(TOLERATIONS),--toleration $(taint)) \
  $(if $(filter 1,$(DASHBOARD)),--dashboard) $(if $(SPLIT),--split $(SPLIT)) $(if $(FRONTENDS),--frontends $(FRONTENDS))

versions-resolve: setup
	$(if $(VERSION)$(TAG),$(call version_record,$(if $(VERSION),$(MODEL_NAME):$(VERSION),$(MODEL_NAME)@$(TAG)),$(RECORD)))
	$(if $(CANARY_VERSION)$(CANARY_TAG),$(call version_record,$(if $(CANARY_VERSION),$(MODEL_NAME):$(CANARY_VERSION),$(MODEL_NAME)@$(CANARY_TAG)),$(CANARY_RECORD)))

manifests: versions-resolve ## render + validate OVERLAY=cpu|gpu|canary into build/manifests/<overlay> (VERSION=|TAG=, AUTOSCALING=cpu|rps|keda|behavior; gpu: gpu-queue|gpu-util; ENGINE=kserve)
	$(SLIPWAY) render $(RENDER_ARGS)

.PHONY: alerts
alerts: setup ## Prometheus alerts from SLO=slo.yaml's lines for MODEL_NAME in NAMESPACE -> build/manifests/alerts (PrometheusRule + rule file)
	@test -n "$(SLO)" || { echo "usage: make alerts SLO=slo.yaml [NAMESPACE= MODEL_NAME=]" >&2; exit 2; }
	$(SLIPWAY) alerts --slo $(SLO) $(call flag,--namespace,$(NAMESPACE)) $(call flag,--model,$(MODEL_NAME)) $(call flag,--engine,$(ENGINE))

STORAGE_ARGS = $(if $(STORAGE_ENDPOINT),--storage-endpoint $(STORAGE_ENDPOINT)) $(if $(PVC_MOUNT),--pvc-mount $(PVC_MOUNT))

deploy: versions-resolve $(if $(filter 1,$(PUSH)),push) ## upload + verify the model's bytes, server-side apply to the current context, wait until the pods serve it (DRY_RUN=server|client, WAIT=s, PUSH=1 IMAGE_REPO=)
	$(SLIPWAY) deploy $(RENDER_ARGS) $(STORAGE_ARGS) $(if $(filter 1,$(PUSH)),--image $(PUSHED_IMAGE) --check-image) \
	  $(call flag,--dry-run,$(DRY_RUN)) $(call flag,--wait,$(WAIT))

upload: versions-resolve ## upload MODEL_DIR (or VERSION=/TAG=) to its modelUri with the storage Secret's credentials, and verify it
	$(SLIPWAY) upload $(call flag,--namespace,$(NAMESPACE)) $(STORAGE_ARGS) \
	  $(if $(VERSION)$(TAG),--version-record $(RECORD),$(call flag,--model-dir,$(MODEL_DIR))) \
	  $(if $(MODEL_URI),--model-uri $(MODEL_URI)) $(if $(STORAGE_ROOT),--storage-root $(STORAGE_ROOT))

secret: setup ## write the storage Secret into NAMESPACE from AWS_* (or GOOGLE_APPLICATION_CREDENTIALS with SCHEME=gs), never to a file
	$(SLIPWAY) secret $(call flag,--engine,$(ENGINE)) $(call flag,--namespace,$(NAMESPACE)) $(call flag,--scheme,$(SCHEME)) \
	  $(call flag,--dry-run,$(DRY_RUN))

# --- the local control plane (localcluster): real kube-apiserver, kwok, the Seldon operator ---
CLUSTER_PORT ?=
NODE         ?=
KEDA         ?=
KSERVE       ?=
KSERVE_FLAG   = $(if $(KSERVE)$(filter kserve,$(ENGINE)),--kserve)

cluster: setup $(if $(filter real,$(NODE)),node-tools) ## start a local Kubernetes control plane with the Seldon operator on loopback (CLUSTER_PORT=; NODE=real adds a node that runs containers; KEDA=1 adds KEDA; KSERVE=1 or ENGINE=kserve adds KServe's controller); builds it from Go modules the first time
	$(PY) -m localcluster up $(call flag,--port,$(CLUSTER_PORT)) $(if $(filter real,$(NODE)),--real-node) $(if $(KEDA),--keda) $(KSERVE_FLAG)

cluster-build: setup ## build the local control plane's binaries from Go modules into ~/.cache/slipway/cluster (once; `make cluster` and `make test` need them; KEDA=1 adds KEDA's, KSERVE=1 KServe's)
	$(PY) -m localcluster build $(if $(KEDA),--keda) $(KSERVE_FLAG)

cluster-hpa: setup ## on the local cluster: drive a deployed model's simulated CPU usage up and down, record its HPA (reports/cluster-hpa.json + PNG; ENGINE=kserve: reports/cluster-hpa-kserve.json + PNG)
	$(PY) -m localcluster prove-hpa $(call flag,--namespace,$(NAMESPACE)) $(if $(filter kserve,$(ENGINE)),,$(call flag,--container,$(MODEL_NAME)))

cluster-image: setup ## import the serving image `make image` built into the real node's containerd (make cluster NODE=real runs)
	$(PY) -m localcluster load-image --image localhost/$(IMAGE_CPU)

cluster-down: setup ## stop the local control plane (every process by its PID) and remove build/cluster
	$(PY) -m localcluster down

undeploy: setup ## delete what deploy applied for MODEL_NAME in NAMESPACE (unset: the one model Slipway deployed there)
	$(SLIPWAY) undeploy $(call flag,--name,$(MODEL_NAME)) $(call flag,--namespace,$(NAMESPACE))

# --- progressive delivery (deployments/delivery/canary): shadow, then an SLO-gated canary that promotes or rolls back ---
.PHONY: shadow shadow-off canary canary-abort
STEPS        ?=
INTERVAL     ?=
PROMOTE_TAG  ?=
CANARY_SLO    = $(if $(SLO),$(SLO),loadtest/slo.example.yaml)
NEW_VERSION   = $(if $(VERSION),$(MODEL_NAME):$(VERSION),$(if $(TAG),$(MODEL_NAME)@$(TAG)))
NEED_VERSION  = @test -n "$(VERSION)$(TAG)" || { echo "usage: make $@ VERSION=4 (or TAG=challenger): the store's version to bring in" >&2; exit 2; }

shadow: setup ## run VERSION=|TAG= as a shadow beside the serving version: a copy of every request, its answers dropped
	$(NEED_VERSION)
	$(SLIPWAY) shadow $(call flag,--engine,$(ENGINE)) --ref $(NEW_VERSION) $(call flag,--store,$(STORE)) $(call flag,--namespace,$(NAMESPACE)) $(STORAGE_ARGS) \
	  $(if $(STORAGE_ROOT),--storage-root $(STORAGE_ROOT))

shadow-off: setup ## remove the shadow from MODEL_NAME's SeldonDeployment
	$(SLIPWAY) shadow --remove $(call flag,--deployment,$(MODEL_NAME)) $(call flag,--namespace,$(NAMESPACE))

canary: setup ## SLO-gated canary of VERSION=|TAG= [STEPS=5,10,25,50,100 INTERVAL=5m SLO=file]: promotes (tag PROMOTE_TAG) or rolls back; PROMETHEUS_URL
	$(NEED_VERSION)
	$(SLIPWAY) canary $(call flag,--engine,$(ENGINE)) --ref $(NEW_VERSION) $(call flag,--store,$(STORE)) $(call flag,--namespace,$(NAMESPACE)) \
	  $(call flag,--steps,$(STEPS)) $(call flag,--interval,$(INTERVAL)) --slo $(CANARY_SLO) $(call flag,--promote-tag,$(PROMOTE_TAG)) $(STORAGE_ARGS) \
	  $(if $(STORAGE_ROOT),--storage-root $(STORAGE_ROOT))

canary-abort: setup ## roll back MODEL_NAME's canary in progress now (weights 100/0, canary removed, tag unchanged)
	$(SLIPWAY) canary --abort $(call flag,--deployment,$(MODEL_NAME)) $(call flag,--namespace,$(NAMESPACE))

IMAGE_REPO ?=
# The daemonless builder: buildah builds the Dockerfile, mmdebstrap makes its base from Debian's packages, skopeo asks
# registries, umoci unpacks images (deployments/rollout/image_build.py). Debian/Ubuntu packages, installed once as root.
IMAGE_TOOLS := buildah skopeo umoci mmdebstrap

image-tools: ## install the daemonless image builder (buildah, skopeo, umoci, mmdebstrap) from Debian's packages (as root, once)
	@missing="$$(for tool in $(IMAGE_TOOLS); do command -v $$tool >/dev/null || echo $$tool; done | xargs)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "make $@: $$missing not installed and apt-get cannot run here as root: install $(IMAGE_TOOLS) with your package manager" >&2; exit 2; fi; \
	  echo "installing $$missing from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(IMAGE_TOOLS) >/dev/null; \
	fi

# a real node's runtime (localcluster/node.py): containerd 1.6, runc 1.1 and the CNI plugins from Debian's packages
NODE_TOOLS := containerd runc ctr containerd-shim-runc-v2 iptables-restore
NODE_PACKAGES := containerd runc containernetworking-plugins iptables

node-tools: ## install a real node's runtime (containerd, runc, the CNI plugins, iptables for kube-proxy) from Debian's packages (as root, once)
	@missing="$$(for tool in $(NODE_TOOLS); do command -v $$tool >/dev/null || echo $$tool; done; \
	  for plugin in bridge host-local loopback; do [ -x /usr/lib/cni/$$plugin ] || [ -x /opt/cni/bin/$$plugin ] || echo cni-$$plugin; done | xargs)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "make $@: $$missing not installed and apt-get cannot run here as root: install $(NODE_PACKAGES) with your package manager" >&2; exit 2; fi; \
	  echo "installing $(NODE_PACKAGES) from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_PACKAGES) >/dev/null; \
	fi

image: setup image-tools ## build the CPU serving image without a Docker engine (buildah; base from Debian's packages, cached in ~/.cache/slipway/images); says why the GPU one cannot be built here
	$(SLIPWAY) image build --tag $(IMAGE_CPU) --gpu-tag $(IMAGE_GPU)

push: $(if $(IMAGE_REPO),setup image-tools) ## build the serving image and push it to IMAGE_REPO (e.g. ghcr.io/you) with your credentials (buildah login or docker login); `make deploy PUSH=1 IMAGE_REPO=` pushes, then deploys it
	@test -n "$(IMAGE_REPO)" || { echo "usage: make push IMAGE_REPO=registry.example.com/team (the images are pushed as IMAGE_REPO/$(notdir $(IMAGE_CPU)) and IMAGE_REPO/$(notdir $(IMAGE_GPU)))" >&2; exit 2; }
	$(SLIPWAY) image push --repo $(IMAGE_REPO) --tag $(IMAGE_CPU) --gpu-tag $(IMAGE_GPU)

tools: $(TOOLS_STAMP) ## install checkov into its own venv (.venv-tools): it would downgrade packages in .venv

$(TOOLS_STAMP):
	@test -x $(TOOLS_VENV)/bin/python || $(PYTHON_BIN) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS_VENV)/bin/python -m pip install --quiet "checkov==$(CHECKOV_VERSION)"
	@rm -f $(TOOLS_VENV)/.installed-*
	@touch $@

# The dashboard's check against Grafana's published schema (tools/grafana-schema): @grafana/schema's types and the
# TypeScript compiler, the versions package-lock.json pins, installed with npm into tools/grafana-schema/node_modules.
GRAFANA_SCHEMA_DIR   := tools/grafana-schema
GRAFANA_SCHEMA_STAMP := $(GRAFANA_SCHEMA_DIR)/node_modules/.installed
.PHONY: dashboard-schema
dashboard-schema: $(GRAFANA_SCHEMA_STAMP) ## install what checks the Grafana dashboard against @grafana/schema (npm ci in tools/grafana-schema; Node.js 18+)

$(GRAFANA_SCHEMA_STAMP): $(GRAFANA_SCHEMA_DIR)/package.json $(GRAFANA_SCHEMA_DIR)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null && node -e 'process.exit(process.versions.node.split(".")[0] >= 18 ? 0 : 1)' \
	  || { echo "make dashboard-schema: Node.js 18+ with npm is needed (found: $$(node --version 2>/dev/null || echo no node)$$(command -v npm >/dev/null || echo ', no npm')): install nodejs and npm with your package manager" >&2; exit 2; }
	npm ci --prefix $(GRAFANA_SCHEMA_DIR) --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

# --- model store: python -m export versions ---------------------------------------------
.PHONY: publish versions promote rollback gc

publish: setup ## publish MODEL_DIR as the next version of its model (MODEL_NAME= renames it) in STORE (TAG= to tag it)
	$(SLIPWAY) versions publish $(MODEL_DIR) $(call flag,--model,$(MODEL_NAME)) $(call flag,--store,$(STORE)) $(call flag,--tag,$(TAG))

versions: setup ## list the versions in STORE, newest first
	$(SLIPWAY) versions list $(call flag,--store,$(STORE))

promote: setup ## point TAG at VERSION of MODEL_NAME (make promote TAG=champion VERSION=3)
	@test -n "$(TAG)" -a -n "$(VERSION)" || { echo "usage: make promote TAG=champion VERSION=3" >&2; exit 2; }
	$(SLIPWAY) versions promote $(TAG) $(MODEL_NAME):$(VERSION) $(call flag,--store,$(STORE))

rollback: setup ## move TAG of MODEL_NAME back to its previous version, then redeploy it (TAG=champion)
	@test -n "$(TAG)" || { echo "usage: make rollback TAG=champion" >&2; exit 2; }
	$(SLIPWAY) versions rollback $(TAG) $(call flag,--model,$(MODEL_NAME)) $(call flag,--store,$(STORE))
	$(MAKE) deploy TAG=$(TAG)

gc: setup ## delete versions beyond the newest KEEP (default 5) of each model; never one a tag needs
	$(SLIPWAY) versions gc --keep $(KEEP) $(call flag,--store,$(STORE))

# --- benchmarks/ (python -m benchmarks serving, gpu): serving benchmarks (issue 4) ---------
BENCH_ARGS     ?=
BENCH_GPU_ARGS ?=
BENCH_PEERS_ARGS ?=

bench: setup ## raw ONNX Runtime vs a plain MLServer runtime vs ours, digits + MobileNetV2 (reports/bench.json, docs/benchmarks.md)
	flock $(BENCH_LOCK) $(SLIPWAY) bench $(BENCH_ARGS)

bench-peers: setup ## Slipway's runtime vs KServe 0.21 vs PyTriton 0.7 (own venvs in build/peers), one client (reports/bench-peers.json, docs/benchmarks.md)
	flock $(BENCH_LOCK) $(SLIPWAY) bench-peers $(BENCH_PEERS_ARGS)

bench-gpu: ## on a GPU machine: CPU vs CUDA vs TensorRT, fp32/fp16/int8, IOBinding, batch 1/32, served vs the CUDA limit with fp32 and uint8 inputs (reports/gpu.json)
	@if command -v nvidia-smi >/dev/null; then $(MAKE) setup GPU=1; else $(MAKE) setup; fi
	flock $(BENCH_LOCK) $(SLIPWAY) bench-gpu $(BENCH_GPU_ARGS)

clean: ## remove build outputs and reports (keeps .venv and the records kept in git, reports/gpu.*, cluster-hpa.*, cluster-hpa-kserve.*, keda-scaling.* and kserve-cluster.json)
	@if [ -f build/cluster/state.json ]; then $(PY) -m localcluster down; fi
	rm -rf build .pytest_cache
	find reports -mindepth 1 -not -name 'gpu.*' -not -name 'cluster-hpa.*' -not -name 'cluster-hpa-kserve.*' -not -name 'keda-scaling.*' -not -name 'kserve-cluster.json' -delete 2>/dev/null || true
