//! `make bench-env`: numbers for the test environment, printed, never asserted.
//!
//! - cold build time of the control-plane binaries (recorded by tests/controlplane/build.sh
//!   when it last built them; `BENCH_COLD_BUILD=1` rebuilds into a scratch cache to measure now)
//! - cold build times the node and image scripts recorded (tests/nodes)
//! - warm start time: control plane + 3 process-kubelet nodes, and control plane + 5 real nodes
//! - pod-start latency create → Ready over 20 redis pods (an exec readiness probe, the kind of
//!   check the operator's startup probe runs), on both
//! - the whole `.ci/run` and its `make test`, as the last passing runs recorded them: the
//!   last one that started without the build cache (a fresh machine's) and the last warm one
//!
//! Runs inside the run's own namespaces (real nodes need them).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use redlock_testenv::NodeImages;
use redlock_testenv::controlplane::{ControlPlane, ControlPlaneConfig, repo_root};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn cold_build() {
    let script = repo_root().join("tests/controlplane/build.sh");
    if std::env::var("BENCH_COLD_BUILD").is_ok() {
        let scratch = tempfile::tempdir().unwrap();
        let start = Instant::now();
        let status = std::process::Command::new(&script)
            .env("REDLOCK_CACHE", scratch.path())
            .status()
            .unwrap();
        println!(
            "cold build (now, shared Go module and build cache): {:.0} s (exit {status})",
            start.elapsed().as_secs_f64()
        );
        // Re-link target/dev/bin to the regular cache.
        std::process::Command::new(&script).status().unwrap();
    } else {
        let dir = std::process::Command::new(&script)
            .arg("--print-dir")
            .output()
            .unwrap();
        let dir = String::from_utf8_lossy(&dir.stdout).trim().to_owned();
        match std::fs::read_to_string(format!("{dir}/build-seconds")) {
            Ok(s) => println!("cold build (recorded when {dir} was built): {} s", s.trim()),
            Err(_) => println!("cold build: not recorded (set BENCH_COLD_BUILD=1 to measure)"),
        }
    }
}

fn main() -> anyhow::Result<()> {
    // Real nodes live in the run's own namespaces: the whole benchmark moves there first.
    redlock_testenv::nodes::namespace::enter()?;
    redlock_testenv::nodes::namespace::prepare()?;
    cold_build();
    recorded_builds();
    recorded_ci_runs();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(measure("process kubelet", false, 3))?;
    runtime.block_on(measure("real nodes", true, 5))
}

/// Build seconds the node and image scripts recorded in their caches.
fn recorded_builds() {
    for script in ["tests/nodes/build.sh"] {
        let out = std::process::Command::new(repo_root().join(script))
            .arg("--print-dir")
            .output();
        let Ok(out) = out else { continue };
        for dir in String::from_utf8_lossy(&out.stdout).lines() {
            match std::fs::read_to_string(format!("{dir}/build-seconds")) {
                Ok(s) => println!("cold build (recorded when {dir} was built): {} s", s.trim()),
                Err(_) => println!("cold build of {dir}: not recorded"),
            }
        }
    }
    let images = repo_root().join("target/dev/images/IMAGES");
    if let Ok(list) = std::fs::read_to_string(&images) {
        for line in list.lines() {
            let Some(entry) = line.split_whitespace().nth(2) else {
                continue;
            };
            let dir = cache_dir().join(entry);
            if let Ok(s) = std::fs::read_to_string(dir.join("build-seconds")) {
                println!("image {entry}: built in {} s", s.trim());
            }
        }
    }
}

/// `~/.cache/redlock-operator`, where the build scripts and `.ci/run` keep what they record.
fn cache_dir() -> std::path::PathBuf {
    std::path::Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cache/redlock-operator")
}

/// The last cold and the last warm passing `.ci/run`, from the lines it appends to
/// `~/.cache/redlock-operator/ci-runs`: date, commit, caches, whole run (s), `make test` (s).
fn recorded_ci_runs() {
    let path = cache_dir().join("ci-runs");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    for caches in ["cold", "warm"] {
        let last = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .rfind(|f| f.len() == 5 && f[2] == caches);
        match last {
            Some(f) => println!(
                ".ci/run, {caches} caches (last passing run recorded, {} at {}): {} s in all, `make test` {} s",
                f[0], f[1], f[3], f[4]
            ),
            None => println!(
                ".ci/run, {caches} caches: no passing run recorded in {}",
                path.display()
            ),
        }
    }
}

/// The image of the pod-start measurement's pods (built here, so real nodes have it).
const POD_IMAGE: &str = "redis:7.0";

async fn measure(what: &str, real_nodes: bool, nodes: usize) -> anyhow::Result<()> {
    let config = || ControlPlaneConfig {
        nodes,
        real_nodes,
        // The pods below name it whatever REDLOCK_TEST_IMAGE says.
        node_images: NodeImages::Also(vec![POD_IMAGE.into()]),
        ..Default::default()
    };
    let mut starts = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        let cp = ControlPlane::start(config()).await?;
        starts.push(t.elapsed().as_secs_f64());
        cp.shutdown().await;
    }
    starts.sort_by(f64::total_cmp);
    println!(
        "{what}: warm start to {nodes} Ready nodes (control plane included), 3 runs: median {:.2} s, min {:.2} s, max {:.2} s",
        percentile(&starts, 0.5),
        starts[0],
        starts[2]
    );

    let cp = ControlPlane::start(config()).await?;
    let ns = cp.new_namespace("bench").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let n = 20;
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut latencies = vec![];
    let mut events = watcher(pods.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    for i in 0..n {
        // A redis pod whose readiness is an exec check like the operator's startup probe (a
        // process in the pod per run): Ready means it answers.
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("redis-{i}")},
            "spec": {"containers": [{
                "name": "redis", "image": POD_IMAGE,
                "command": ["redis-server", "--protected-mode", "no"],
                "ports": [{"containerPort": 6379}],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "readinessProbe": {
                    "exec": {"command": ["sh", "-c", "redis-cli -h \"$POD_IP\" ping | grep -q PONG"]},
                    "periodSeconds": 1,
                },
            }]},
        }))?;
        created.insert(format!("redis-{i}"), Instant::now());
        pods.create(&PostParams::default(), &pod).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while latencies.len() < n && Instant::now() < deadline {
        let pod = match tokio::time::timeout(Duration::from_secs(5), events.try_next()).await {
            Ok(Ok(Some(pod))) => pod,
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(None)) | Err(_) => continue,
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready && let Some(t) = created.remove(&name) {
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    if latencies.is_empty() {
        println!("{what}: pod start: no pod became Ready within 180 s");
    } else {
        println!(
            "{what}: pod start create→Ready over {} of {n} redis pods created at once: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            latencies.len(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies[latencies.len() - 1]
        );
    }
    cp.shutdown().await;
    Ok(())
}
