#!/usr/bin/env bash
# Creates the world-readable Python environment that sandboxed IPython kernels run in.
# It lives outside /root (closed to the kernels' unprivileged uids) and is separate from the
# service's venv, so no service package or secret is visible inside a kernel. Idempotent: a
# second run only checks the stamp and returns.
set -euo pipefail

KERNEL_ENV=${AGENTSTATION_SANDBOX_KERNEL_ENV:-/opt/agentstation/kernel-env}
BASE_PY=${KERNEL_BASE_PYTHON:-/usr/bin/python3}
# mcp: so MCP servers written with the official SDK can run over stdio inside the sandbox.
PACKAGES=("ipykernel>=6.29" "numpy" "matplotlib" "mcp>=2.3,<3")
STAMP="$KERNEL_ENV/.agentstation-kernel-env"
WANT="v1 ${PACKAGES[*]}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$KERNEL_ENV/bin/python" ]; then
  exit 0
fi

if [ ! -x "$BASE_PY" ]; then
  # Outside Debian-like hosts fall back to whatever python3 is on PATH.
  BASE_PY=$(command -v python3)
fi

mkdir -p "$(dirname "$KERNEL_ENV")"
[ -x "$KERNEL_ENV/bin/python" ] || "$BASE_PY" -m venv "$KERNEL_ENV"
"$KERNEL_ENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
# Byte-compile now: the kernels cannot write __pycache__ into a read-only environment.
"$KERNEL_ENV/bin/python" -m compileall -q "$KERNEL_ENV/lib" >/dev/null 2>&1 || true
# Build matplotlib's font cache once, into a readable place inside the environment.
MPLCONFIGDIR="$KERNEL_ENV/share/mplconfig" "$KERNEL_ENV/bin/python" -c \
  "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot" >/dev/null 2>&1 || true
chmod -R a+rX "$(dirname "$KERNEL_ENV")"
echo "$WANT" >"$STAMP"
echo "kernel environment ready: $KERNEL_ENV"
