//! `make bench`: detection latency (kill -9 → member shown Held/Lost in status) and release
//! lateness (max(heldUntil, replacement process up) → first successful client SET), over repeated kills on the real control
//! plane. Prints numbers; asserts nothing.
//!
//! Sampling: status is polled every 5 ms and the client retries every 10 ms, so both numbers
//! include up to that much measurement granularity (plus one API round trip for detection).

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use serde_json::json;

fn summary(name: &str, mut v: Vec<f64>, goal: &str) {
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name}: n={} median {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({goal})",
        v.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        v[v.len() - 1]
    );
}

#[tokio::main]
async fn main() {
    let kills: usize = std::env::var("BENCH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    // Kills through the process kubelet (`cp.kubelet()`), whatever the run's default nodes.
    let env = Env::start_on_process_kubelet(3).await;
    // hold = 1s + ceil(1s × 0.01) + 0s = 1.01s
    env.create_cluster(
        "bench",
        json!({"instances": 3, "maxLockTTL": "1s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready("bench", 3, Duration::from_secs(60)).await;
    let client = env.client_login("bench").await;
    let admin = env.admin_login("bench").await;
    let mut process_late = 0;
    let mut detection = vec![];
    let mut lateness = vec![];
    for i in 0..kills {
        let slot = (i % 3) as i32;
        let before = env.member("bench", slot).await.unwrap();
        let ip = env.pod_ip("bench", slot).await;
        let killed_at = Instant::now();
        env.cp
            .kubelet()
            .signal_pod(&env.ns, &format!("bench-{slot}"), Signal::SIGKILL)
            .unwrap();
        let until = loop {
            let m = env.member("bench", slot).await.unwrap();
            if matches!(m.state, MemberState::Held | MemberState::Lost) && m.run_id != before.run_id {
                detection.push(killed_at.elapsed().as_secs_f64() * 1000.0);
                break m.held_until.unwrap().0;
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(20),
                "kill {i} not detected"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // The replacement must exist before it can be released: with repeated kills of one
        // container the kubelet's crash-loop backoff can start it after heldUntil. Lateness is
        // counted from whichever came last.
        let up_at = loop {
            if let Ok(mut c) = connect(ip, &admin).await
                && redis::cmd("PING").query_async::<String>(&mut c).await.is_ok()
            {
                break Timestamp::now();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        if up_at > until {
            process_late += 1;
        }
        let served = first_client_write(ip, &client, Duration::from_secs(20))
            .await
            .unwrap();
        let late = served.duration_since(until.max(up_at)).as_secs_f64() * 1000.0;
        assert!(served >= until, "served before heldUntil");
        lateness.push(late.max(0.0));
        env.wait_ready("bench", 3, Duration::from_secs(20)).await;
    }
    println!(
        "kills where the kubelet restarted the process after heldUntil (crash-loop backoff): {process_late}"
    );
    let log = env.operator.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    println!("operator warnings during the run: {}", warnings.len());
    for w in warnings.iter().take(5) {
        println!("  {}", w.chars().take(300).collect::<String>());
    }
    summary(
        "detection latency (kill -9 → Held/Lost in status)",
        detection,
        "goal p99 ≤ 1000 ms",
    );
    summary(
        "release lateness (max(heldUntil, process up) → first client SET)",
        lateness,
        "goal p99 ≤ 250 ms",
    );
}
