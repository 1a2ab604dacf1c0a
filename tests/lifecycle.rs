//! Instance lifecycle on the real control plane with real redis-server processes: fenced at
//! start, held in full (also a slot's first process), released at `heldUntil`.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::DeleteParams;
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";

/// Short TTLs keep the tests fast: hold = 3s + ceil(3s × 0.01) + 0.5s = 3.53s.
fn short_spec() -> serde_json::Value {
    json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "500ms"})
}

/// A new cluster's first processes are held in full: nothing the operator can read proves that
/// no earlier process of the same pod name (an earlier incarnation of the cluster, a status
/// wiped or restored) granted locks that are still valid.
#[tokio::test]
async fn new_cluster_holds_its_first_processes_in_full_and_enforces_its_settings() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec()).await;
    // Every member is held first, with the full hold (3.53 s) from when its process was seen.
    let mut held = vec![];
    for slot in 0..3 {
        let (m, until) = wait_held(&env, NAME, slot, "none").await;
        assert_eq!(m.state, MemberState::Held, "{m:?}");
        let started = m.hold_started_at.as_ref().expect("holdStartedAt").0;
        assert!(
            until.duration_since(started) >= SignedDuration::from_millis(3_530),
            "{m:?}"
        );
        assert!(
            m.message
                .as_deref()
                .unwrap_or_default()
                .contains("first process of the slot"),
            "{m:?}"
        );
        held.push((slot, until));
    }
    let client = env.client_login(NAME).await;
    // A lock client gets in no earlier than heldUntil, and soon after it (all slots watched at
    // once: their holds end within moments of each other).
    let mut tries = vec![];
    for (slot, until) in held {
        let ip = env.pod_ip(NAME, slot).await;
        let client = client.clone();
        tries.push(async move {
            (
                until,
                first_client_write(ip, &client, Duration::from_secs(20)).await,
            )
        });
    }
    for (until, served) in futures::future::join_all(tries).await {
        assert_released_on_time(until, served.unwrap());
    }
    let c = env.wait_ready(NAME, 3, Duration::from_secs(10)).await;
    let s = c.status.unwrap();
    assert_eq!(
        (s.instances, s.quorum, s.held_instances),
        (Some(3), Some(2), Some(0))
    );
    for m in &s.members {
        assert_eq!(m.state, MemberState::Ready, "{m:?}");
        assert!(m.held_until.is_none() && m.run_id.is_some(), "{m:?}");
    }

    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    for slot in 0..3 {
        let ip = env.pod_ip(NAME, slot).await;
        assert!(
            lock(ip, &client, "res", "a", Duration::from_secs(1))
                .await
                .unwrap()
        );
        let mut c = connect(ip, &admin).await.unwrap();
        for (key, want) in [
            ("save", ""),
            ("appendonly", "no"),
            ("maxmemory-policy", "noeviction"),
            ("replicaof", ""),
        ] {
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(key)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(
                got.get(1).map(String::as_str).unwrap_or(""),
                want,
                "slot {slot} {key}: {got:?}"
            );
        }
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut c).await.unwrap();
        assert_eq!(
            role[0],
            redis::Value::BulkString(b"master".to_vec()),
            "no replication"
        );
        let default: redis::Value = redis::cmd("ACL")
            .arg("GETUSER")
            .arg("default")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(
            format!("{default:?}").contains("\"off\""),
            "default user off: {default:?}"
        );
        // The client user cannot change what the hold rule depends on.
        let mut as_client = connect(ip, &client).await.unwrap();
        let refused: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query_async(&mut as_client)
            .await;
        let err = refused.unwrap_err();
        assert!(err.to_string().contains("no permissions"), "{err:?}");
    }
}

/// A ready cluster of `short_spec` whose member `slot` was killed (kill -9) and is held again.
struct Killed {
    env: Env,
    client: Login,
    /// The member's pod address.
    ip: std::net::IpAddr,
    /// The member's record before the kill.
    before: redlock_operator::crd::MemberStatus,
    /// The replacement's `heldUntil`.
    until: Timestamp,
    /// Releases, and those ahead of their status write, before the kill.
    releases_before: f64,
    ahead_before: f64,
}

async fn kill_a_member_of_a_ready_cluster(slot: i32) -> Killed {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let client = env.client_login(NAME).await;
    let before = env.member(NAME, slot).await.unwrap();
    let ip = env.pod_ip(NAME, slot).await;
    let releases_before = cluster_counter(&env, RELEASES, NAME).await;
    let ahead_before = cluster_counter(&env, AHEAD, NAME).await;
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-{slot}"), Signal::SIGKILL)
        .await
        .unwrap();
    let (_, until) = wait_held(&env, NAME, slot, before.run_id.as_deref().unwrap()).await;
    Killed {
        env,
        client,
        ip,
        before,
        until,
        releases_before,
        ahead_before,
    }
}

#[tokio::test]
async fn kill_9_holds_the_restarted_process_until_held_until() {
    let killed = kill_a_member_of_a_ready_cluster(0).await;
    let (env, client, ip, until) = (&killed.env, &killed.client, killed.ip, killed.until);
    // Whether a `Held` record named the replacement before its hold ended (a slow restart is
    // first seen after it, and its `Ready` record is the first to name it).
    let old_run = killed.before.run_id.clone();
    let seen = env
        .wait_member(NAME, 0, "the replacement named", Duration::from_secs(15), |m| {
            m.run_id.is_some()
                && m.run_id != old_run
                && matches!(m.state, MemberState::Held | MemberState::Ready)
        })
        .await;
    let named_in_hold = seen.state == MemberState::Held && Timestamp::now() < until;
    let err = lock(ip, client, "res", "b", Duration::from_secs(1)).await;
    assert!(
        err.is_err() || Timestamp::now() >= until,
        "fenced process accepted a client: {err:?}"
    );

    let served = first_client_write(ip, client, Duration::from_secs(15))
        .await
        .unwrap();
    assert_released_on_time(until, served);
    let after = env.wait_ready(NAME, 3, Duration::from_secs(10)).await;
    // Nobody but the operator wrote the cluster during the hold, so the hold was on record in
    // its own last status write: the release went ahead of its `Ready` write.
    let ahead = cluster_counter(env, AHEAD, NAME).await - killed.ahead_before;
    if named_in_hold {
        assert_eq!(ahead, 1.0, "the release went ahead of its status write");
    } else {
        println!("the replacement was first named after its hold: released after the write ({ahead} ahead)");
    }
    let m = after
        .status
        .unwrap()
        .members
        .into_iter()
        .find(|m| m.slot == 0)
        .unwrap();
    assert_eq!(m.state, MemberState::Ready);
    assert_ne!(m.run_id, killed.before.run_id, "a new process serves");
}

/// Releases sent before their `Ready` status write (docs/design.md §2).
const AHEAD: &str = "redlock_instance_releases_ahead_of_status_total";
const RELEASES: &str = "redlock_instance_releases_total";

/// A release goes ahead of its status write only when the hold it ends is on record in the
/// operator's own last write, with nothing newer: here a user keeps editing the cluster's
/// metadata through the end of the hold, so the cache shows the user's version and the release
/// waits for its write (write-ahead), still at `heldUntil` and never before it.
#[tokio::test]
async fn a_user_edit_at_the_hold_end_puts_the_status_write_before_the_release() {
    let killed = kill_a_member_of_a_ready_cluster(2).await;
    let (env, client, ip, until) = (&killed.env, &killed.client, killed.ip, killed.until);
    // Three user edits just before the hold's end (600, 350 and 100 ms before it): the
    // operator's own writes settle within the hold, so at its end the cache shows a user's.
    // Each edit is sent when due; a slow API server only makes it land later, never earlier.
    let clusters = env.clusters();
    let editor = tokio::spawn(async move {
        let mut sent = Vec::new();
        for before_end in [600, 350, 100] {
            let due = until
                .checked_sub(SignedDuration::from_millis(before_end))
                .unwrap();
            if let Ok(wait) = Duration::try_from(due.duration_since(Timestamp::now())) {
                tokio::time::sleep(wait).await;
            }
            let patch = json!({"metadata": {"annotations": {"example.com/touched": before_end.to_string()}}});
            clusters
                .patch(
                    NAME,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await
                .unwrap();
            sent.push(Timestamp::now());
        }
        sent
    });
    let served = first_client_write(ip, client, Duration::from_secs(15))
        .await
        .unwrap();
    let sent = editor.await.unwrap();
    assert_released_on_time(until, served);
    assert_eq!(sent.len(), 3);
    env.wait_ready(NAME, 3, Duration::from_secs(10)).await;
    assert_eq!(
        cluster_counter(env, RELEASES, NAME).await - killed.releases_before,
        1.0
    );
    assert_eq!(
        cluster_counter(env, AHEAD, NAME).await,
        killed.ahead_before,
        "a release ahead of its status write although a user's edit was newer than the record"
    );
}

/// A crash the kubelet has not reported (its node cut off from the API server: it neither
/// restarts the container nor says it stopped). The operator finds the address refusing
/// connections and shows the member `Lost` at once (`refusedSince`), out of the serving
/// count, with nothing held and the crashed process still on record. Once the kubelet is back
/// and restarts the container, the replacement is held in full from when it is seen, never
/// from the refusal (a refusal proves nothing: the process may have run on behind a rule that
/// rejects the operator alone), and a second client never gets a majority while the first
/// lock, taken on the crashed member before the crash, is valid.
#[tokio::test]
async fn a_crash_the_kubelet_has_not_reported_shows_lost_at_once_and_the_replacement_is_held_in_full() {
    let env = Env::start(3).await;
    let ttl = Duration::from_secs(10);
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "10s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let before = env.member(NAME, 0).await.unwrap();
    let old_run = before.run_id.clone().unwrap();
    let node = env.node_of(NAME, 0).await;
    let first_expires = env.first_lock(NAME, &[0, 1], ttl).await;

    env.cp.nodes().partition_node(&node).unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-0"), Signal::SIGKILL)
        .await
        .unwrap();
    let presumed = env
        .wait_member(NAME, 0, "Lost on the refusal", Duration::from_secs(10), |m| {
            m.state == MemberState::Lost && m.refused_since.is_some()
        })
        .await;
    assert_eq!(presumed.run_id.as_deref(), Some(old_run.as_str()), "{presumed:?}");
    assert!(
        presumed.held_until.is_none(),
        "no hold on a refusal: {presumed:?}"
    );
    let message = presumed.message.clone().unwrap_or_default();
    assert!(message.contains("presumed crashed"), "{message}");
    let status = env.cluster(NAME).await.status.unwrap();
    assert_eq!(status.ready_instances, Some(2), "not counted as serving");

    let healed = Timestamp::now();
    env.cp.nodes().heal_node(&node).await.unwrap();
    let (held, until) = wait_held(&env, NAME, 0, &old_run).await;
    let started = held.hold_started_at.as_ref().expect("a hold has a start").0;
    assert!(
        started >= healed,
        "the hold counts from the replacement (started {started}), not from the refusal ({:?}); the kubelet came back at {healed}",
        presumed.refused_since
    );
    assert!(
        until.duration_since(started) >= SignedDuration::try_from(ttl).unwrap(),
        "held in full: {started} .. {until}"
    );
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", ttl, first_expires)
        .await;
    println!("{attempts} attempts of a second client while the first lock was valid");
}

#[tokio::test]
async fn pod_deletion_holds_the_replacement() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let client = env.client_login(NAME).await;
    let before = env.member(NAME, 1).await.unwrap();

    env.pods()
        .delete(&format!("{NAME}-1"), &DeleteParams::default())
        .await
        .unwrap();
    let (_, until) = wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    // The replacement pod comes up fenced; it gets a new address.
    let ip = wait_for("replacement pod", Duration::from_secs(20), async || {
        let pod = env.pods().get_opt(&format!("{NAME}-1")).await?;
        Ok(pod
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.status?.pod_ip?.parse().ok()))
    })
    .await;
    let served = first_client_write(ip, &client, Duration::from_secs(20))
        .await
        .unwrap();
    assert_released_on_time(until, served);
}

#[tokio::test]
async fn operator_restart_mid_hold_does_not_shorten_the_hold() {
    let mut env = Env::start(3).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "6s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let client = env.client_login(NAME).await;
    let before = env.member(NAME, 2).await.unwrap();
    let ip = env.pod_ip(NAME, 2).await;

    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-2"), Signal::SIGKILL)
        .await
        .unwrap();
    let (_, until) = wait_held(&env, NAME, 2, before.run_id.as_deref().unwrap()).await;
    env.operator.kill().unwrap();
    env.operator.wait_exit(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The new process sees the hold first after this.
    let restarted = Timestamp::now();
    env.operator = start_operator(&env.cp, "operator-2.log").await;

    let m = env.member(NAME, 2).await.unwrap();
    assert!(
        m.held_until.as_ref().is_some_and(|t| t.0 >= until),
        "restart kept the hold: {m:?}"
    );
    // Its first status write re-times the hold (below). Waited for, not slept on: the write
    // can take longer than a fixed pause on a loaded machine.
    let status = wait_for(
        "the restarted operator's first write",
        Duration::from_secs(10),
        async || {
            let status = env.cluster(NAME).await.status.unwrap();
            let retimed = status
                .members
                .iter()
                .find(|m| m.slot == 2)
                .and_then(|m| m.held_until.as_ref())
                .is_some_and(|t| t.0 > until);
            Ok(retimed.then_some(status))
        },
    )
    .await;
    // The restarted operator must not mistake its still-empty caches for lost members.
    assert_eq!(
        status.held_instances,
        Some(1),
        "only the killed member is held: {:?}",
        status.members
    );
    // It did not see the hold start, so it times it again in full on its own clock: the hold
    // only lengthens, to at least its first sight + the hold (docs/design.md §9.1).
    let m = status.members.iter().find(|m| m.slot == 2).unwrap();
    let retimed = m.held_until.as_ref().unwrap().0;
    assert!(
        retimed > until && retimed >= restarted.checked_add(SignedDuration::from_millis(6_060)).unwrap(),
        "re-timed hold {retimed} (recorded {until}, restart at {restarted})"
    );
    let served = first_client_write(ip, &client, Duration::from_secs(20))
        .await
        .unwrap();
    assert_released_on_time(retimed, served);
}

/// The scenario the hold rule exists for: A holds `res` on all three; one master crashes and
/// comes back empty at once; B must not get a majority while A's lock is valid.
#[tokio::test]
async fn seed_scenario_no_second_majority_while_the_first_lock_is_valid() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let client = env.client_login(NAME).await;
    let mut ips = vec![];
    for slot in 0..3 {
        ips.push(env.pod_ip(NAME, slot).await);
    }
    let ttl = Duration::from_secs(3);
    let acquired = Instant::now();
    for ip in &ips {
        assert!(
            lock(*ip, &client, "res", "client-a", ttl).await.unwrap(),
            "A locks {ip}"
        );
    }
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-0"), Signal::SIGKILL)
        .await
        .unwrap();

    let mut attempts = 0;
    while acquired.elapsed() < ttl {
        let mut granted = 0;
        for ip in &ips {
            if let Ok(true) = lock(*ip, &client, "res", "client-b", ttl).await {
                granted += 1;
            }
        }
        attempts += 1;
        assert!(
            granted < 2 || acquired.elapsed() >= ttl,
            "B got a majority ({granted}/3) {:?} after A locked with TTL {ttl:?}",
            acquired.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(attempts > 10, "B tried during A's TTL ({attempts} attempts)");
}

/// Scale up adds slots (held, then released once the new list is confirmed); scale down fences
/// and holds the highest slots before their pods go; deleting the RedlockCluster removes every
/// child. (Clients on both lists: tests/everyday_operations.rs.)
#[tokio::test]
async fn scale_up_down_and_delete() {
    let env = Env::start(5).await;
    env.create_cluster(NAME, short_spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;

    env.patch_spec(NAME, json!({"instances": 5})).await;
    env.confirm_resize(NAME).await;
    let grown = env.wait_ready(NAME, 5, Duration::from_secs(30)).await;
    let s = grown.status.unwrap();
    assert_eq!(
        (s.instances, s.quorum, s.held_instances),
        (Some(5), Some(3), Some(0))
    );
    assert!(
        s.members.iter().all(|m| m.held_until.is_none()),
        "served after their hold: {:?}",
        s.members
    );

    env.patch_spec(NAME, json!({"instances": 3})).await;
    // The removed members are fenced and held first, while their pods still exist.
    let removing = wait_for(
        "slot 4 fenced and held for removal",
        Duration::from_secs(10),
        async || {
            Ok(env.member(NAME, 4).await.filter(|m| {
                m.state == MemberState::Held
                    && m.held_until.is_some()
                    && m.message
                        .as_deref()
                        .unwrap_or_default()
                        .contains("removed by scale-down")
            }))
        },
    )
    .await;
    let until = removing.held_until.unwrap().0;
    wait_for("slots 3 and 4 removed", Duration::from_secs(30), async || {
        let left: Vec<String> = env
            .pods()
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        Ok((left.len() == 3 && !left.iter().any(|n| n.ends_with("-3") || n.ends_with("-4"))).then_some(()))
    })
    .await;
    let shrunk = env
        .wait_ready(NAME, 3, Duration::from_secs(20))
        .await
        .status
        .unwrap();
    assert_eq!((shrunk.instances, shrunk.quorum), (Some(3), Some(2)));
    assert!(
        Timestamp::now() >= until,
        "pods deleted only after the removal hold"
    );
    wait_for(
        "slot 4 record dropped after its hold",
        Duration::from_secs(15),
        async || Ok(env.member(NAME, 4).await.is_none().then_some(())),
    )
    .await;
    assert!(Timestamp::now() >= until, "record dropped only after the hold");

    env.clusters()
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "children garbage-collected",
        Duration::from_secs(60),
        async || {
            let pods = env.pods().list(&Default::default()).await?.items.len();
            let secrets =
                kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.cp.client(), &env.ns)
                    .list(&kube::api::ListParams::default().labels("app.kubernetes.io/instance=locks"))
                    .await?
                    .items
                    .len();
            Ok((pods == 0 && secrets == 0).then_some(()))
        },
    )
    .await;
}

/// A pod's readiness as the API shows it: its `Ready` condition, the operator's readiness gate
/// (`redlock.dev/serving`: status and reason, if set) and the Redis container's id.
async fn readiness(env: &Env, slot: i32) -> (bool, Option<(String, String)>, Option<String>) {
    let pod = env.pods().get(&format!("{NAME}-{slot}")).await.unwrap();
    let status = pod.status.unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    let ready = conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let gate = conditions
        .iter()
        .find(|c| c.type_ == redlock_operator::decide::serving_gate::SERVING_CONDITION)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()));
    let container = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == "redis")
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .and_then(|c| c.container_id);
    (ready, gate, container)
}

/// Readiness follows the fence (docs/design.md): a pod is Ready only while its process is
/// released. A maintenance fence takes the pod out of its Services at once (the operator's
/// readiness gate goes `False`), and a container restarted while no operator runs, which no
/// one marks, stays not Ready and refuses lock clients (the startup probe logs in as one,
/// and every process starts fenced) until the next operator releases it after a full hold.
#[tokio::test]
async fn a_pod_is_ready_only_while_its_process_is_released() {
    let mut env = Env::start(3).await;
    env.create_cluster(NAME, short_spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let client = env.client_login(NAME).await;
    for slot in 0..3 {
        wait_for(
            "every pod Ready behind an open gate",
            Duration::from_secs(20),
            async || {
                let (ready, gate, _) = readiness(&env, slot).await;
                Ok((ready && gate == Some(("True".into(), "Released".into()))).then_some(()))
            },
        )
        .await;
    }

    // A maintenance fence of a running process: out of its Services within moments, not a
    // probe period later.
    let fence = |value: serde_json::Value| {
        let clusters = env.clusters();
        async move {
            let patch = json!({"metadata": {"annotations": {redlock_operator::hold::maintenance::FENCED_MEMBERS: value}}});
            clusters
                .patch(
                    NAME,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await
                .unwrap();
        }
    };
    fence(json!(r#"{"1": "readiness test"}"#)).await;
    let fenced_at = Instant::now();
    wait_for(
        "the fenced member's pod not Ready",
        Duration::from_secs(10),
        async || {
            let (ready, gate, _) = readiness(&env, 1).await;
            Ok((!ready && gate == Some(("False".into(), "Fenced".into()))).then_some(()))
        },
    )
    .await;
    println!("fence to pod not Ready: {:?}", fenced_at.elapsed());
    let ip1 = env.pod_ip(NAME, 1).await;
    assert!(
        connect(ip1, &client).await.is_err(),
        "the fenced member refuses lock clients"
    );
    fence(serde_json::Value::Null).await;
    wait_for(
        "the unfenced member Ready again after its hold",
        Duration::from_secs(30),
        async || {
            let (ready, gate, _) = readiness(&env, 1).await;
            Ok(
                (ready && gate.is_some_and(|g| g.0 == "True") && connect(ip1, &client).await.is_ok())
                    .then_some(()),
            )
        },
    )
    .await;

    // No operator: a crash restarts the container, and nothing writes the gate.
    let before = env.member(NAME, 2).await.unwrap();
    let (_, _, old_container) = readiness(&env, 2).await;
    env.operator.kill().unwrap();
    env.operator.wait_exit(Duration::from_secs(5)).await.unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-2"), Signal::SIGKILL)
        .await
        .unwrap();
    wait_for("the container restarted", Duration::from_secs(30), async || {
        let (_, _, container) = readiness(&env, 2).await;
        Ok(container
            .filter(|c| Some(c) != old_container.as_ref())
            .map(|_| ()))
    })
    .await;
    let ip2 = env.pod_ip(NAME, 2).await;
    // Two startup probe periods and more: never Ready, fenced, the stale gate still open.
    let watch_until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < watch_until {
        let (ready, gate, _) = readiness(&env, 2).await;
        assert!(!ready, "a restarted, fenced process must not read Ready");
        assert_eq!(
            gate.map(|g| g.0).as_deref(),
            Some("True"),
            "no operator wrote the gate"
        );
        assert!(
            connect(ip2, &client).await.is_err(),
            "the restarted process is fenced"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The next operator holds it in full, then releases it, and only then is it Ready.
    env.operator = start_operator(&env.cp, "operator-2.log").await;
    let (held, until) = wait_held(&env, NAME, 2, before.run_id.as_deref().unwrap()).await;
    // The gate follows the status write that records the hold.
    wait_for(
        "the held member's gate closed",
        Duration::from_secs(5),
        async || {
            let (ready, gate, _) = readiness(&env, 2).await;
            assert!(!ready, "held: {held:?}");
            Ok(gate.is_some_and(|g| g.0 == "False").then_some(()))
        },
    )
    .await;
    wait_for("the released member Ready", Duration::from_secs(30), async || {
        let (ready, gate, _) = readiness(&env, 2).await;
        Ok((ready && gate.is_some_and(|g| g.0 == "True")).then_some(()))
    })
    .await;
    assert!(
        Timestamp::now() >= until,
        "Ready no earlier than heldUntil {until}"
    );
    assert!(connect(ip2, &client).await.is_ok());
}

/// Safety-review 3, N10: an operator whose ClusterRole predates the readiness gate (no `patch
/// pods/status`: a new image on an old chart's RBAC). Every pod it builds carries the gate
/// `redlock.dev/serving`, which it cannot open, so a released member stays not Ready and out
/// of its Service. It says so: the start-up access review finds the refusal, and every cluster
/// shows it in `ChildrenApplied` (False, Warning `ChildApplyFailed`), next to a member that is
/// released but not Ready.
#[tokio::test]
async fn an_operator_that_may_not_open_readiness_gates_says_so() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Api, PostParams};
    let mut env = Env::start(1).await;
    env.operator.kill().unwrap();
    // The chart's ClusterRole without its pods/status rule, bound to a user of its own.
    let user = "operator-old-rbac";
    let docs = redlock_test_support::helm_chart::template("rl", "redlock-system", &[]).unwrap();
    let chart_role = redlock_test_support::helm_chart::operator_cluster_role(&docs);
    let mut role: serde_json::Value = serde_json::to_value(chart_role).unwrap();
    role["metadata"] = json!({"name": user});
    let rules = role["rules"].as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| !r["resources"].as_array().unwrap().contains(&json!("pods/status")));
    assert_eq!(
        rules.len(),
        before - 1,
        "the chart grants pods/status in one rule"
    );
    let role: ClusterRole = serde_json::from_value(role).unwrap();
    Api::<ClusterRole>::all(env.cp.client())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(env.cp.client())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let kubeconfig = env.cp.kubeconfig_for_user(user, None).unwrap();
    env.operator = redlock_testenv::operator::OperatorProcess::start(
        &operator_bin(),
        &kubeconfig,
        &env.cp.dir().join("operator-old-rbac.log"),
        &["--leader-elect=false"],
    )
    .unwrap();
    env.operator.wait_ready(Duration::from_secs(60)).await.unwrap();

    env.create_cluster(
        NAME,
        json!({"instances": 1, "maxLockTTL": "2s", "holdMargin": "0s"}),
    )
    .await;
    let condition = wait_for("ChildrenApplied False", Duration::from_secs(30), async || {
        let s = env.cluster(NAME).await.status.unwrap_or_default();
        Ok(s.conditions
            .into_iter()
            .find(|c| c.type_ == "ChildrenApplied" && c.status == "False"))
    })
    .await;
    assert!(
        condition.message.contains("may not patch pods/status")
            && condition.message.contains("stay not Ready"),
        "{condition:?}"
    );
    env.wait_event("ChildApplyFailed").await;
    // What it explains: released, and still not Ready.
    env.wait_member(NAME, 0, "released", Duration::from_secs(30), |m| {
        m.state == MemberState::Ready
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = env.pods().get(&format!("{NAME}-0")).await.unwrap();
    let ready = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    assert_eq!(ready.as_deref(), Some("False"), "the gate stayed shut");
}
