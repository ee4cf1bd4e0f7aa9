#!/usr/bin/env bash
# Run the test suite against the LOWEST versions pyproject.toml allows.
#
# Builds .venv-lowest (apart from .venv), pins every runtime dependency of
# [project].dependencies to its lower bound (a constraints file derived from
# pyproject.toml each run, so it cannot drift from it), installs the project
# with its test extras (the test tools themselves float), and runs pytest.
# Extra arguments go to pytest (default: the whole suite, -q); --api-subset
# runs only the test files where lovia-mcp meets its dependencies' APIs
# (what CI runs: the whole suite a second time would double CI's time).
#
#   bash scripts/test-lowest.sh                  # the whole suite
#   bash scripts/test-lowest.sh --api-subset     # the API subset, -q
#   bash scripts/test-lowest.sh tests/protocol/test_http.py -q
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-lowest
CONSTRAINTS="$VENV/lowest-constraints.txt"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" scripts/lowest_constraints.py pyproject.toml > "$CONSTRAINTS.new"
mv "$CONSTRAINTS.new" "$CONSTRAINTS"
echo "lowest versions (from pyproject.toml):" >&2
sed 's/^/  /' "$CONSTRAINTS" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" -e ".[test]"
# Fail here, not in the tests, if pip resolved anything but the lower bounds.
"$VENV/bin/python" scripts/lowest_constraints.py --check "$CONSTRAINTS"
# The third-party servers the suite starts live outside any venv (.cache/).
bash scripts/thirdparty.sh
# The files that exercise lovia's API (plugin, tools, approval, rendering,
# deferred tools, configs), the MCP SDK's (HTTP), msgspec's (the wire, typed
# stubs under mypy), psutil's (the tree watch, stats), OpenTelemetry's (spans,
# the duration metric) and the SDK's server side (the gateway).
API_SUBSET=(
  tests/plugin/test_exports.py tests/project/test_types.py tests/plugin/test_plugin.py tests/plugin/test_results.py
  tests/plugin/test_deferred.py tests/plugin/test_lovia_configs.py tests/plugin/test_config.py tests/plugin/test_names.py
  tests/plugin/test_annotations.py tests/plugin/test_list_changed.py tests/protocol/test_http.py
  tests/protocol/test_framing.py tests/protocol/test_jsonrpc_core.py tests/protocol/test_protocol_abuse.py
  tests/plugin/test_stats.py tests/supervision/test_limits.py tests/supervision/test_tree_walk.py
  tests/plugin/test_tracing.py tests/gateway/test_gateway_clients.py tests/gateway/test_gateway_auth.py
  tests/gateway/test_gateway_routes.py tests/gateway/test_gateway_sessions.py tests/gateway/test_gateway_containment.py
  tests/gateway/test_gateway_outcomes.py tests/gateway/test_gateway_notify.py
)
if [ "${1:-}" = "--api-subset" ]; then
  shift
  set -- "${API_SUBSET[@]}" -q "$@"
elif [ "$#" -eq 0 ]; then
  set -- -q
fi
exec "$VENV/bin/python" -m pytest "$@"
