# Slipway's CPU serving image: MLServer + Slipway's ONNX runtime (the `wrappers` package) + onnxruntime.
# Only the `serve` extra is installed: no TensorFlow, no training code. Build from the repository root:
#   docker build -f deployments/images/cpu.Dockerfile -t slipway/mlserver-onnx:0.1.0 .
# Both stages start from `base`, the public image any other build pulls. `make image` builds it without a Docker
# engine (buildah) on a Python 3.11 base made from Debian bookworm's packages instead (deployments/rollout/
# image_build.py), put in place of this first FROM (`buildah build --from`): the tag stays written here, pinned.
FROM python:3.11.14-slim-bookworm AS base

FROM base AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The CA bundle pip trusts where the builder's network needs its own (`make image` mounts the host's for the RUN steps
# only and names it here): an argument of this stage, so it is in no layer of the image.
ARG PIP_CERT
WORKDIR /src
# constraints.txt (`make lock`) pins every package: two builds a month apart install the same versions.
COPY pyproject.toml README.md constraints.txt ./
COPY slipway ./slipway
COPY engine ./engine
COPY wrappers ./wrappers
RUN python -m venv /opt/slipway \
 && /opt/slipway/bin/pip install -c constraints.txt ".[serve]" \
 && /opt/slipway/bin/pip check

FROM base
LABEL org.opencontainers.image.title="slipway-mlserver-onnx" \
      org.opencontainers.image.description="MLServer with Slipway's ONNX Runtime runtime (CPU)"
COPY --from=build /opt/slipway /opt/slipway
# JSON log lines: the manifests point MLSERVER_LOGGING_SETTINGS here (wrappers/operations/json_logs.py).
COPY --from=build /src/wrappers/logging.json /etc/slipway/logging.json
# The user the manifests run as (runAsUser 10001); it owns nothing it could change at run time.
RUN groupadd --gid 10001 slipway && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin slipway
ENV PATH=/opt/slipway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MLSERVER_METRICS_DIR=/tmp/mlserver-metrics
# As slipway/server_process.py starts MLServer: no access line per request and MLServer at INFO, not DEBUG
# (MLServer's default debug), no level-9 gzip of responses on the event loop, and
# freed blocks under 16 MB stay in the heap instead of being mapped again for every request.
ENV MLSERVER_DEBUG=false \
    MLSERVER_GZIP_ENABLED=false \
    MALLOC_MMAP_THRESHOLD_=16777216 \
    MALLOC_TRIM_THRESHOLD_=67108864
# MLServer imports this before it builds its servers: it refuses the model repository API (load, unload)
# unless SLIPWAY_REPOSITORY_API=open (slipway/repository_access.py); the runtime does not load without it.
ENV MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION=wrappers.repository_api.GuardedRepository
WORKDIR /tmp
USER 10001:10001
# Kubernetes uses the manifests' probes; this serves `docker run` and other engines.
HEALTHCHECK --interval=30s --timeout=3s CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MLSERVER_HTTP_PORT', '8080') + '/v2/health/live', timeout=2)"]
EXPOSE 9000 9500 6000
# Slipway's launcher: `mlserver start` with MLServer's own settings, building MLServer's server itself so the
# runtime gets its REST app and gRPC server directly; exits non-zero naming why a model failed to load.
# /mnt/models: one artifact folder, or a folder of them (each model with its own model-settings.json).
CMD ["python", "-m", "wrappers.launch", "/mnt/models"]
