//! Operator clocks (issue 15, docs/design.md §9.1-9.2) on the real control plane, with the
//! operator binary under libfaketime (only its wall clock is skewed or stepped; the monotonic
//! clock runs true, as after an NTP step). Each safety test is the way the rule fails without
//! the fix: a first client holds a lock on a bare majority, a member of it is killed, the
//! operator's clock misbehaves mid-hold, and a second client tries to take a majority until
//! the first lock has expired. It must never get one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use redlock_testenv::operator::{OperatorProcess, faketime_env, set_clock_offset};

const NAME: &str = "locks";
const TTL: Duration = Duration::from_secs(10);

fn clock_file(env: &Env, name: &str) -> PathBuf {
    let path = env.cp.dir().join(format!("{name}.clock"));
    set_clock_offset(&path, "+0").unwrap();
    path
}

/// The first client's lock on slots 1 and 2 (a bare majority); killed: slot 1. Returns when
/// the lock expires at the latest, and the held record's end.
async fn lock_then_kill_one(env: &Env) -> (Instant, Timestamp) {
    let expiry = env.first_lock(NAME, &[1, 2], TTL).await;
    let (_, _, until) = kill_until_held(env, NAME, 1).await;
    (expiry, until)
}

async fn metric(op: &OperatorProcess, name: &str) -> f64 {
    let (_, body) = op.get("/metrics").await.unwrap();
    metric_value(&body, name).unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// Issue 15, scenario 1: the standby's wall clock runs 20 s ahead. It takes over while slot 1
/// is held; by its clock the recorded hold ended long ago. It times the hold again in full, so
/// no second client gets a majority while the first lock is valid. (The offset bound is set
/// loose here so that the re-timing, not the offset check, is what is tested.)
#[tokio::test]
async fn a_standby_whose_clock_runs_20s_ahead_takes_over_mid_hold_without_shortening_it() {
    let mut env = Env::start_with(3, &["--leader-elect=false"]).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let a = start_replica(&env, "operator-a", &[], &[]).await;
    let fast = clock_file(&env, "operator-b");
    set_clock_offset(&fast, "+20s").unwrap();
    let b = start_replica(
        &env,
        "operator-b",
        &["--max-clock-offset-ms=60000"],
        &faketime_env(&fast),
    )
    .await;
    assert_eq!(env.lease_holder().await.as_deref(), Some("operator-a"));
    env.serving_with_ttl(NAME, 3, "10s").await;

    let (expiry, until) = lock_then_kill_one(&env).await;
    a.kill().unwrap();
    wait_for("operator-b leads", Duration::from_secs(15), async || {
        Ok((env.lease_holder().await.as_deref() == Some("operator-b")).then_some(()))
    })
    .await;
    let took_over = Timestamp::now();
    assert!(took_over < until, "the takeover must happen mid-hold");

    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));
    // It measured its own clock 20 s ahead of the API server's.
    let offset = metric(&b, "redlock_operator_clock_offset_seconds").await;
    assert!((18.5..21.5).contains(&offset), "offset {offset}");
    // And released the member after timing the hold in full itself.
    env.wait_event("HoldExtended").await;
    env.wait_member(NAME, 1, "slot 1 serves again", Duration::from_secs(30), |m| {
        m.state == MemberState::Ready
    })
    .await;
    assert!(
        Timestamp::now().duration_since(took_over).as_secs_f64() >= 10.1 - 1.0,
        "released a full hold after the takeover at the earliest"
    );
    drop(b);
}

/// Issue 15, scenario 2: the leader's wall clock is stepped 30 s forward while slot 1 is
/// held. The hold ends 30 s later on the wall clock, i.e. after a full hold of real time.
#[tokio::test]
async fn a_forward_step_of_the_leaders_clock_mid_hold_does_not_shorten_it() {
    let mut env = Env::start_with(3, &["--leader-elect=false"]).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let file = clock_file(&env, "operator");
    env.operator = start_operator_env(
        &env.cp,
        "operator-stepped.log",
        &["--leader-elect=false", "--max-clock-offset-ms=60000"],
        &faketime_env(&file),
    )
    .await;
    env.serving_with_ttl(NAME, 3, "10s").await;

    let (expiry, until) = lock_then_kill_one(&env).await;
    set_clock_offset(&file, "+30s").unwrap();
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));
    env.wait_event("HoldExtended").await;
    // The recorded end moved by the step (read first: the hold still runs).
    let recorded = wait_for(
        "heldUntil moved by the step",
        Duration::from_secs(10),
        async || {
            let m = env.member(NAME, 1).await;
            Ok(m.and_then(|m| m.held_until).map(|t| t.0).filter(|t| *t > until))
        },
    )
    .await;
    assert!(
        recorded.duration_since(until).as_secs_f64() >= 29.0,
        "{recorded} vs {until}"
    );
    // The counter is refreshed every clock-check period (10 s): on real nodes, whose kubelet
    // restarts the container later, the hold can be extended before the next refresh. Before
    // that it may show milliseconds (a delayed clock read counts as a step: `clock.rs`,
    // `narrow_reading`), so wait for a whole second or more.
    let steps = wait_for(
        "the step in redlock_operator_clock_forward_steps_seconds_total",
        Duration::from_secs(15),
        async || {
            let s = metric(
                &env.operator,
                "redlock_operator_clock_forward_steps_seconds_total",
            )
            .await;
            Ok((s >= 1.0).then_some(s))
        },
    )
    .await;
    assert!((29.0..31.5).contains(&steps), "steps {steps}");
}

/// With the default bound (2 s), a leader whose clock is 20 s off the API server's releases
/// nothing, and says why; once its clock is corrected, the held member is released.
#[tokio::test]
async fn releases_wait_while_the_leaders_clock_is_off_the_api_servers() {
    let mut env = Env::start_with(3, &["--leader-elect=false"]).await;
    env.serving_with_ttl(NAME, 3, "10s").await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let file = clock_file(&env, "operator");
    set_clock_offset(&file, "+20s").unwrap();
    env.operator = start_operator_env(
        &env.cp,
        "operator-off.log",
        &["--leader-elect=false"],
        &faketime_env(&file),
    )
    .await;
    let (_, _) = lock_then_kill_one(&env).await;
    // Well past the hold (10.1 s, timed again by this process): still held, and why.
    tokio::time::sleep(Duration::from_secs(13)).await;
    let m = env.member(NAME, 1).await.unwrap();
    assert_eq!(m.state, MemberState::Held, "{m:?}");
    let why = m.message.clone().unwrap_or_default();
    assert!(
        why.contains("release waits") && why.contains("clock is off the API server's"),
        "{why}"
    );
    // The clock is corrected (a backward step): the member is released.
    set_clock_offset(&file, "+0").unwrap();
    env.wait_member(
        NAME,
        1,
        "released once the clock is corrected",
        Duration::from_secs(30),
        |m| m.state == MemberState::Ready,
    )
    .await;
}

/// Issue 15, members' clocks (docs/design.md §9.3): Redis expires keys by its host's wall
/// clock, so a forward jump there expires the first client's lock on that member early. The
/// operator finds the jump at its next probe, fences the member and holds it in full: from
/// then on no second client gets a majority while the first lock is valid. (Between the jump
/// and that probe, at most one probe period, the member is exposed: docs/operations.md "Clocks".)
#[tokio::test]
async fn a_member_whose_clock_jumps_forward_is_fenced_and_held_in_full() {
    let env = Env::start_config(
        redlock_testenv::ControlPlaneConfig {
            nodes: 3,
            node_clocks: Some(redis_under_faketime()),
            ..Default::default()
        },
        &[],
    )
    .await;
    env.serving_with_ttl(NAME, 3, "10s").await;
    let login = env.client_login(NAME).await;
    let expiry = env.first_lock(NAME, &[1, 2], TTL).await;
    let before = env.member(NAME, 1).await.unwrap();
    let node = env.node_of(NAME, 1).await;
    env.cp.nodes().set_node_clock(&node, "+60s").unwrap();

    // The window docs/operations.md owns up to: libfaketime shows the member the new offset within
    // 1 s, the next probe comes within 1 s, the fence right after the status write. From 3 s
    // on, no second client may get a majority while the first lock is valid.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));
    let m = env
        .wait_member(
            NAME,
            1,
            "member 1 fenced for its clock jump",
            Duration::from_secs(10),
            |m| {
                m.state == MemberState::Held
                    && m.message.as_deref().is_some_and(|t| t.contains("clock jumped"))
            },
        )
        .await;
    assert_eq!(m.run_id, before.run_id, "the same process, held: {m:?}");
    env.wait_event("ClockJump").await;
    let jumps = metric(&env.operator, "redlock_member_clock_jumps_total").await;
    assert_eq!(jumps, 1.0);
    // Held in full from the jump's detection, then serving again (its clock is now steady).
    let ip = env.pod_ip(NAME, 1).await;
    assert!(connect(ip, &login).await.is_err(), "fenced");
    env.wait_member(
        NAME,
        1,
        "member 1 serves again after its hold",
        Duration::from_secs(30),
        |m| m.state == MemberState::Ready,
    )
    .await;
}

/// Issue 15: a member's clock jumps while no operator leader probes it (here: between one
/// operator's exit and the next one's start, as across a leader change). The first lock's key
/// on that member expires early. The new operator has no probe history of its own: it compares
/// its first reading with the one on record (`status.members[].clock`), fences the member and
/// holds it in full, so no second client gets a majority while the first lock is valid.
#[tokio::test]
async fn a_member_clock_jump_while_no_leader_probes_is_found_by_the_next_one() {
    let ttl = Duration::from_secs(20);
    let mut env = Env::start_config(
        redlock_testenv::ControlPlaneConfig {
            nodes: 3,
            node_clocks: Some(redis_under_faketime()),
            ..Default::default()
        },
        &["--leader-elect=false"],
    )
    .await;
    env.serving_with_ttl(NAME, 3, "20s").await;
    let before = env
        .wait_member(
            NAME,
            1,
            "member 1's clock on record",
            Duration::from_secs(10),
            |m| {
                m.clock
                    .as_ref()
                    .is_some_and(|c| Some(&c.run_id) == m.run_id.as_ref())
            },
        )
        .await;
    let expiry = env.first_lock(NAME, &[1, 2], ttl).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let node = env.node_of(NAME, 1).await;
    env.cp.nodes().set_node_clock(&node, "+60s").unwrap();
    // libfaketime shows the member the new offset within 1 s: its copy of the lock expires.
    tokio::time::sleep(Duration::from_secs(2)).await;

    env.operator = start_operator_env(&env.cp, "operator-next.log", &["--leader-elect=false"], &[]).await;
    // The next operator's first probes (one probe period, after its first clock sample).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));
    let m = env
        .wait_member(
            NAME,
            1,
            "member 1 held for its clock jump",
            Duration::from_secs(5),
            |m| {
                m.state == MemberState::Held
                    && m.message
                        .as_deref()
                        .is_some_and(|t| t.contains("no leader probed it in between"))
            },
        )
        .await;
    assert_eq!(m.run_id, before.run_id, "the same process, held: {m:?}");
    let recorded = m.clock.expect("the reading after the jump is on record");
    let was = before.clock.unwrap();
    assert!(
        recorded.offset_low_millis - was.offset_high_millis > 55_000,
        "{recorded:?} vs {was:?}"
    );
    env.wait_event("ClockJump").await;
    let ip = env.pod_ip(NAME, 1).await;
    assert!(
        connect(ip, &env.client_login(NAME).await).await.is_err(),
        "fenced"
    );
}
