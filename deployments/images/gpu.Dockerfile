# Slipway's GPU serving image: MLServer + Slipway's ONNX runtime + onnxruntime-gpu on CUDA 13 and
# cuDNN 9, with TensorRT 10 for ONNX Runtime's TensorRT provider. No TensorFlow (it is built for
# CUDA 12 and stays in the training image). Build from the repository root:
#   docker build -f deployments/images/gpu.Dockerfile -t slipway/mlserver-onnx-gpu:0.1.0 .
FROM ghcr.io/astral-sh/uv:0.9.5 AS uv

FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 AS build
COPY --from=uv /uv /usr/local/bin/uv
# A self-contained CPython 3.11 (the CUDA images ship another Python, or none).
ENV UV_PYTHON_INSTALL_DIR=/opt/python UV_NO_CACHE=1
WORKDIR /src
# constraints.txt (`make lock`) pins every package: two builds a month apart install the same versions.
COPY pyproject.toml README.md constraints.txt ./
COPY slipway ./slipway
COPY engine ./engine
COPY wrappers ./wrappers
RUN uv venv --python 3.11 /opt/slipway \
 && uv pip install --python /opt/slipway/bin/python -c constraints.txt ".[gpu]" "tensorrt-cu13-libs==10.16.*" \
 && uv pip check --python /opt/slipway/bin/python

FROM nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
LABEL org.opencontainers.image.title="slipway-mlserver-onnx-gpu" \
      org.opencontainers.image.description="MLServer with Slipway's ONNX Runtime runtime (CUDA 13, cuDNN 9, TensorRT 10)"
COPY --from=build /opt/python /opt/python
COPY --from=build /opt/slipway /opt/slipway
# JSON log lines: the manifests point MLSERVER_LOGGING_SETTINGS here (wrappers/operations/json_logs.py).
COPY --from=build /src/wrappers/logging.json /etc/slipway/logging.json
RUN groupadd --gid 10001 slipway && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin slipway
ENV PATH=/opt/slipway/bin:$PATH \
    LD_LIBRARY_PATH=/opt/slipway/lib/python3.11/site-packages/tensorrt_libs:$LD_LIBRARY_PATH \
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
HEALTHCHECK --interval=30s --timeout=3s CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MLSERVER_HTTP_PORT', '8080') + '/v2/health/live', timeout=2)"]
EXPOSE 9000 9500 6000
# Slipway's launcher: `mlserver start` with MLServer's own settings, building MLServer's server itself so the
# runtime gets its REST app and gRPC server directly; exits non-zero naming why a model failed to load.
# /mnt/models: one artifact folder, or a folder of them (each model with its own model-settings.json).
CMD ["python", "-m", "wrappers.launch", "/mnt/models"]
