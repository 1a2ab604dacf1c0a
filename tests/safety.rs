//! The safety suite, short: one fault of every kind (kill -9 of one, a minority, a majority,
//! pod deletion, SIGSTOP, operator killed, node loss, maxLockTTL lowered, delete + re-create, a
//! failover to an operator 20 s ahead, a partitioned node's pod force-deleted, a partitioned
//! node deleted, a resize, a member's clock jump) with rslock, go-redsync and node-redlock
//! against a RedlockCluster, then the same faults against unfenced servers. On the run's
//! default nodes: real nodes in `make test` (faults hit the containers' processes and the
//! kubelets, clients reach the members through kube-proxy), else the process kubelet.
//! `make safety` runs the long version (benches/safety_full.rs). Writes target/safety-short/
//! (and target/safety-short-clock/ on real nodes): the report, the history with each member's
//! replies, and, pass or fail, each phase's evidence (`operator/evidence/`: the operator's
//! logs, the Kubernetes events, the RedlockCluster's status history; `control/evidence/`: the
//! members' history). A failure's message names the violations' members and those files.
//! `SAFETY_LOAD=n` adds n busy processes per core while each phase deals its faults; every
//! run fails on a `ClockJump` event that neither a member-clock-jump fault nor a step of the
//! host's clock explains (a false positive), and lists them.

use redlock_safety::schedule::FaultKind;
use redlock_test_support::safety_harness::{Settings, assert_safe, run};

/// Whether this run's control planes have real nodes (`REDLOCK_TEST_NODES=real`).
fn real_nodes() -> bool {
    redlock_testenv::ControlPlaneConfig::default().real_nodes
}

/// `kinds` instead of every kind (SAFETY_KINDS unset); one fault each unless SAFETY_FAULTS
/// says otherwise.
fn only(mut settings: Settings, kinds: Vec<FaultKind>) -> Settings {
    assert_eq!(settings.kinds, FaultKind::ALL.to_vec());
    settings.kinds = kinds;
    if std::env::var("SAFETY_FAULTS").is_err() {
        settings.faults = settings.kinds.len();
    }
    settings
}

/// Every kind in one run on the process kubelet. On real nodes two runs: every kind but a
/// member's clock jump with the stock image users run (`redis:7.0`), then the jump with a
/// majority killed, every member in the test image that follows its node's clock
/// (`redis:7.0-faketime`, its clock file bound into the container): the operator must find
/// the jump and hold the same process, and the killed majority makes sure the control run
/// meets a lock (its violations prove the checker sees what the operator prevents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_keep_mutual_exclusion_under_faults_and_the_control_does_not() {
    // SAFETY_FAULTS / SAFETY_SEED / SAFETY_KINDS / SAFETY_LOAD override.
    let real_nodes = real_nodes();
    let settings = Settings::one_round(1, "safety-short", real_nodes);
    // SAFETY_KINDS chooses the kinds: then one run, whatever the nodes.
    let runs = if real_nodes && std::env::var("SAFETY_KINDS").is_err() {
        let others = FaultKind::ALL
            .into_iter()
            .filter(|k| !k.needs_member_clocks())
            .collect();
        vec![
            only(settings, others),
            only(
                Settings::one_round(1, "safety-short-clock", true),
                vec![FaultKind::MemberClockJump, FaultKind::KillMajority],
            ),
        ]
    } else {
        vec![settings]
    };
    for settings in runs {
        // An error's message names the evidence kept of the phase that broke off.
        let report = match run(&settings).await {
            Ok(r) => r,
            Err(e) => panic!("safety run in {} failed: {e:?}", settings.out_dir.display()),
        };
        assert_safe(&report, &settings);
    }
}
