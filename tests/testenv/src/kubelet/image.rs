//! Which local program stands in for a container image.
//!
//! There is no container runtime here, so an image is only a name that selects a program
//! installed on this machine. The table is deliberately small and explicit: an image that
//! is not in it must fail visibly (the pod stays Pending with a clear reason) instead of
//! running something unexpected.

use std::path::{Path, PathBuf};

/// How the kubelet has to adapt the command line of a mapped program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// A Redis-compatible server: every pod gets its own loopback address, so the kubelet
    /// appends `--bind <podIP> --port <port>` (command-line options override the config
    /// file in redis-server).
    RedisServer,
    /// A program configured through `KubeletConfig::extra_images`: run as given, with the
    /// `KUBERNETES_SERVICE_*` variables pointing at the real API server.
    Extra,
}

/// The result of mapping an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedImage {
    /// The program run when the container has no `command`.
    pub program: PathBuf,
    pub flavor: Flavor,
    /// The image's working directory (`WORKDIR`), used when the container sets none and a
    /// volume is mounted there (the redis images use `/data`).
    pub workdir: Option<&'static str>,
}

/// One built-in entry: an image matches when its repository (registry prefix, tag and
/// digest removed as far as needed) is one of `repositories` or ends in one of `suffixes`.
struct BuiltinImage {
    repositories: &'static [&'static str],
    suffixes: &'static [&'static str],
    program: &'static str,
    flavor: Flavor,
    workdir: Option<&'static str>,
}

/// The built-in images. Add rows here for more stand-ins.
const BUILTIN_IMAGES: &[BuiltinImage] = &[BuiltinImage {
    repositories: &["redis", "valkey/valkey"],
    suffixes: &["/redis", "/valkey"],
    program: "/usr/bin/redis-server",
    flavor: Flavor::RedisServer,
    workdir: Some("/data"),
}];

/// Names a container `command[0]` may use for programs that exist here under another
/// name (Valkey images call their binaries `valkey-*`).
pub const PROGRAM_ALIASES: &[(&str, &str)] = &[
    ("redis-server", "/usr/bin/redis-server"),
    ("valkey-server", "/usr/bin/redis-server"),
    ("redis-cli", "/usr/bin/redis-cli"),
    ("valkey-cli", "/usr/bin/redis-cli"),
];

/// The repository part of an image reference: without `@digest` and `:tag` (a `:` before
/// the last `/` belongs to a registry port, not a tag).
pub fn repository(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_slash = without_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match without_digest[last_slash..].find(':') {
        Some(colon) => &without_digest[..last_slash + colon],
        None => without_digest,
    }
}

/// Maps `image` to a local program. `extra` entries (image prefix, program) are tried
/// first so a test can override a built-in. The error is the message shown in the
/// container's `Waiting` state.
pub fn map_image(image: &str, extra: &[(String, PathBuf)]) -> Result<MappedImage, String> {
    if let Some((_, program)) = extra.iter().find(|(key, _)| extra_matches(key, image)) {
        return Ok(MappedImage {
            program: program.clone(),
            flavor: Flavor::Extra,
            workdir: None,
        });
    }
    let repo = repository(image);
    for entry in BUILTIN_IMAGES {
        if entry.repositories.contains(&repo) || entry.suffixes.iter().any(|s| repo.ends_with(s)) {
            return Ok(MappedImage {
                program: PathBuf::from(entry.program),
                flavor: entry.flavor,
                workdir: entry.workdir,
            });
        }
    }
    Err(unmapped_message(image, extra))
}

/// An `extra_images` key is an image prefix, or with a leading `*` a repository name the
/// image's repository must be or end in after a `/` (`*redlock-operator` matches
/// `ghcr.io/org/redlock-operator:1.0` and `redlock-operator:dev`, not `my-redlock-operator`):
/// a chart's image can then run whatever registry and tag its values name.
fn extra_matches(key: &str, image: &str) -> bool {
    match key.strip_prefix('*') {
        Some(name) => {
            let repo = repository(image);
            repo == name || repo.strip_suffix(name).is_some_and(|rest| rest.ends_with('/'))
        }
        None => image.starts_with(key),
    }
}

fn unmapped_message(image: &str, extra: &[(String, PathBuf)]) -> String {
    let mut supported: Vec<String> = BUILTIN_IMAGES
        .iter()
        .flat_map(|e| {
            e.repositories
                .iter()
                .map(|r| r.to_string())
                .chain(e.suffixes.iter().map(|s| format!("*{s}")))
        })
        .collect();
    supported.extend(extra.iter().map(|(key, _)| {
        if key.starts_with('*') {
            key.clone()
        } else {
            format!("{key}*")
        }
    }));
    format!(
        "image {image:?} cannot run here: the process kubelet has no container runtime and runs only \
         images it maps to local programs: {}",
        supported.join(", ")
    )
}

/// Resolves `command[0]` of a container: the image's own program under its basename, a
/// known alias, or else the name as given (an absolute path, or looked up in `PATH`).
pub fn resolve_program(command0: &str, mapped: &MappedImage) -> String {
    let base = Path::new(command0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(command0);
    if mapped.program.file_name().and_then(|n| n.to_str()) == Some(base) {
        return mapped.program.display().to_string();
    }
    if let Some((_, target)) = PROGRAM_ALIASES.iter().find(|(alias, _)| *alias == base) {
        return (*target).to_string();
    }
    command0.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_strips_tag_and_digest_but_not_registry_port() {
        let cases = [
            ("redis", "redis"),
            ("redis:7.4", "redis"),
            ("docker.io/library/redis:7.2-alpine", "docker.io/library/redis"),
            ("localhost:5000/redis", "localhost:5000/redis"),
            ("localhost:5000/redis:7@sha256:abc", "localhost:5000/redis"),
            ("valkey/valkey:8", "valkey/valkey"),
        ];
        for (image, repo) in cases {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn redis_and_valkey_images_map_to_redis_server() {
        for image in [
            "redis",
            "redis:7.4",
            "docker.io/library/redis:7.2-alpine",
            "valkey/valkey:8",
            "ghcr.io/valkey-io/valkey:8.0",
            "quay.io/x/redis@sha256:00",
        ] {
            let m = map_image(image, &[]).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(m.program, PathBuf::from("/usr/bin/redis-server"));
            assert_eq!(m.flavor, Flavor::RedisServer);
        }
    }

    #[test]
    fn other_images_are_refused_with_a_clear_message() {
        for image in ["nginx:1.27", "redisx:1", "bitnami/redis-cluster:7", "myredis"] {
            let err = map_image(image, &[]).unwrap_err();
            assert!(err.contains(image) && err.contains("valkey/valkey"), "{err}");
        }
    }

    #[test]
    fn extra_images_match_by_prefix_and_win() {
        let extra = vec![
            ("redlock-operator:".to_string(), PathBuf::from("/bin/op")),
            ("redis:6".to_string(), PathBuf::from("/bin/fake")),
        ];
        let m = map_image("redlock-operator:dev", &extra).unwrap();
        assert_eq!((m.program, m.flavor), (PathBuf::from("/bin/op"), Flavor::Extra));
        assert_eq!(
            map_image("redis:6.2", &extra).unwrap().program,
            PathBuf::from("/bin/fake")
        );
        assert!(
            map_image("nginx", &extra)
                .unwrap_err()
                .contains("redlock-operator:*")
        );
    }

    #[test]
    fn extra_images_match_by_repository_name() {
        let extra = vec![("*redlock-operator".to_string(), PathBuf::from("/bin/op"))];
        for image in [
            "redlock-operator",
            "redlock-operator:dev",
            "ghcr.io/redlock-dev/redlock-operator:0.1.0",
            "registry.local:5000/ops/redlock-operator@sha256:abc",
        ] {
            assert_eq!(
                map_image(image, &extra).unwrap().program,
                PathBuf::from("/bin/op"),
                "{image}"
            );
        }
        for image in [
            "my-redlock-operator:1",
            "ghcr.io/redlock-operator/other:1",
            "redlock-operator-x",
        ] {
            let err = map_image(image, &extra).unwrap_err();
            assert!(err.contains("*redlock-operator"), "{image}: {err}");
        }
    }

    #[test]
    fn command_names_resolve_to_local_programs() {
        let m = map_image("valkey/valkey:8", &[]).unwrap();
        assert_eq!(resolve_program("redis-server", &m), "/usr/bin/redis-server");
        assert_eq!(
            resolve_program("/usr/local/bin/redis-server", &m),
            "/usr/bin/redis-server"
        );
        assert_eq!(resolve_program("valkey-server", &m), "/usr/bin/redis-server");
        assert_eq!(resolve_program("sh", &m), "sh");
        assert_eq!(resolve_program("/bin/sh", &m), "/bin/sh");
    }
}
