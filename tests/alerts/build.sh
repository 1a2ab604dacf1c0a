#!/usr/bin/env bash
# Builds promtool (`promtool check rules` / `promtool test rules` for the chart's alert rules,
# tests/alerts.rs) from the pinned Prometheus Go module in promtool/, like
# tests/controlplane/build.sh: no release downloads, cached outside the clone keyed by the
# module version and the Go version, and linked into target/dev/bin/:
#
#   ${REDLOCK_CACHE:-~/.cache/redlock-operator}/promtool-<module version>_<go>_nosd/bin/promtool
#
# Built with the module's `remove_all_sd` tag: the tests only check and test rules, and the
# service-discovery plugins (cloud SDKs, client-go) were most of a cold build's time.
#
# A second run with the same versions only re-links.
#
#   tests/alerts/build.sh             build (or reuse) and link
#   tests/alerts/build.sh --print-dir print the cache directory and exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

mod_version() { # module go.mod-dir -> pinned version
  awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$2/go.mod"
}
prom=$(mod_version github.com/prometheus/prometheus "$here/promtool")
go_ver=$(go env GOVERSION)
cache="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/promtool-${prom}_${go_ver}_nosd"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$cache"; exit 0; fi

if [[ ! -x "$cache/bin/promtool" ]]; then
  echo "building promtool (prometheus ${prom}, ${go_ver}) into $cache/bin" >&2
  mkdir -p "$cache/bin.partial"
  start=$(date +%s)
  # The module's v0.3XX.Y is Prometheus 3.XX.Y; -X makes `promtool --version` say so.
  minor=${prom#v0.}; minor=${minor%%.*}
  release="3.$((10#${minor} - 300)).${prom##*.}"
  (cd "$here/promtool" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${release}" \
    -o "$cache/bin.partial/promtool" github.com/prometheus/prometheus/cmd/promtool)
  mkdir -p "$cache/bin"
  # Moved into place only when the build finished, so an interrupted build never looks cached.
  mv "$cache/bin.partial/promtool" "$cache/bin/promtool"
  rmdir "$cache/bin.partial" 2>/dev/null || true
  took=$(( $(date +%s) - start ))
  echo "$took" > "$cache/build-seconds"
  echo "built promtool in ${took}s" >&2
fi

mkdir -p "$repo/target/dev/bin"
ln -sfn "$cache/bin/promtool" "$repo/target/dev/bin/promtool"
