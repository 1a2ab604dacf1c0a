//! Which of the images built here (tests/nodes/images.sh, indexed in
//! `target/dev/images/IMAGES`) a control plane's real nodes import.
//!
//! Every import is a `ctr images import` into each node's own containerd, which hashes and
//! unpacks the whole image again. With all eight images that was about 40 % of the CPU of a
//! real-node test binary: `tests/lifecycle.rs` (8 tests, 26 nodes) spent 219 core-seconds
//! with every image and 156 with three, and ran in 129 s instead of 167 s. So a control plane
//! imports the pause image, the Redis image its clusters get when their spec names none
//! ([`crate::ControlPlane::redis_image`]) and what its config names; the environments people
//! use by hand (`make demo`, `dev-up`) and the version-matrix tests import every image.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The sandbox image every pod needs: its reference in the index starts with this.
const PAUSE_REPOSITORY: &str = "registry.k8s.io/pause:";

/// The images real nodes import besides the pause image and the default Redis image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeImages {
    /// Only these, as a pod names them (`redis:8.0`, `valkey/valkey:8.1`,
    /// `redlock-operator:dev`). A pod naming an image not imported never starts
    /// (`ErrImagePull`: the nodes pull from no registry).
    Also(Vec<String>),
    /// Every image built here.
    All,
}

impl Default for NodeImages {
    fn default() -> Self {
        Self::Also(Vec::new())
    }
}

/// The tarballs of `dir` that nodes import: every `*.tar` for [`NodeImages::All`], else the
/// pause image, `default_redis` and the named ones, found by reference in `dir/IMAGES`.
pub fn node_image_tarballs(dir: &Path, wanted: &NodeImages, default_redis: &str) -> Result<Vec<PathBuf>> {
    let extra = match wanted {
        NodeImages::All => return every_tarball(dir),
        NodeImages::Also(extra) => extra,
    };
    let index_path = dir.join("IMAGES");
    let index = std::fs::read_to_string(&index_path).with_context(|| {
        format!(
            "{} is missing: run `make nodes` (tests/nodes/images.sh) first",
            index_path.display()
        )
    })?;
    let mut refs = vec![default_redis.to_owned()];
    refs.extend(extra.iter().cloned());
    let files =
        pick(&index, &refs).with_context(|| format!("choosing images from {}", index_path.display()))?;
    let mut out = Vec::new();
    for file in files {
        let path = dir.join(&file);
        if !path.exists() {
            bail!(
                "{} is listed in {} but missing (its cache was removed?): run `make nodes` again",
                path.display(),
                index_path.display()
            );
        }
        out.push(path);
    }
    Ok(out)
}

/// The images of `dir` (`*.tar`), sorted.
fn every_tarball(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "{} is missing: run `make nodes` (tests/nodes/images.sh) first",
                dir.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tar"))
        .collect();
    out.sort();
    Ok(out)
}

/// The tarball names (first column of the index) of the pause image and of `refs`, in the
/// index's order, each once. An index line is `<file> <full reference> <cache key>`.
fn pick(index: &str, refs: &[String]) -> Result<Vec<String>> {
    let entries: Vec<(&str, &str)> = index
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?))
        })
        .collect();
    let wanted: Vec<String> = refs.iter().map(|r| full_reference(r)).collect();
    for (given, full) in refs.iter().zip(&wanted) {
        if !entries.iter().any(|(_, r)| r == full) {
            let built: Vec<&str> = entries.iter().map(|(_, r)| *r).collect();
            bail!(
                "image {given:?} ({full}) is not built here; built: {} (tests/nodes/images.sh builds them)",
                built.join(", ")
            );
        }
    }
    if !entries.iter().any(|(_, r)| r.starts_with(PAUSE_REPOSITORY)) {
        bail!("no pause image ({PAUSE_REPOSITORY}...) is built: run `make nodes`");
    }
    Ok(entries
        .iter()
        .filter(|(_, r)| r.starts_with(PAUSE_REPOSITORY) || wanted.iter().any(|w| w == r))
        .map(|(f, _)| f.to_string())
        .collect())
}

/// What containerd stores a pod's image name as (Docker's rules): a first path component
/// with a `.` or `:`, or `localhost`, is a registry, else the registry is `docker.io`, where
/// a name without a `/` lives under `library/`.
pub fn full_reference(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        image.to_owned()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: &str = "\
operator.tar docker.io/library/redlock-operator:dev images-operator-1
pause.tar registry.k8s.io/pause:3.10.2 images-pause-2
redis-7.0-faketime.tar docker.io/library/redis:7.0-faketime images-redis-7.0-faketime-3
redis-7.0.tar docker.io/library/redis:7.0 images-redis-7.0-4
redis-8.0.tar docker.io/library/redis:8.0 images-redis-8.0-5
valkey-8.1.tar docker.io/valkey/valkey:8.1 images-valkey-8.1-6
";

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn references_are_completed_as_containerd_stores_them() {
        assert_eq!(full_reference("redis:7.0"), "docker.io/library/redis:7.0");
        assert_eq!(full_reference("valkey/valkey:8.1"), "docker.io/valkey/valkey:8.1");
        assert_eq!(
            full_reference("ghcr.io/redlock-dev/redlock-operator:0.1.0"),
            "ghcr.io/redlock-dev/redlock-operator:0.1.0"
        );
        assert_eq!(full_reference("localhost/x:1"), "localhost/x:1");
        assert_eq!(full_reference("registry:5000/x:1"), "registry:5000/x:1");
        assert_eq!(
            full_reference("docker.io/library/redis:7.0"),
            "docker.io/library/redis:7.0"
        );
    }

    #[test]
    fn the_pause_image_and_the_named_ones_are_picked() {
        assert_eq!(
            pick(INDEX, &s(&["redis:7.0"])).unwrap(),
            s(&["pause.tar", "redis-7.0.tar"])
        );
        assert_eq!(
            pick(
                INDEX,
                &s(&["redis:7.0-faketime", "valkey/valkey:8.1", "redlock-operator:dev"])
            )
            .unwrap(),
            s(&[
                "operator.tar",
                "pause.tar",
                "redis-7.0-faketime.tar",
                "valkey-8.1.tar"
            ])
        );
        // Named twice, imported once.
        assert_eq!(
            pick(INDEX, &s(&["redis:8.0", "docker.io/library/redis:8.0"])).unwrap(),
            s(&["pause.tar", "redis-8.0.tar"])
        );
    }

    #[test]
    fn an_image_not_built_is_an_error_that_lists_the_built_ones() {
        let err = pick(INDEX, &s(&["redis:7.0", "redis:7.4"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"redis:7.4\""), "{err}");
        assert!(err.contains("docker.io/library/redis:7.4"), "{err}");
        assert!(err.contains("docker.io/valkey/valkey:8.1"), "{err}");
    }

    #[test]
    fn an_index_without_a_pause_image_is_an_error() {
        let index = INDEX.replace("pause.tar registry.k8s.io/pause:3.10.2 images-pause-2\n", "");
        let err = pick(&index, &s(&["redis:7.0"])).unwrap_err().to_string();
        assert!(err.contains("pause"), "{err}");
    }

    #[test]
    fn every_image_is_every_tarball_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.tar", "a.tar", "IMAGES", "c.json"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let all = node_image_tarballs(dir.path(), &NodeImages::All, "redis:7.0").unwrap();
        assert_eq!(all, vec![dir.path().join("a.tar"), dir.path().join("b.tar")]);
    }

    #[test]
    fn a_listed_tarball_that_is_gone_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("IMAGES"), INDEX).unwrap();
        std::fs::write(dir.path().join("pause.tar"), "").unwrap();
        let err = node_image_tarballs(dir.path(), &NodeImages::default(), "redis:7.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("redis-7.0.tar"), "{err}");
        std::fs::write(dir.path().join("redis-7.0.tar"), "").unwrap();
        let picked = node_image_tarballs(dir.path(), &NodeImages::default(), "redis:7.0").unwrap();
        assert_eq!(
            picked,
            vec![dir.path().join("pause.tar"), dir.path().join("redis-7.0.tar")]
        );
    }
}
