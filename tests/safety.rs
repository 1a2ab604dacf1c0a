//! The safety suite, short: a few faults (one of each kind) with rslock, go-redsync and
//! node-redlock against a RedlockCluster, then the same faults against unfenced servers.
//! `make safety` runs the long version (benches/safety_full.rs). Writes target/safety-short/.

use redlock_test_support::safety_harness::{Settings, assert_safe, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_keep_mutual_exclusion_under_faults_and_the_control_does_not() {
    // One round of every fault kind; SAFETY_FAULTS / SAFETY_SEED / SAFETY_KINDS override. On
    // the run's default nodes (`make test`: real nodes).
    let real_nodes = redlock_testenv::ControlPlaneConfig::default().real_nodes;
    let settings = Settings::one_round(1, "safety-short", real_nodes);
    let report = run(&settings).await.expect("safety run");
    assert_safe(&report, &settings);
}
