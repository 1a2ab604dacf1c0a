//! `make bench-env`: numbers for the test environment, printed, never asserted.
//!
//! - cold build time of the control-plane binaries (recorded by tests/controlplane/build.sh
//!   when it last built them; `BENCH_COLD_BUILD=1` rebuilds into a scratch cache to measure now)
//! - warm control-plane start time (etcd + apiserver + controller-manager + scheduler + 3 nodes)
//! - pod-start latency: binding (spec.nodeName seen) → Running, over 20 redis pods

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    cold_build();

    let mut starts = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        let cp = ControlPlane::start(ControlPlaneConfig::default()).await?;
        starts.push(t.elapsed().as_secs_f64());
        cp.shutdown().await;
    }
    starts.sort_by(f64::total_cmp);
    println!(
        "warm control-plane start (3 nodes), 3 runs: median {:.2} s, min {:.2} s, max {:.2} s (goal <= 15 s)",
        percentile(&starts, 0.5),
        starts[0],
        starts[2]
    );

    let cp = ControlPlane::start(ControlPlaneConfig::default()).await?;
    let ns = cp.new_namespace("bench").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let n = 20;
    let mut bound: HashMap<String, Instant> = HashMap::new();
    let mut latencies = vec![];
    let mut events = watcher(pods.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    for i in 0..n {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("redis-{i}")},
            "spec": {"containers": [{"name": "redis", "image": "redis:7.4", "ports": [{"containerPort": 6379}]}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while latencies.len() < n && Instant::now() < deadline {
        let Ok(Some(pod)) = tokio::time::timeout(Duration::from_secs(5), events.try_next()).await? else {
            continue;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            bound.entry(name.clone()).or_insert_with(Instant::now);
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running && let Some(t) = bound.remove(&name) {
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    if latencies.is_empty() {
        println!("pod-start latency: no pod reached Running within 120 s");
    } else {
        println!(
            "pod-start latency binding→Running over {} redis pods: median {:.0} ms, p90 {:.0} ms, max {:.0} ms (goal <= 500 ms)",
            latencies.len(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9),
            latencies[latencies.len() - 1]
        );
    }
    cp.shutdown().await;
    Ok(())
}
