#!/usr/bin/env bash
# The LiteLLM proxy for bench/proxy.py, in its own venv (never in the project's .venv).
# 1.106.2 is the version the issue measured (1.107.0 was a compromised release: do not use).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python3.11}
[ -x .venv-litellm/bin/python ] || "$PY" -m venv .venv-litellm
.venv-litellm/bin/pip install -q "litellm[proxy]==1.106.2"
LITELLM_LOCAL_MODEL_COST_MAP=True .venv-litellm/bin/litellm --help >/dev/null
echo "LiteLLM installed in bench/.venv-litellm"
