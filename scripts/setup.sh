#!/usr/bin/env bash
# Create .venv (if missing) and install the project with its test extras.
# Idempotent; used by scripts/test.sh and scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
.venv/bin/python -c "import lovia_mcp, lovia_mcp_worker.session.host" # fail early if the install did not take
