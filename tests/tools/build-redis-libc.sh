#!/usr/bin/env bash
# Builds a redis-server that runs under libfaketime, for the tests that step a member's clock.
#
# Debian's redis-server is linked with jemalloc, whose initialisation calls clock_gettime()
# before libfaketime is ready; libfaketime then aborts the process ("Unexpected recursive
# calls to clock_gettime()"). The same source built with MALLOC=libc runs under it. The source
# is the Debian source package of the installed redis-server (only Debian mirrors are
# reachable), built once and cached outside the clone:
#   ~/.cache/redlock-operator/redis-libc/<debian version>/redis-server
# The last line on stdout is that path. Idempotent.
set -euo pipefail

version=$(dpkg-query -W -f='${Version}' redis-server)
cache="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/redis-libc/$version"
if [ -x "$cache/redis-server" ]; then
  echo "$cache/redis-server"
  exit 0
fi

need=()
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v make >/dev/null || need+=(make)
command -v cc >/dev/null || need+=(gcc)
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
src_list=/etc/apt/sources.list.d/redlock-operator-deb-src.sources
if [ ! -f "$src_list" ]; then
  # The source packages of the suites the machine installs from.
  cat > "$src_list" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  apt-get update -qq >&2
fi
if ((${#need[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq "redis=$version" >&2)
dir=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'redis-*' | head -1)
[ -n "$dir" ] || { echo "no redis source unpacked in $work" >&2; exit 1; }
make -C "$dir/src" -j"$(nproc)" MALLOC=libc BUILD_TLS=yes redis-server >&2
mkdir -p "$cache"
cp "$dir/src/redis-server" "$cache/redis-server.tmp"
mv "$cache/redis-server.tmp" "$cache/redis-server"
echo "$cache/redis-server"
