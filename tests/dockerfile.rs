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
    // The chart's pods run as this user with runAsNonRoot.
    let deployment = include_str!("../charts/redlock-operator/templates/deployment.yaml");
    assert!(deployment.contains(&format!("runAsUser: {}", user.split(':').next().unwrap())));
}
