#!/usr/bin/env bash
# Installs the lock clients whose printed snippets tests/client_snippets.rs runs. The Python
# clients of tests/clients/requirements.txt (pinned, from PyPI) go into
# a virtualenv cached outside the clone, keyed by the requirements and the Python version, and
# links its interpreter into target/dev/bin/clients-python (tests/client_snippets.rs runs the
# printed snippets with it). A second run with the same requirements only re-links.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py_ver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$(cat "$here/requirements.txt" | sha256sum | cut -c1-16)
venv="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/python-clients-${key}_py${py_ver}"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "installing the Python lock clients into $venv" >&2
  rm -rf "$venv.partial"
  python3 -m venv "$venv.partial"
  "$venv.partial/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  # Moved into place once complete: a run cut off mid-install leaves no venv that looks whole.
  # (Its pip script names the .partial path; only its python is used.)
  mv "$venv.partial" "$venv"
fi
# A wrapper, not a link: the venv's python finds its site-packages by its own path
# (pyvenv.cfg beside it), and a link elsewhere would not.
mkdir -p "$repo/target/dev/bin"
rm -f "$repo/target/dev/bin/clients-python"
printf '#!/bin/sh\nexec "%s/bin/python" "$@"\n' "$venv" > "$repo/target/dev/bin/clients-python"
chmod +x "$repo/target/dev/bin/clients-python"
"$repo/target/dev/bin/clients-python" -c 'import pottery, redlock, redis'

# node-redlock and ioredis at the versions the safety suite's Node worker pins (its
# package-lock.json), installed into their own directory outside the clone: the safety suite
# runs `npm ci` in its worker's directory, which wipes node_modules there, and may do so while
# a snippet runs. target/dev/bin/clients-node is node with that node_modules on NODE_PATH.
worker="$repo/tests/safety/node-worker"
node_key=$(cat "$worker/package.json" "$worker/package-lock.json" | sha256sum | cut -c1-16)
node_dir="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/node-clients-${node_key}"
if [[ ! -d "$node_dir/node_modules/redlock" ]]; then
  echo "installing the Node lock clients into $node_dir" >&2
  rm -rf "$node_dir.partial"
  mkdir -p "$node_dir.partial"
  cp "$worker/package.json" "$worker/package-lock.json" "$node_dir.partial/"
  (cd "$node_dir.partial" && npm ci --no-audit --no-fund --loglevel=error)
  rm -rf "$node_dir"
  mv "$node_dir.partial" "$node_dir"
fi
rm -f "$repo/target/dev/bin/clients-node"
printf '#!/bin/sh\nNODE_PATH="%s/node_modules" exec node "$@"\n' "$node_dir" > "$repo/target/dev/bin/clients-node"
chmod +x "$repo/target/dev/bin/clients-node"
"$repo/target/dev/bin/clients-node" -e 'require("redlock"); require("ioredis")'
