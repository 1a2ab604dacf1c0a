#!/usr/bin/env bash
# Builds the images real nodes need as OCI tarballs for `ctr -n k8s.io images import <tar>`,
# without a container daemon or registry: the pause image, Redis and Valkey from Debian
# packages, and (only when named) the operator. Cached outside the clone in
# ${REDLOCK_CACHE:-~/.cache/redlock-operator}/images-<name>-<key>/image.tar, linked into
# target/dev/images/<name>.tar; target/dev/images/IMAGES lists file, reference and cache entry.
#
#   tests/nodes/images.sh                  pause, redis-6.2 (built from source), redis-7.0,
#                                          redis-8.0, valkey-8.1, valkey-9.1,
#                                          redis-7.0-faketime (tests only: follows its node's clock)
#   tests/nodes/images.sh operator         the operator image (a release build for musl)
#   tests/nodes/images.sh --refresh ...    re-read the Debian package lists first
#   tests/nodes/images.sh --check ...      run the linked images' programs again
#   tests/nodes/images.sh --help           every image and its reference
#
# stdout: one "<reference> <tar>" line per image. Needs root (dpkg-deb, chroot checks).
# The logic is in images.py next to this file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec python3 "$here/images.py" "$@"
