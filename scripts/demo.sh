#!/usr/bin/env bash
# Set up everything on a fresh machine, then run the demo (offline, no API key).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m lovia_mcp demo "$@"
