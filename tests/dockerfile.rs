//! The Dockerfile's promises (issue 7, item 9), checked on its text because no container
//! engine exists here: multi-stage, a static musl build, a final stage without a shell
//! (scratch or distroless static), a numeric non-root user, and an entrypoint that needs no
//! shell.

const DOCKERFILE: &str = include_str!("../Dockerfile");

/// Instructions (continuation lines joined, comments dropped) grouped by stage.
fn stages() -> Vec<Vec<String>> {
    let joined = DOCKERFILE
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let mut stages: Vec<Vec<String>> = Vec::new();
    for line in joined.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("FROM ") {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("Dockerfile starts with FROM")
            .push(line.to_owned());
    }
    stages
}

#[test]
fn builds_statically_and_ships_a_shell_less_non_root_image() {
    let stages = stages();
    assert!(stages.len() >= 2, "multi-stage");
    let build = stages[..stages.len() - 1].concat().join("\n");
    assert!(
        build.contains("--target x86_64-unknown-linux-musl"),
        "static musl build"
    );
    assert!(build.contains("--locked"), "reproducible from Cargo.lock");

    let last = stages.last().unwrap();
    let base = last[0].split_whitespace().nth(1).unwrap();
    assert!(
        base == "scratch" || base.starts_with("gcr.io/distroless/static"),
        "final base {base} must be scratch or distroless static (no shell)"
    );
    assert!(
        !last.iter().any(|l| l.starts_with("RUN ")),
        "nothing can RUN in a shell-less final stage"
    );
    let user = last
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("final stage sets USER");
    for id in user.split(':') {
        let id: u32 = id
            .parse()
            .unwrap_or_else(|_| panic!("USER {user} must be numeric"));
        assert!(id > 0, "USER {user} must not be root");
    }
    for key in ["ENTRYPOINT", "CMD"] {
        let line = last.iter().find(|l| l.starts_with(key)).unwrap();
        assert!(line.contains('['), "{key} in exec form (no shell): {line}");
    }
    // The chart's pods run as this user with runAsNonRoot (its default pod security context).
    let values: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../charts/redlock-operator/values.yaml")).unwrap();
    let pod = &values["podSecurityContext"];
    assert_eq!(pod["runAsNonRoot"], true, "{pod:?}");
    let uid: u64 = user.split(':').next().unwrap().parse().unwrap();
    assert_eq!(pod["runAsUser"].as_u64(), Some(uid), "{pod:?}");
}

/// The last stage's value of a Dockerfile instruction (`USER`, `ENTRYPOINT`, …).
fn final_stage(key: &str) -> String {
    let stages = stages();
    stages
        .last()
        .unwrap()
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("final stage sets {key}"))
        .trim()
        .to_owned()
}

/// A file of an image tarball (OCI layout), read with `tar`.
fn tar_file(tarball: &std::path::Path, path: &str) -> Vec<u8> {
    let out = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(tarball)
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{path} in {}", tarball.display());
    out.stdout
}

/// Issue 16: the operator image that tests/nodes/images.sh builds (real nodes run it) is the
/// Dockerfile's: same user, entrypoint, arguments and port, and a static binary. Checked on the
/// built image's own config, so neither side can drift.
#[test]
fn the_locally_built_operator_image_is_the_dockerfiles() {
    let tarball = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dev/images/operator.tar");
    assert!(
        tarball.exists(),
        "{} is missing: run `make nodes` (tests/nodes/images.sh operator)",
        tarball.display()
    );
    let json = |bytes: Vec<u8>| -> serde_json::Value { serde_json::from_slice(&bytes).unwrap() };
    let blob = |digest: &serde_json::Value| {
        format!(
            "blobs/sha256/{}",
            digest.as_str().unwrap().trim_start_matches("sha256:")
        )
    };
    let index = json(tar_file(&tarball, "index.json"));
    let manifest = json(tar_file(&tarball, &blob(&index["manifests"][0]["digest"])));
    let config = json(tar_file(&tarball, &blob(&manifest["config"]["digest"])))["config"].clone();

    let exec_form = |key: &str| -> serde_json::Value { serde_json::from_str(&final_stage(key)).unwrap() };
    assert_eq!(config["User"], final_stage("USER"), "{config}");
    assert_eq!(config["Entrypoint"], exec_form("ENTRYPOINT"), "{config}");
    assert_eq!(config["Cmd"], exec_form("CMD"), "{config}");
    let port = format!("{}/tcp", final_stage("EXPOSE"));
    assert!(config["ExposedPorts"].get(&port).is_some(), "{port}: {config}");
    // The binary in the layer is the one the Dockerfile copies, statically linked.
    let layer = blob(&manifest["layers"][0]["digest"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("layer.tar"), tar_file(&tarball, &layer)).unwrap();
    let binary = tar_file(&dir.path().join("layer.tar"), "redlock-operator");
    assert_eq!(&binary[..4], b"\x7fELF");
    let file = std::process::Command::new("sh")
        .arg("-c")
        .arg("tar -xOf layer.tar redlock-operator > bin && ldd bin 2>&1 || true")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&file.stdout);
    assert!(
        ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
        "{ldd}"
    );
}
