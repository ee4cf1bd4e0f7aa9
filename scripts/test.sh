#!/usr/bin/env bash
# Set up everything on a fresh machine, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Third-party MCP servers for tests/project/test_thirdparty.py, outside .venv; a failed
# install fails the run here (set -e) rather than skipping those tests.
bash scripts/thirdparty.sh
# Lint and format are checked first: style is the linter's, not review's.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
