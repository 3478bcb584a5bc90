#!/usr/bin/env bash
# The anchor of bench/responses_chains.py --anchor: `agentic-api` (the vLLM project's Rust
# gateway for the Responses API; its wheel carries the binary) in its own venv, never in the
# project's .venv. It runs in front of vLLM's own OpenAI server.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python3.11}
[ -x .venv-anchor/bin/python ] || "$PY" -m venv .venv-anchor
.venv-anchor/bin/pip install -q --disable-pip-version-check "agentic-api==0.9.0"
.venv-anchor/bin/agentic-server --version
echo "agentic-api installed in bench/.venv-anchor"
