#!/usr/bin/env bash
# Creates the Python environment of Arize Phoenix, the trace store of the tracing acceptance
# test (tests/ops/test_tracing_phoenix.py) and a local trace viewer (docs/observability.md).
# Its own venv: arize-phoenix would move the service's pinned packages (it needs
# fastapi>=0.165; pyproject pins fastapi<0.137) and adds ~60 packages (~850 MB) the service
# never imports. Idempotent: a second run only checks the stamp and returns.
set -euo pipefail

PHOENIX_ENV=${AGENTSTATION_PHOENIX_ENV:-/opt/agentstation/phoenix-env}
BASE_PY=${PY:-python3.11}
PACKAGES=("arize-phoenix==20.26.1" "arize-phoenix-client==3.5.0")
STAMP="$PHOENIX_ENV/.agentstation-phoenix-env"
WANT="v1 ${PACKAGES[*]}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$PHOENIX_ENV/bin/phoenix" ]; then
  exit 0
fi
command -v "$BASE_PY" >/dev/null || BASE_PY=$(command -v python3)
mkdir -p "$(dirname "$PHOENIX_ENV")"
[ -x "$PHOENIX_ENV/bin/python" ] || "$BASE_PY" -m venv "$PHOENIX_ENV"
"$PHOENIX_ENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
echo "$WANT" >"$STAMP"
echo "phoenix environment ready: $PHOENIX_ENV"
