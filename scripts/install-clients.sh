#!/usr/bin/env bash
# Installs the real Responses API clients that the tests drive against a live server:
#   - OpenAI's Codex CLI from npm into the project's own prefix (.tools/codex), and
#   - the OpenAI Agents SDK in a virtualenv of its own (.venv-agents-sdk): it imports as
#     `agents`, the same name as this project's library, so it cannot live in .venv.
# (Its scripts run with `python -I`, so the checkout's agents/ is not on sys.path.)
# Both paths are gitignored. Idempotent: a second run checks the stamps and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

CODEX_PREFIX=${AGENTSTATION_CODEX_PREFIX:-.tools/codex}
CODEX_VERSION=0.171.0
AGENTS_SDK_VENV=${AGENTSTATION_AGENTS_SDK_VENV:-.venv-agents-sdk}
AGENTS_SDK_PACKAGES=("openai-agents==0.24.0" "jupyter_client==8.10.0")
BASE_PY=${PY:-python3.11}

if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi

# Codex CLI: the npm package carries its Linux binary (@openai/codex-linux-x64 comes along).
codex_stamp="$CODEX_PREFIX/.agentstation-codex"
if [ ! -f "$codex_stamp" ] || [ "$(cat "$codex_stamp")" != "$CODEX_VERSION" ] \
  || [ ! -x "$CODEX_PREFIX/node_modules/.bin/codex" ]; then
  if command -v npm >/dev/null; then
    mkdir -p "$CODEX_PREFIX"
    npm install --silent --no-fund --no-audit --prefix "$CODEX_PREFIX" "@openai/codex@$CODEX_VERSION"
    "$CODEX_PREFIX/node_modules/.bin/codex" --version
    echo "$CODEX_VERSION" >"$codex_stamp"
  else
    echo "ERROR: npm not found; Codex CLI (@openai/codex) cannot be installed" >&2
    exit 1
  fi
fi

# The OpenAI Agents SDK in its own venv.
sdk_stamp="$AGENTS_SDK_VENV/.agentstation-agents-sdk"
sdk_want="v1 ${AGENTS_SDK_PACKAGES[*]}"
if [ ! -f "$sdk_stamp" ] || [ "$(cat "$sdk_stamp")" != "$sdk_want" ] \
  || [ ! -x "$AGENTS_SDK_VENV/bin/python" ]; then
  [ -x "$AGENTS_SDK_VENV/bin/python" ] || "$BASE_PY" -m venv "$AGENTS_SDK_VENV"
  "$AGENTS_SDK_VENV/bin/python" -m pip install -q --disable-pip-version-check "${AGENTS_SDK_PACKAGES[@]}"
  "$AGENTS_SDK_VENV/bin/python" -I -c "import agents, openai; print('openai-agents', agents.__version__)"
  echo "$sdk_want" >"$sdk_stamp"
fi
