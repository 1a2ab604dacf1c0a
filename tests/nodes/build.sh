#!/usr/bin/env bash
# Builds the binaries a real Kubernetes node needs besides kubelet and kube-proxy (those come
# from tests/controlplane/build.sh, same k8s module as the API server): containerd with its
# runc shim and ctr, runc, and the CNI plugins bridge, host-local, loopback and portmap. Each
# comes from a pinned Go module in this directory (no release downloads here) and is cached
# outside the clone, one directory per module version and Go version:
#
#   ${REDLOCK_CACHE:-~/.cache/redlock-operator}/containerd-<v>_<go>/bin/{containerd,containerd-shim-runc-v2,ctr}
#   ${REDLOCK_CACHE:-~/.cache/redlock-operator}/runc-<v>_<go>/bin/runc
#   ${REDLOCK_CACHE:-~/.cache/redlock-operator}/cni-plugins-<v>_<go>/bin/{bridge,host-local,loopback,portmap}
#
# and linked into target/dev/bin/ (containerd, containerd-shim-runc-v2, ctr, runc) and
# target/dev/cni/bin/ (the plugins: containerd's CNI `bin_dirs` wants a directory of them).
# A second run with the same versions only re-links. Why these versions and flags:
# /work/shared/reference/real-node-notes.md, sections 2 and 4.
#
#   tests/nodes/build.sh             build (or reuse) and link
#   tests/nodes/build.sh --print-dir print the three cache directories (containerd, runc,
#                                    cni-plugins; one a line) and exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

mod_version() { # module go.mod-dir -> pinned version
  awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$2/go.mod"
}
containerd_v=$(mod_version github.com/containerd/containerd/v2 "$here/containerd")
runc_v=$(mod_version github.com/opencontainers/runc "$here/runc")
cni_v=$(mod_version github.com/containernetworking/plugins "$here/cni")
go_ver=$(go env GOVERSION)
root="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}"
containerd_cache="$root/containerd-${containerd_v}_${go_ver}"
runc_cache="$root/runc-${runc_v}_${go_ver}"
cni_cache="$root/cni-plugins-${cni_v}_${go_ver}"

if [[ "${1:-}" == "--print-dir" ]]; then
  printf '%s\n' "$containerd_cache" "$runc_cache" "$cni_cache"
  exit 0
fi

containerd_bins=(containerd containerd-shim-runc-v2 ctr)
runc_bins=(runc)
cni_bins=(bridge host-local loopback portmap)

# go build of one binary: build_one NAME OUTPUT (run inside the binary's module directory).
build_one() {
  local cver=github.com/containerd/containerd/v2/version.Version
  local cniver=github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion
  local cni=github.com/containernetworking/plugins/plugins
  case "$1" in
    # containerd: pure Go (CGO_ENABLED=0). The CRI plugin is built in by default; btrfs needs
    # cgo and is left out (no_btrfs says so explicitly); urfave_cli_no_docs drops the man-page
    # generator. Without -X the version would read "2.4.2+unknown".
    containerd)
      CGO_ENABLED=0 go build -trimpath -tags "no_btrfs urfave_cli_no_docs" \
        -ldflags "-s -w -X $cver=$containerd_v" -o "$2" github.com/containerd/containerd/v2/cmd/containerd ;;
    # The shim as containerd's Makefile builds it (SHIM_CGO_ENABLED=0, tags no_grpc: it talks
    # ttrpc only). containerd finds it next to its own (symlink-resolved) executable.
    containerd-shim-runc-v2)
      CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_grpc" \
        -ldflags "-s -w -X $cver=$containerd_v" -o "$2" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 ;;
    ctr)
      CGO_ENABLED=0 go build -trimpath -tags urfave_cli_no_docs \
        -ldflags "-s -w -X $cver=$containerd_v" -o "$2" github.com/containerd/containerd/v2/cmd/ctr ;;
    # runc needs cgo (libcontainer/nsenter is C) and libseccomp for the seccomp tag. The
    # Makefile's default tags also include libpathrs, a Rust library Debian does not ship;
    # without it runc uses its pure-Go path resolution. The version comes from an embedded file.
    runc)
      CGO_ENABLED=1 go build -trimpath -tags "seccomp urfave_cli_no_docs" \
        -ldflags "-s -w" -o "$2" github.com/opencontainers/runc ;;
    # CNI plugins: pure Go; -X sets what `<plugin> --version`-style output reports.
    bridge | loopback)
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $cniver=$cni_v" -o "$2" "$cni/main/$1" ;;
    host-local)
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $cniver=$cni_v" -o "$2" "$cni/ipam/$1" ;;
    portmap)
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $cniver=$cni_v" -o "$2" "$cni/meta/$1" ;;
    *) echo "build.sh: no build rule for $1" >&2; return 1 ;;
  esac
}

# ensure_built CACHE MODULE-DIR BIN...: builds the BINs missing from CACHE/bin, like
# tests/controlplane/build.sh: into bin.partial, moved into bin/ only when every build
# succeeded (an interrupted build never looks cached), and the time added to build-seconds.
ensure_built() {
  local cache=$1 dir=$2 b start b_start took
  shift 2
  local missing=()
  for b in "$@"; do [[ -x "$cache/bin/$b" ]] || missing+=("$b"); done
  ((${#missing[@]})) || return 0
  echo "building ${missing[*]} ($(basename "$cache")) into $cache/bin" >&2
  mkdir -p "$cache/bin.partial"
  start=$(date +%s)
  for b in "${missing[@]}"; do
    b_start=$(date +%s)
    (cd "$dir" && build_one "$b" "$cache/bin.partial/$b")
    echo "  built $b in $(( $(date +%s) - b_start ))s" >&2
  done
  mkdir -p "$cache/bin"
  for b in "${missing[@]}"; do mv "$cache/bin.partial/$b" "$cache/bin/$b"; done
  rmdir "$cache/bin.partial" 2>/dev/null || true
  took=$(( $(date +%s) - start ))
  # Time spent building everything in this cache (a run that only adds binaries adds to it).
  echo "$(( $(cat "$cache/build-seconds" 2>/dev/null || echo 0) + took ))" > "$cache/build-seconds"
  echo "build took ${took}s ($(cat "$cache/build-seconds")s in total for $(basename "$cache"))" >&2
}

# runc is the only cgo build: it needs a C compiler, pkg-config and libseccomp's headers.
# CI starts from a fresh Debian machine, so install them here, and only when runc must be
# built (a warm cache needs nothing; the built runc links libseccomp.so.2, which apt itself
# depends on, so it is always installed).
if [[ ! -x "$runc_cache/bin/runc" ]]; then
  need=()
  command -v gcc >/dev/null || need+=(gcc)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  [[ -f /usr/include/seccomp.h ]] || need+=(libseccomp-dev)
  if ((${#need[@]})); then
    echo "installing ${need[*]} (to build runc)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  fi
fi

ensure_built "$containerd_cache" "$here/containerd" "${containerd_bins[@]}"
ensure_built "$runc_cache" "$here/runc" "${runc_bins[@]}"
ensure_built "$cni_cache" "$here/cni" "${cni_bins[@]}"

mkdir -p "$repo/target/dev/bin" "$repo/target/dev/cni/bin"
for b in "${containerd_bins[@]}"; do ln -sfn "$containerd_cache/bin/$b" "$repo/target/dev/bin/$b"; done
for b in "${runc_bins[@]}"; do ln -sfn "$runc_cache/bin/$b" "$repo/target/dev/bin/$b"; done
for b in "${cni_bins[@]}"; do ln -sfn "$cni_cache/bin/$b" "$repo/target/dev/cni/bin/$b"; done
# tests/controlplane/build.sh owns target/dev/bin/VERSIONS; the node binaries get their own file.
printf '%s\n' "$(basename "$containerd_cache")" "$(basename "$runc_cache")" "$(basename "$cni_cache")" \
  > "$repo/target/dev/bin/VERSIONS.nodes"
