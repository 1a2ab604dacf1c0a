//! `make bench-rollout`: total time of a rolling replacement (image change) for N = 3, 5, 7
//! on the local control plane, against its lower bound N × hold (each replacement must be held
//! for the full hold, one at a time). Prints numbers; the only check is that every pod
//! really was replaced (no timing assertion).

use std::time::{Duration, Instant};

use redlock_test_support::*;
use serde_json::json;

#[tokio::main]
async fn main() {
    // hold = 2s + ceil(2s × 0.01) + 0s = 2.02s
    let hold = Duration::from_millis(2020);
    for n in [3, 5, 7] {
        let env = Env::start(n as usize).await;
        env.create_cluster(
            "locks",
            json!({"instances": n, "maxLockTTL": "2s", "holdMargin": "0s"}),
        )
        .await;
        env.wait_ready("locks", n, Duration::from_secs(60)).await;
        let started = Instant::now();
        let generation = env
            .patch_spec("locks", json!({"image": "redis:7.2"}))
            .await
            .metadata
            .generation;
        // Only a status computed from the new spec counts: the one before it also says all
        // members are updated (to the old spec).
        wait_for("rollout done", Duration::from_secs(300), async || {
            let s = env.cluster("locks").await.status.unwrap_or_default();
            Ok((s.observed_generation >= generation
                && s.updated_instances == Some(n)
                && s.ready_instances == Some(n))
            .then_some(()))
        })
        .await;
        let replaced = env
            .pods()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers[0].image.as_deref() == Some("redis:7.2"))
            })
            .count();
        assert_eq!(replaced, n as usize, "every pod runs the new image");
        let took = started.elapsed().as_secs_f64();
        let bound = hold.as_secs_f64() * f64::from(n);
        println!(
            "rollout N={n}: {took:.1} s total, lower bound N x hold = {bound:.1} s, overhead {:.1} s ({:.2} s per member)",
            took - bound,
            (took - bound) / f64::from(n)
        );
    }
}
