#!/usr/bin/env bash
# Builds the real Kubernetes control-plane binaries (and etcd, helm), plus the node binaries
# kubelet and kube-proxy, from their pinned Go modules in this directory, caches them outside
# the clone keyed by version, and links them into target/dev/bin/. A second run with the same
# versions only re-links; a run after a binary was added to `bins` builds only that one.
# Also gitops-health (tests/controlplane/gitops: kstatus and Argo CD's Lua on an object, for
# tests/gitops.rs), cached by its sources' hash. (containerd, runc and the CNI plugins come
# from tests/nodes/build.sh.)
#
#   tests/controlplane/build.sh            build (or reuse) and link
#   tests/controlplane/build.sh --print-dir print the cache directory and exit
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

mod_version() { # module go.mod-dir -> pinned version
  awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$2/go.mod"
}
k8s=$(mod_version k8s.io/kubernetes "$here/k8s")
etcd=$(mod_version go.etcd.io/etcd/server/v3 "$here/k8s")
helm=$(mod_version helm.sh/helm/v4 "$here/helm")
go_ver=$(go env GOVERSION)
# "stamped": the Kubernetes binaries carry their version (below); an unstamped build says
# v0.0.0-master, which a chart's kubeVersion constraint refuses.
key="k8s-${k8s}_etcd-${etcd}_helm-${helm}_${go_ver}_stamped"
cache="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/$key"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$cache"; exit 0; fi

bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd helm)
missing=()
for b in "${bins[@]}"; do [[ -x "$cache/bin/$b" ]] || missing+=("$b"); done

if ((${#missing[@]})); then
  echo "building ${missing[*]} ($key) into $cache/bin" >&2
  mkdir -p "$cache/bin.partial"
  start=$(date +%s)
  flags=(-trimpath -ldflags "-s -w")
  # What the Kubernetes release build stamps (hack/lib/version.sh), so that /version, kubelet
  # and kubectl report the pinned release: v1.37.1, major 1, minor 37.
  minor=${k8s#v1.}; minor=${minor%%.*}
  stamp="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X ${pkg}.gitVersion=${k8s} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    stamp+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  k8s_flags=(-trimpath -ldflags "$stamp")
  for b in "${missing[@]}"; do
    b_start=$(date +%s)
    case "$b" in
      etcd) (cd "$here/k8s" && go build "${flags[@]}" -o "$cache/bin.partial/etcd" go.etcd.io/etcd/server/v3) ;;
      helm) (cd "$here/helm" && go build "${flags[@]}" -o "$cache/bin.partial/helm" helm.sh/helm/v4/cmd/helm) ;;
      *) (cd "$here/k8s" && go build "${k8s_flags[@]}" -o "$cache/bin.partial/$b" "k8s.io/kubernetes/cmd/$b") ;;
    esac
    echo "  built $b in $(( $(date +%s) - b_start ))s" >&2
  done
  mkdir -p "$cache/bin"
  # Move into place only when each build finished, so an interrupted build never looks cached.
  for b in "${missing[@]}"; do mv "$cache/bin.partial/$b" "$cache/bin/$b"; done
  rmdir "$cache/bin.partial" 2>/dev/null || true
  took=$(( $(date +%s) - start ))
  # build-seconds is the time spent building everything in this cache (make bench-env reports
  # it as the cold build time), so a run that only added binaries adds its time to it.
  echo "$(( $(cat "$cache/build-seconds" 2>/dev/null || echo 0) + took ))" > "$cache/build-seconds"
  echo "build took ${took}s ($(cat "$cache/build-seconds")s in total for $key)" >&2
fi

mkdir -p "$repo/target/dev/bin"
for b in "${bins[@]}"; do ln -sfn "$cache/bin/$b" "$repo/target/dev/bin/$b"; done

# gitops-health (tests/gitops.rs): kstatus and the Argo CD health script's verdict on an
# object. Its own module, cached by its sources' hash, so an edit rebuilds it.
gitops_key="gitops-health-$(cat "$here/gitops/go.mod" "$here/gitops/go.sum" "$here/gitops/"*.go | sha256sum | cut -c1-16)_${go_ver}"
gitops="${REDLOCK_CACHE:-$HOME/.cache/redlock-operator}/$gitops_key"
if [[ ! -x "$gitops/gitops-health" ]]; then
  echo "building gitops-health ($gitops_key)" >&2
  mkdir -p "$gitops"
  (cd "$here/gitops" && go build -trimpath -ldflags "-s -w" -o "$gitops/gitops-health.partial" .)
  mv "$gitops/gitops-health.partial" "$gitops/gitops-health"
fi
ln -sfn "$gitops/gitops-health" "$repo/target/dev/bin/gitops-health"
echo "$key" > "$repo/target/dev/bin/VERSIONS"
