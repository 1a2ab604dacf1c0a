//! `make demo` / `make dev-up` on real nodes (issue 16): `devenv` starts itself inside the
//! run's own namespaces and forwards the API server's port to this machine's loopback, so the
//! user's `kubectl` works from outside them: it sees the nodes, the example cluster becomes
//! Available, and `kubectl exec` reaches a container. SIGTERM (what `make dev-down` sends)
//! stops everything the environment started.
//!
//! Needs root, the node binaries and images (`make nodes`) and the operator binary built next
//! to `devenv` (`cargo test --workspace` builds both).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use redlock_testenv::controlplane::bin_dir;
use redlock_testenv::procs::ManagedChild;

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Processes whose command line names `needle` (the environment's own directory: the
/// kubelets, containerd and the control plane all name paths below it).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
            .is_none()
        {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) && !cmdline.contains("devenv.rs") {
                found.push(cmdline);
            }
        }
    }
    found
}

#[test]
fn the_demo_on_real_nodes_is_reachable_from_outside_its_namespaces_and_stops_clean() {
    let operator = Path::new(env!("CARGO_BIN_EXE_devenv")).with_file_name("redlock-operator");
    assert!(
        operator.exists(),
        "{} is not built (cargo build --workspace --bins)",
        operator.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devenv"));
    cmd.arg("--dir").arg(dir.path()).arg("--ready-file").arg(&ready);
    // `make test` runs inside the run's namespaces: devenv makes namespaces of its own inside
    // them, and this test stays outside those, as a user's shell would.
    cmd.env_remove(redlock_testenv::nodes::namespace::MARKER);
    let mut devenv = ManagedChild::spawn("devenv", cmd, &dir.path().join("devenv.log")).unwrap();
    let log = || std::fs::read_to_string(dir.path().join("devenv.log")).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(300);
    while !ready.exists() {
        if let Some(status) = devenv.exited() {
            panic!("devenv exited ({status}):\n{}", log());
        }
        assert!(Instant::now() < deadline, "devenv not ready in 300 s:\n{}", log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let kubeconfig = dir.path().join("kubeconfig");

    // From this side of the namespaces, through the forwarded port.
    let (ok, nodes) = kubectl(&kubeconfig, &["get", "nodes", "--no-headers"]);
    assert!(ok, "{nodes}");
    assert_eq!(
        nodes.lines().filter(|l| l.contains(" Ready ")).count(),
        5,
        "{nodes}"
    );
    assert!(
        kubectl(&kubeconfig, &["get", "nodes", "-o", "wide"])
            .1
            .contains("containerd://"),
        "real nodes"
    );
    let (ok, available) = kubectl(
        &kubeconfig,
        &[
            "wait",
            "-n",
            "default",
            "--for=condition=Available",
            "rlc/locks",
            "--timeout=120s",
        ],
    );
    assert!(ok, "the example is Available: {available}\n{}", log());
    // `kubectl exec`: API server -> kubelet -> containerd, all inside the namespaces.
    let (ok, version) = kubectl(
        &kubeconfig,
        &[
            "exec",
            "-n",
            "default",
            "locks-0",
            "--",
            "redis-server",
            "--version",
        ],
    );
    assert!(ok && version.contains("Redis server v=7.0"), "{version}");

    // What `make dev-down` does.
    devenv.stop(Duration::from_secs(90));
    assert!(!ready.exists(), "the ready file goes with the environment");
    let needle = dir.path().display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_naming(&needle);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:#?}\n{}", log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(log().contains("stopping"), "stopped gracefully:\n{}", log());
}
