//! Two operator processes elect one leader with a Lease (issue 7, item 2): only the leader
//! writes; when it dies mid-hold the standby takes over within the lease duration, keeps the
//! hold, and acts exactly once; a paused leader that lost its lease stops; SIGTERM releases
//! the lease so a successor starts at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_operator::crd::{MemberState, MemberStatus};
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";
fn leases(env: &Env) -> Api<Lease> {
    Api::namespaced(env.cp.client(), "default")
}

/// How many times `reason` was reported about pod `related` (events.k8s.io, series counted).
async fn event_count(env: &Env, reason: &str, related: &str, note_contains: &str) -> i32 {
    let events: Api<Event> = Api::namespaced(env.cp.client(), &env.ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(related))
        .filter(|e| e.note.as_deref().unwrap_or_default().contains(note_contains))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

#[tokio::test]
async fn standby_takes_over_a_hold_from_a_killed_leader_without_acting_twice() {
    // The fixture's own operator runs without election and must not write next to the
    // replicas: it is stopped before they start.
    let mut env = Env::start_with(3, &["--leader-elect=false"]).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();

    let mut a = start_replica(&env, "operator-a", &[], &[]).await;
    assert_eq!(env.lease_holder().await.as_deref(), Some("operator-a"));
    let b = start_replica(&env, "operator-b", &[], &[]).await;
    let (code, body) = b.get("/readyz").await.unwrap();
    assert_eq!(code, 200, "a standby is ready: {body}");
    assert!(body.contains("standby"), "{body}");

    // hold = 8s + ceil(8s × 0.01) = 8.08s: longer than a takeover (≤ 3s + retry).
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "8s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    assert!(
        !b.log().contains("operator started"),
        "the standby must not run a controller:\n{}",
        b.log()
    );
    let uids_before = pod_uids(&env).await;
    let client = env.client_login(NAME).await;
    let ip = env.pod_ip(NAME, 2).await;
    let before = env.member(NAME, 2).await.unwrap();
    // Every first process is held once too: count the holds from here on.
    let slot_pod = format!("{NAME}-2");
    let holds_before = event_count(&env, "HoldStarted", &slot_pod, "").await;

    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-2"), Signal::SIGKILL)
        .await
        .unwrap();
    let (held, until) = wait_held(&env, NAME, 2, before.run_id.as_deref().unwrap()).await;
    // Kill the leader mid-hold, once the hold is on record and announced (the status is
    // written before the event, so a kill in between would lose the announcement, not the
    // hold; counting announcements needs the first one out).
    wait_for("HoldStarted published", Duration::from_secs(10), async || {
        Ok((event_count(&env, "HoldStarted", &slot_pod, "").await == holds_before + 1).then_some(()))
    })
    .await;
    a.kill().unwrap();
    let killed = Instant::now();
    a.wait_exit(Duration::from_secs(5)).await.unwrap();
    wait_for("operator-b leads", Duration::from_secs(15), async || {
        Ok((env.lease_holder().await.as_deref() == Some("operator-b")).then_some(()))
    })
    .await;
    let takeover = killed.elapsed();
    println!(
        "takeover after kill -9 of the leader: {takeover:?} (lease {REPLICA_LEASE_SECONDS}s, retry {REPLICA_RETRY_MS}ms)"
    );
    assert!(
        takeover
            <= Duration::from_secs(REPLICA_LEASE_SECONDS)
                + Duration::from_millis(REPLICA_RETRY_MS) * 2
                + Duration::from_secs(1),
        "takeover took {takeover:?}: more than the lease duration, two retries and 1s of API latency"
    );
    let took_over_at = Timestamp::now();
    assert!(took_over_at < until, "the takeover must happen mid-hold");

    // The new leader did not see the hold start, so it times it again in full on its own
    // clock (another replica's clock cannot shorten it): heldUntil moves to at least its first
    // sight of the hold + the hold, and says so (docs/design.md §9.1).
    let retimed = wait_for(
        "hold timed again by the new leader",
        Duration::from_secs(10),
        async || {
            let m = env.member(NAME, 2).await;
            Ok(m.and_then(|m| m.held_until).map(|t| t.0).filter(|t| *t > until))
        },
    )
    .await;
    assert!(
        retimed
            >= took_over_at
                .checked_add(SignedDuration::from_millis(8_080))
                .unwrap()
                - SignedDuration::from_secs(1),
        "retimed to {retimed}, takeover at {took_over_at}"
    );
    let served = first_client_write(ip, &client, Duration::from_secs(30))
        .await
        .unwrap();
    let late = served.duration_since(retimed);
    println!(
        "released {late:?} after the re-timed heldUntil ({:?} after the first leader's)",
        served.duration_since(until)
    );
    assert!(
        late >= SignedDuration::ZERO,
        "served at {served}, before the re-timed heldUntil {retimed}"
    );
    assert!(
        late <= SignedDuration::from_secs(1),
        "served {late:?} after heldUntil"
    );
    env.wait_event("HoldExtended").await;

    let after = env.member(NAME, 2).await.unwrap();
    assert_eq!(after.state, MemberState::Ready, "{after:?}");
    // The leader may have died while the member was still Lost (new process not yet
    // identified): then the standby identified it, under the same hold.
    if held.run_id.is_some() {
        assert_eq!(after.run_id, held.run_id, "the held process is the one released");
    }
    assert_ne!(after.run_id, before.run_id, "a new process serves");
    assert!(after.held_until.is_none(), "{after:?}");
    let new_run = after.run_id.clone().unwrap();
    // Events land shortly after the action (a loaded machine can take a while): wait for the
    // release's, give any duplicate a moment to land too, then count exactly.
    wait_for("the release's event", Duration::from_secs(10), async || {
        Ok((event_count(&env, "InstanceReleased", &slot_pod, &new_run).await >= 1).then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        event_count(&env, "HoldStarted", &slot_pod, "").await,
        holds_before + 1,
        "one hold for the kill: {:#?}",
        slot_events(&env, &slot_pod).await
    );
    assert_eq!(
        event_count(&env, "InstanceReleased", &slot_pod, &new_run).await,
        1,
        "one release of the held process"
    );
    assert_eq!(pod_uids(&env).await, uids_before, "no pod was replaced");
    let lease = leases(&env).get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(lease.lease_transitions, Some(1), "{lease:?}");
    assert!(b.log().contains("acquired the leader lease"), "{}", b.log());

    // SIGTERM: the leader gives the lease up after its controller stopped.
    let mut b = b;
    let status = b.terminate(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status}\n{}", b.log());
    assert_eq!(env.lease_holder().await, None, "lease released on SIGTERM");
    let started = Instant::now();
    let c = start_replica(&env, "operator-c", &[], &[]).await;
    assert_eq!(env.lease_holder().await.as_deref(), Some("operator-c"));
    println!("successor of a released lease ready in {:?}", started.elapsed());
    // A released lease is taken at the first attempt, not after it expires.
    assert!(!c.log().contains("standing by"), "{}", c.log());
}

#[tokio::test]
async fn a_paused_leader_that_lost_its_lease_stops() {
    let mut env = Env::start_with(1, &["--leader-elect=false"]).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let mut a = start_replica(&env, "operator-a", &[], &[]).await;
    let b = start_replica(&env, "operator-b", &[], &[]).await;

    // A stopped process cannot renew: the standby takes over after the lease duration.
    kill(Pid::from_raw(a.pid() as i32), Signal::SIGSTOP).unwrap();
    wait_for("operator-b leads", Duration::from_secs(15), async || {
        Ok((env.lease_holder().await.as_deref() == Some("operator-b")).then_some(()))
    })
    .await;
    kill(Pid::from_raw(a.pid() as i32), Signal::SIGCONT).unwrap();
    // Woken past its renew deadline, the old leader must notice and exit instead of writing.
    let status = a.wait_exit(Duration::from_secs(10)).await.unwrap();
    assert!(!status.success(), "{status}");
    let log = a.log();
    assert!(
        log.contains("not renewed within the renew deadline") || log.contains("taken by another process"),
        "{log}"
    );
    assert_eq!(env.lease_holder().await.as_deref(), Some("operator-b"));
    drop(b);
}

/// (reason, note, reporting instance, count) of every event about pod `related`, for
/// failure messages.
async fn slot_events(env: &Env, related: &str) -> Vec<(String, String, String, i32)> {
    let events: Api<Event> = Api::namespaced(env.cp.client(), &env.ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(related))
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.reporting_instance.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect()
}

async fn pod_uids(env: &Env) -> Vec<(String, String)> {
    let mut uids: Vec<_> = env
        .pods()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
        .collect();
    uids.sort();
    uids
}

/// Safety review 3, N6: two operators elected with different Leases (a `helm upgrade` that
/// renames `leaderElection.leaseName`, two installs) never both act on one cluster. The status
/// names its writer's Lease; the other operator leaves the cluster alone (Warning
/// `LedByAnotherOperator`) and takes it over only once that Lease goes unrenewed for its
/// duration (`LeaseTakenOver`). A killed member is held and released once, by the owner.
#[tokio::test]
async fn operators_with_different_leases_never_both_act_on_one_cluster() {
    let mut env = Env::start_with(3, &["--leader-elect=false"]).await;
    env.operator.terminate(Duration::from_secs(10)).await.unwrap();
    let mut a = start_replica(&env, "operator-a", &[], &[]).await;
    let b = start_replica(&env, "operator-b", &["--lease-name=renamed"], &[]).await;
    assert_eq!(env.lease_holder().await.as_deref(), Some("operator-a"));

    env.serving_with_ttl(NAME, 3, "3s").await;
    let lease_of = async || {
        env.cluster(NAME)
            .await
            .status
            .and_then(|s| s.lease)
            .unwrap_or_default()
    };
    let owner = lease_of().await;
    assert!(
        owner == "default/redlock-operator" || owner == "default/renamed",
        "status.lease names one of the two Leases: {owner:?}"
    );
    // Whichever recorded the cluster first owns it; the other waits.
    let a_owns = owner == "default/redlock-operator";
    env.wait_event("LedByAnotherOperator").await;

    let slot_pod = format!("{NAME}-2");
    let holds_before = event_count(&env, "HoldStarted", &slot_pod, "").await;
    // One operator's events of one slot fold into a series (count, first note).
    let releases_before = event_count(&env, "InstanceReleased", &slot_pod, "").await;
    let (before, ..) = kill_until_held(&env, NAME, 2).await;
    env.wait_member(
        NAME,
        2,
        "released again",
        Duration::from_secs(30),
        |m: &MemberStatus| m.state == MemberState::Ready && m.run_id != before.run_id,
    )
    .await;
    wait_for("the release's event", Duration::from_secs(10), async || {
        Ok((event_count(&env, "InstanceReleased", &slot_pod, "").await > releases_before).then_some(()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        event_count(&env, "HoldStarted", &slot_pod, "").await,
        holds_before + 1,
        "one hold: {:#?}",
        slot_events(&env, &slot_pod).await
    );
    assert_eq!(
        event_count(&env, "InstanceReleased", &slot_pod, "").await,
        releases_before + 1,
        "one release, by the owner: {:#?}",
        slot_events(&env, &slot_pod).await
    );
    let (owner_log, other_log) = if a_owns {
        (a.log(), b.log())
    } else {
        (b.log(), a.log())
    };
    assert!(
        owner_log.contains("released process"),
        "the owner released it:\n{owner_log}"
    );
    assert!(
        !other_log.contains("released process") && !other_log.contains("fenced"),
        "the other operator acted on the cluster:\n{other_log}"
    );
    assert_eq!(lease_of().await, owner, "ownership did not move");

    // The owner dies (kill -9: its Lease is never given up). The other takes over once that
    // Lease has gone unrenewed for its duration, and acts from then on.
    let mut b = b;
    let killed = Instant::now();
    if a_owns {
        a.kill().unwrap();
        a.wait_exit(Duration::from_secs(5)).await.unwrap();
    } else {
        b.kill().unwrap();
        b.wait_exit(Duration::from_secs(5)).await.unwrap();
    }
    let successor = if a_owns {
        "default/renamed"
    } else {
        "default/redlock-operator"
    };
    wait_for(
        "the other operator takes the cluster over",
        Duration::from_secs(20),
        async || Ok((lease_of().await == successor).then_some(())),
    )
    .await;
    let takeover = killed.elapsed();
    println!(
        "takeover of a cluster led by a killed operator's Lease: {takeover:?} (lease {REPLICA_LEASE_SECONDS}s)"
    );
    assert!(
        takeover >= Duration::from_secs(REPLICA_LEASE_SECONDS),
        "taken over after {takeover:?}, before the Lease could expire"
    );
    env.wait_event("LeaseTakenOver").await;
    let (before, ..) = kill_until_held(&env, NAME, 1).await;
    env.wait_member(
        NAME,
        1,
        "released by the successor",
        Duration::from_secs(30),
        |m: &MemberStatus| m.state == MemberState::Ready && m.run_id != before.run_id,
    )
    .await;
}
