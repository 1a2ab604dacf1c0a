//! Holds under everyday operations (issue 14), on the real control plane with real
//! redis-server processes. Each safety test is the way the rule can fail: a first client holds
//! a lock on a bare majority, an operation plus a crash follows, and a second client tries to
//! take a majority of its own (SET NX PX on every member, as Redlock clients do) until the
//! first lock has expired. It must never get one.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::admission::{Refusal, Refused};
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";

async fn kill(env: &Env, slot: i32) {
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-{slot}"), Signal::SIGKILL)
        .await
        .unwrap();
}

/// Issue 14, scenario 1: maxLockTTL lowered 10s → 2s while a 10 s lock is held on a bare
/// majority, then one of its members is killed. The replacement is held with the 10 s still
/// in force, so no second client gets a majority while the first lock is valid.
#[tokio::test]
async fn lowering_max_lock_ttl_keeps_holding_with_the_old_value() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "10s").await;
    let expiry = env.first_lock(NAME, &[1, 2], Duration::from_secs(10)).await;

    env.patch_spec(NAME, json!({"maxLockTTL": "2s"})).await;
    let hold = env
        .wait_hold(NAME, "lowering published, pending", |h| {
            h.published_max_lock_ttl == Some(Duration::from_secs(2).into()) && h.lowers_at.is_some()
        })
        .await;
    assert_eq!(hold.max_lock_ttl, Duration::from_secs(10), "{hold:?}");
    env.wait_event("MaxLockTTLLowering").await;
    assert_eq!(
        env.config_map(&format!("{NAME}-endpoints"), "maxLockTTLMillis")
            .await,
        "2000"
    );

    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    let (m, until) = wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    let started = m.hold_started_at.as_ref().unwrap().0;
    assert!(
        until.duration_since(started).as_secs_f64() >= 10.0,
        "held with the 10s in force: {m:?}"
    );
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));

    // Later the lowering takes effect, and the cluster serves again.
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    wait_for("lowered value in force", Duration::from_secs(20), async || {
        let h = env.cluster(NAME).await.status.and_then(|s| s.hold);
        Ok(h.filter(|h| h.max_lock_ttl == Duration::from_secs(2) && h.lowers_at.is_none()))
    })
    .await;
    env.wait_event("MaxLockTTLLowered").await;
}

/// Issue 14, a status wiped (a backup restore, `kubectl edit --subresource=status`) while a
/// lowering 20s → 2s is pending: clients are told 2s, and only the lost `status.hold` knew that
/// 20s was still in force. `<name>-endpoints` says so too (`holdMaxLockTTLMillis`), so a
/// member killed after the wipe is held with 20s, and no second client gets a majority while
/// the first lock is valid.
#[tokio::test]
async fn a_status_wiped_during_a_pending_lowering_keeps_the_old_value() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "20s").await;
    let expiry = env.first_lock(NAME, &[1, 2], Duration::from_secs(20)).await;

    env.patch_spec(NAME, json!({"maxLockTTL": "2s"})).await;
    env.wait_hold(NAME, "lowering published, pending", |h| {
        h.published_max_lock_ttl == Some(Duration::from_secs(2).into()) && h.lowers_at.is_some()
    })
    .await;
    let endpoints = format!("{NAME}-endpoints");
    wait_for("20s in force published", Duration::from_secs(10), async || {
        let v = env.config_map(&endpoints, "holdMaxLockTTLMillis").await;
        Ok((v == "20000").then_some(()))
    })
    .await;

    env.clusters()
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hold": null}})),
        )
        .await
        .unwrap();
    let recovered = wait_for(
        "a hold policy on record again",
        Duration::from_secs(10),
        async || Ok(env.cluster(NAME).await.status.and_then(|s| s.hold)),
    )
    .await;

    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    let (m, until) = wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    attempts.assert_cover(Duration::from_secs(2));
    let started = m.hold_started_at.as_ref().unwrap().0;
    assert!(
        until.duration_since(started).as_secs_f64() >= 20.0,
        "held with the 20s in force: {m:?}"
    );

    // Recovered as 20s in force, clients told 2s, the lowering timed again from the wipe.
    assert_eq!(recovered.max_lock_ttl, Duration::from_secs(20), "{recovered:?}");
    assert_eq!(
        recovered.published_max_lock_ttl,
        Some(Duration::from_secs(2).into()),
        "{recovered:?}"
    );
    assert!(recovered.lowers_at.is_some(), "{recovered:?}");
    // Lowered again one full hold of 20s after the wipe, and serving.
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    wait_for("lowered value in force", Duration::from_secs(40), async || {
        let h = env.cluster(NAME).await.status.and_then(|s| s.hold);
        Ok(h.filter(|h| h.max_lock_ttl == Duration::from_secs(2) && h.lowers_at.is_none()))
    })
    .await;
    assert_eq!(env.config_map(&endpoints, "holdMaxLockTTLMillis").await, "2000");
}

/// Issue 14, scenario 2: the edit that lowers maxLockTTL is one the operator rejects (a memory
/// request above its limit). Nothing is published, and the hold keeps the value in force.
#[tokio::test]
async fn a_rejected_edit_never_lowers_the_hold() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "10s").await;
    let expiry = env.first_lock(NAME, &[1, 2], Duration::from_secs(10)).await;

    env.patch_spec(
        NAME,
        json!({"maxLockTTL": "2s", "resources": {
            "requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
    )
    .await;
    wait_for("SpecAccepted False", Duration::from_secs(10), async || {
        let c = env.cluster(NAME).await;
        Ok(c.status
            .filter(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "SpecAccepted" && c.status == "False")
            })
            .and_then(|s| s.hold))
    })
    .await;
    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    let (m, until) = wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    assert!(
        until
            .duration_since(m.hold_started_at.as_ref().unwrap().0)
            .as_secs_f64()
            >= 10.0,
        "{m:?}"
    );
    let hold = env.cluster(NAME).await.status.unwrap().hold.unwrap();
    assert_eq!(hold.max_lock_ttl, Duration::from_secs(10), "{hold:?}");
    assert_eq!(hold.published_max_lock_ttl, Some(Duration::from_secs(10).into()));
    assert!(hold.lowers_at.is_none());
    assert_eq!(
        env.config_map(&format!("{NAME}-endpoints"), "maxLockTTLMillis")
            .await,
        "10000"
    );
    env.no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
}

/// Issue 14, scenario 3: delete and re-create with the same name (`kubectl replace --force`,
/// a helm reinstall), while a lock is held on every member. The old pods are removed (here at
/// once, as an impatient user would); the new object's first processes are held in full, so
/// no second client gets a majority while the first lock is valid.
#[tokio::test]
async fn delete_and_recreate_holds_the_new_processes() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "12s").await;
    let expiry = env.first_lock(NAME, &[0, 1, 2], Duration::from_secs(12)).await;

    env.clusters()
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("old object gone", Duration::from_secs(10), async || {
        Ok(env.clusters().get_opt(NAME).await?.is_none().then_some(()))
    })
    .await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "12s", "holdMargin": "0s"}),
    )
    .await;
    // The old pods still run (garbage collection takes its time): the new object says so.
    wait_for("name conflict reported", Duration::from_secs(10), async || {
        let s = env.cluster(NAME).await.status.unwrap_or_default();
        Ok(s.conditions
            .iter()
            .any(|c| c.type_ == "OwnershipConflict" && c.status == "True")
            .then_some(()))
    })
    .await;
    env.kubectl(&[
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/instance=locks",
        "--grace-period=0",
        "--force",
        "--wait=false",
    ])
    .await;
    let attempts = env
        .no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
    // The check above could only fail if the new processes existed before the lock expired.
    let c = env.cluster(NAME).await;
    let held = c.status.unwrap().members;
    assert!(
        held.iter()
            .all(|m| m.state == MemberState::Held && m.run_id.is_some()),
        "the new processes ran (held) before the first lock expired: {held:?}"
    );
    attempts.assert_cover(Duration::from_secs(2));
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
}

/// `kubectl delete rlc --cascade=orphan`, then re-create: the orphans serve on (they have
/// their keys) and are reported, never adopted, released, or deleted; once one is deleted,
/// its replacement is held in full.
#[tokio::test]
async fn orphans_are_reported_and_their_replacements_held() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "8s").await;
    env.kubectl(&["delete", "rlc", NAME, "--cascade=orphan"]).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "8s", "holdMargin": "0s"}),
    )
    .await;
    let s = wait_for("orphans reported", Duration::from_secs(15), async || {
        let s = env.cluster(NAME).await.status.unwrap_or_default();
        let all = s.members.len() == 3
            && s.members.iter().all(|m| {
                m.message
                    .as_deref()
                    .is_some_and(|t| t.contains("pod name taken") && t.contains("no controller"))
            });
        Ok(all.then_some(s))
    })
    .await;
    assert!(
        s.conditions
            .iter()
            .any(|c| c.type_ == "OwnershipConflict" && c.status == "True")
    );
    env.wait_event("NameConflict").await;
    // The orphans serve (they have their keys) and are left alone: a lock on a bare majority.
    let expiry = env.first_lock(NAME, &[0, 1], Duration::from_secs(8)).await;

    env.kubectl(&["delete", "pod", &format!("{NAME}-0"), "--wait=true"])
        .await;
    let deleted_at = Timestamp::now();
    let (m, until) = wait_held(&env, NAME, 0, "none").await;
    assert!(
        until.duration_since(deleted_at).as_secs_f64() >= 8.0,
        "held in full from after the orphan was gone: {m:?}"
    );
    env.no_second_holder_until(NAME, 3, "orders", Duration::from_secs(2), expiry)
        .await;
}

/// Issue 14 (audit finding C): with auth on, lock clients log in as the client user, and
/// `default` is off. Someone turning `default` on during a hold (`ACL SETUSER default on
/// nopass +@all ~*`) lets clients in as well as the client user would: the operator watches
/// both users, fences the process again (both users off, their connections killed) and
/// restarts the hold.
#[tokio::test]
async fn a_default_user_turned_on_during_a_hold_is_fenced_again() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "8s").await;
    let before = env.member(NAME, 0).await.unwrap();
    kill(&env, 0).await;
    wait_held(&env, NAME, 0, before.run_id.as_deref().unwrap()).await;
    let ip = env.pod_ip(NAME, 0).await;
    let admin = env.admin_login(NAME).await;
    let anonymous = Login {
        user: "default".into(),
        password: "anything".into(),
    };
    // Held may be recorded before the new process listens (its container restarted, the
    // probe not answered yet): wait for it to accept the admin.
    let mut a = wait_for(
        "restarted process accepts the admin",
        Duration::from_secs(10),
        async || Ok(connect(ip, &admin).await.ok()),
    )
    .await;
    assert!(
        connect(ip, &anonymous).await.is_err(),
        "default is off with auth on"
    );
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("on")
        .arg("nopass")
        .arg("+@all")
        .arg("~*")
        .query_async(&mut a)
        .await
        .unwrap();
    let turned_on = Timestamp::now();
    wait_for("default fenced again", Duration::from_secs(5), async || {
        Ok(connect(ip, &anonymous).await.is_err().then_some(()))
    })
    .await;
    env.wait_event("Refenced").await;
    let m = env.member(NAME, 0).await.unwrap();
    assert_eq!(m.state, MemberState::Held);
    assert!(
        m.held_until
            .as_ref()
            .unwrap()
            .0
            .duration_since(turned_on)
            .as_secs_f64()
            >= 8.0,
        "the hold restarted when default was found on: {m:?}"
    );
    for _ in 0..10 {
        assert!(
            lock(ip, &anonymous, "orders", "x", Duration::from_secs(1))
                .await
                .is_err(),
            "served as default during its hold"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A process found serving clients during its hold (someone ran `ACL SETUSER ... on`) is
/// fenced again at once, held in full from then, and reported; an edited ACL Secret is
/// restored by content.
#[tokio::test]
async fn a_process_unfenced_outside_the_operator_is_fenced_again() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "8s").await;
    let before = env.member(NAME, 0).await.unwrap();
    kill(&env, 0).await;
    wait_held(&env, NAME, 0, before.run_id.as_deref().unwrap()).await;
    let ip = env.pod_ip(NAME, 0).await;
    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    // Held is on record as soon as the loss is seen, which can be before the restarted
    // process listens (CI under load: connection refused).
    let mut a = wait_for(
        "the restarted process answers",
        Duration::from_secs(20),
        async || Ok(connect(ip, &admin).await.ok()),
    )
    .await;
    // Let a client in behind the operator's back, and keep its connection open (a fence must
    // also end connections already logged in, not only refuse new logins).
    let (mut logged_in, turned_on) = switch_on_and_log_in(&mut a, ip, &client).await;
    // A client that got in meanwhile is thrown out, and no new one gets in.
    wait_for("fenced again", Duration::from_secs(5), async || {
        Ok(connect(ip, &client).await.is_err().then_some(()))
    })
    .await;
    // The fence goes before its status write: the restarted hold is on record right after.
    let m = env
        .wait_member(
            NAME,
            0,
            "the restarted hold on record",
            Duration::from_secs(5),
            |m| {
                m.held_until
                    .as_ref()
                    .is_some_and(|u| u.0.duration_since(turned_on).as_secs_f64() >= 8.0)
            },
        )
        .await;
    assert_eq!(m.state, MemberState::Held, "{m:?}");
    wait_for("Refenced event", Duration::from_secs(5), async || {
        Ok(env.has_event("Refenced").await.then_some(()))
    })
    .await;
    for _ in 0..10 {
        assert!(connect(ip, &client).await.is_err(), "served during its hold");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ping: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut logged_in).await;
    assert!(
        ping.is_err(),
        "the connection logged in before the fence still works: {ping:?}"
    );

    // The ACL Secret edited to start every process unfenced (the file the pods name, that of
    // their auth mode): restored by content, although the operator's annotation on it was
    // left untouched.
    let secrets: Api<Secret> = Api::namespaced(env.cp.client(), &env.ns);
    let acl_name = format!("{NAME}-acl");
    let key = "users-auth.acl";
    let original = secrets.get(&acl_name).await.unwrap().data.unwrap()[key].clone();
    let text = String::from_utf8(original.0.clone()).unwrap();
    let edited = text.replace(
        &format!("user {} off", client.user),
        &format!("user {} on", client.user),
    );
    assert_ne!(edited, text, "{text}");
    secrets
        .patch(
            &acl_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {key: edited}})),
        )
        .await
        .unwrap();
    wait_for("ACL Secret restored", Duration::from_secs(10), async || {
        let now = secrets.get(&acl_name).await?.data.unwrap()[key].clone();
        Ok((now == original).then_some(()))
    })
    .await;
}

/// Clusters `locks` and `locks-1` in one namespace: `locks-1`'s headless Service used to be
/// slot 1's Service of `locks`. Now both serve, each Service selects its own cluster's pods,
/// and neither reports a conflict.
#[tokio::test]
async fn clusters_whose_names_overlap_keep_their_own_services() {
    let env = Env::start(3).await;
    for name in [NAME, "locks-1"] {
        env.create_cluster(
            name,
            json!({"instances": 2, "maxLockTTL": "2s", "holdMargin": "0s", "scheduling": {"spread": "none"}}),
        )
        .await;
    }
    for name in [NAME, "locks-1"] {
        let c = env.wait_ready(name, 2, Duration::from_secs(40)).await;
        let conflict = c
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "OwnershipConflict")
            .unwrap();
        assert_eq!(conflict.status, "False", "{name}: {conflict:?}");
    }
    let services: Api<Service> = Api::namespaced(env.cp.client(), &env.ns);
    let selector = |s: Service| s.spec.unwrap().selector.unwrap();
    let slot1 = selector(services.get("locks-1").await.unwrap());
    assert_eq!(slot1["app.kubernetes.io/instance"], "locks");
    assert_eq!(slot1["redlock.dev/slot"], "1");
    let headless = selector(services.get("locks-1-headless").await.unwrap());
    assert_eq!(headless["app.kubernetes.io/instance"], "locks-1");
}

/// A live pod that drops out of the operator's label-filtered view (a label removed "to
/// detach it for debugging") is still the slot's pod, decided by name: no loss, no hold, no
/// replacement attempt.
#[tokio::test]
async fn a_pod_dropped_from_the_operators_view_is_still_found_by_name() {
    let env = Env::start(3).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "2s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let before = env.member(NAME, 0).await.unwrap();
    env.kubectl(&[
        "label",
        "pod",
        &format!("{NAME}-0"),
        "app.kubernetes.io/managed-by-",
    ])
    .await;
    // A few probe periods: the member stays Ready with the same process.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let m = env.member(NAME, 0).await.unwrap();
        assert_eq!(
            (m.state, &m.run_id),
            (MemberState::Ready, &before.run_id),
            "{m:?}"
        );
    }
    assert!(!env.has_event("InstanceLost").await);
    assert!(!env.has_event("NameConflict").await);
}

/// The server list and quorum a client configured from the `<name>-client` Secret alone sees
/// now (one object: urls and quorum always agree), as the pod IPs of those slots.
async fn list_from_the_secret(env: &Env) -> (Vec<std::net::IpAddr>, usize) {
    // One read of the object, as a client reading its mounted Secret does.
    let secret = Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .get(&format!("{NAME}-client"))
        .await
        .unwrap();
    let data = secret.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    let urls = text("urls");
    let quorum: usize = text("quorum").parse().unwrap();
    let slots: Vec<i32> = urls
        .lines()
        .map(|u| {
            let host = u.rsplit('@').next().unwrap();
            let pod = host.split('.').next().unwrap();
            pod.rsplit('-').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(quorum, slots.len() / 2 + 1, "urls and quorum of one object agree");
    let mut ips = vec![];
    for slot in slots {
        if let Ok(pod) = env.pods().get(&format!("{NAME}-{slot}")).await
            && let Some(ip) = pod.status.and_then(|s| s.pod_ip).and_then(|ip| ip.parse().ok())
        {
            ips.push(ip);
        }
    }
    (ips, quorum)
}

/// Clients on the old and the new server list at once, through a scale-up (3 → 5) and a
/// scale-down (5 → 3). A first client holds a lock on a bare majority of the old list; a
/// second client, re-reading its list from the Secret every attempt, never gets a majority of
/// the list it reads before the first lock expires.
#[tokio::test]
async fn resizing_is_safe_with_clients_on_both_lists() {
    let env = Env::start(5).await;
    env.serving_with_ttl(NAME, 3, "6s").await;
    let ttl = Duration::from_secs(6);
    let login = env.client_login(NAME).await;

    // Scale-up: the longer list is published at once; the new members are held, then stay
    // fenced until the user confirms.
    env.patch_spec(NAME, json!({"instances": 5})).await;
    let s = wait_for(
        "new members held past their hold",
        Duration::from_secs(40),
        async || {
            let s = env.cluster(NAME).await.status.unwrap_or_default();
            let waiting = s.members.iter().filter(|m| m.slot >= 3).count() == 2
                && s.members.iter().filter(|m| m.slot >= 3).all(|m| {
                    m.state == MemberState::Held
                        && m.held_until.as_ref().is_some_and(|u| u.0 < Timestamp::now())
                });
            Ok(waiting.then_some(s))
        },
    )
    .await;
    assert_eq!((s.published_instances, s.confirmed_instances), (Some(5), Some(3)));
    let resizing = s.conditions.iter().find(|c| c.type_ == "Resizing").unwrap();
    assert_eq!(
        (resizing.status.as_str(), resizing.reason.as_str()),
        ("True", "AwaitingClientConfirmation")
    );
    assert_eq!(env.config_map(&format!("{NAME}-endpoints"), "quorum").await, "3");
    let expiry = env.first_lock(NAME, &[1, 2], ttl).await;
    while Instant::now() < expiry {
        let (ips, quorum) = list_from_the_secret(&env).await;
        assert_eq!(quorum, 3);
        let (granted, valid) =
            redlock_attempt(&ips, &login, "orders", "new-list", Duration::from_secs(2)).await;
        assert!(
            !valid || Instant::now() >= expiry,
            "new-list client got {granted} of 5 during the old lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A bare count (as left from an earlier resize, or written with the scale-up) does not
    // confirm; the token the condition names does.
    env.kubectl(&["annotate", "rlc", NAME, "redlock.dev/clients-use-instances=5"])
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = env.cluster(NAME).await.status.unwrap();
    assert_eq!(s.confirmed_instances, Some(3));
    let token = s.confirmation_token.expect("the token the user must confirm");
    let resizing = s.conditions.iter().find(|c| c.type_ == "Resizing").unwrap();
    assert!(resizing.message.contains(&token), "{}", resizing.message);
    env.kubectl(&[
        "annotate",
        "--overwrite",
        "rlc",
        NAME,
        &format!("redlock.dev/clients-use-instances={token}"),
    ])
    .await;
    env.wait_ready(NAME, 5, Duration::from_secs(20)).await;

    // Scale-down: the removed members are fenced and held; the shorter list is published only
    // after that hold, then their pods go.
    let expiry = env.first_lock(NAME, &[2, 3, 4], ttl).await;
    let patched = Instant::now();
    env.patch_spec(NAME, json!({"instances": 3})).await;
    let mut published_at = None;
    while Instant::now() < expiry + Duration::from_secs(1) {
        let (ips, quorum) = list_from_the_secret(&env).await;
        if quorum == 2 && published_at.is_none() {
            published_at = Some(Instant::now());
        }
        let (granted, valid) =
            redlock_attempt(&ips, &login, "orders", "other-list", Duration::from_secs(2)).await;
        assert!(
            !valid || Instant::now() >= expiry,
            "a client of the list of {} got {granted} during the old lock",
            ips.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let published_at = wait_for("shorter list published", Duration::from_secs(20), async || {
        let (_, quorum) = list_from_the_secret(&env).await;
        Ok(published_at.or((quorum == 2).then(Instant::now)))
    })
    .await;
    assert!(
        published_at.duration_since(patched) >= ttl,
        "published {:?} after the scale-down, before one hold",
        published_at.duration_since(patched)
    );
    wait_for("removed pods deleted", Duration::from_secs(20), async || {
        let gone = env.pods().get_opt(&format!("{NAME}-4")).await?.is_none()
            && env.pods().get_opt(&format!("{NAME}-3")).await?.is_none();
        Ok(gone.then_some(()))
    })
    .await;
    let s = env
        .wait_ready(NAME, 3, Duration::from_secs(20))
        .await
        .status
        .unwrap();
    assert_eq!((s.published_instances, s.confirmed_instances), (Some(3), Some(3)));
    assert_eq!(env.config_map(&format!("{NAME}-endpoints"), "quorum").await, "2");
}

/// Safety-review F6/F8: the status wiped (`kubectl edit --subresource=status`, a backup
/// restore) while a scale-up 3 -> 5 waits for its confirmation. The new members (unknown
/// processes) are held in full, and then still stay fenced: `<name>-endpoints` keeps the
/// resize's record (`confirmedInstances`). Without it, a client of the list of 3 holding {0, 1}
/// and a client of the list of 5 taking {2, 3, 4} would both hold the lock.
#[tokio::test]
async fn a_status_wiped_during_a_scale_up_keeps_the_new_members_fenced() {
    let env = Env::start(5).await;
    env.serving_with_ttl(NAME, 3, "4s").await;
    let ttl = Duration::from_secs(4);
    env.patch_spec(NAME, json!({"instances": 5})).await;
    wait_for(
        "scale-up waiting for its confirmation",
        Duration::from_secs(40),
        async || {
            let s = env.cluster(NAME).await.status.unwrap_or_default();
            Ok(s.confirmation_token.is_some().then_some(()))
        },
    )
    .await;
    let old_runs: Vec<_> = {
        let s = env.cluster(NAME).await.status.unwrap();
        s.members.iter().map(|m| m.run_id.clone()).collect()
    };

    env.clusters()
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "members": [],
                "publishedInstances": null,
                "confirmedInstances": null,
                "confirmationToken": null,
            }})),
        )
        .await
        .unwrap();
    let wiped = Timestamp::now();
    // The old members, still serving with their keys, are taken on record again; the new ones
    // (unknown processes) are held in full.
    for slot in 0..3 {
        let m = env
            .wait_member(
                NAME,
                slot,
                "old member on record again",
                Duration::from_secs(40),
                |m| m.state == MemberState::Ready && m.since.as_ref().is_some_and(|t| t.0 > wiped),
            )
            .await;
        assert!(old_runs.contains(&m.run_id), "{m:?}");
    }
    let mut hold_ends = vec![];
    for slot in 3..5 {
        let m = env
            .wait_member(NAME, slot, "new member held", Duration::from_secs(40), |m| {
                m.held_until.as_ref().is_some_and(|t| t.0 > wiped)
            })
            .await;
        hold_ends.push(m.held_until.unwrap().0);
    }
    // Past the new members' holds (when they would have been released), an old-list client
    // holds {0, 1}, and a new-list client never gets a majority of 5.
    let after = *hold_ends.iter().max().unwrap() + Duration::from_secs(1);
    while Timestamp::now() < after {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let expiry = env.first_lock(NAME, &[0, 1], ttl).await;
    let attempts = env.no_second_holder_until(NAME, 5, "orders", ttl, expiry).await;
    attempts.assert_cover(Duration::from_secs(1));
    let s = env.cluster(NAME).await.status.unwrap();
    assert_eq!(
        (s.published_instances, s.confirmed_instances),
        (Some(5), Some(3)),
        "{s:?}"
    );
    assert!(s.confirmation_token.is_some(), "a new token to confirm");
    for slot in 3..5 {
        let m = env.member(NAME, slot).await.unwrap();
        assert_ne!(m.state, MemberState::Ready, "{m:?}");
    }

    env.confirm_resize(NAME).await;
    env.wait_ready(NAME, 5, Duration::from_secs(30)).await;
}

/// Every version of the `<name>-client` Secret from now on, as (when it arrived, how many
/// `urls`, `quorum`): a watch sees each write, also one undone a moment later.
fn watch_client_secret(env: &Env) -> std::sync::Arc<std::sync::Mutex<Vec<(Timestamp, usize, String)>>> {
    use futures::StreamExt;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let api = Api::<Secret>::namespaced(env.cp.client(), &env.ns);
    let params = kube::api::WatchParams::default().fields(&format!("metadata.name={NAME}-client"));
    let record = seen.clone();
    tokio::spawn(async move {
        let mut stream = api.watch(&params, "0").await.unwrap().boxed();
        while let Some(event) = stream.next().await {
            let (kube::api::WatchEvent::Added(s) | kube::api::WatchEvent::Modified(s)) = event.unwrap()
            else {
                continue;
            };
            let data = s.data.unwrap_or_default();
            let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(&v.0).into_owned());
            let urls = text("urls")
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.is_empty())
                .count();
            record
                .lock()
                .unwrap()
                .push((Timestamp::now(), urls, text("quorum").unwrap_or_default()));
        }
    });
    seen
}

/// Safety-review 3, N2: `status.publishedInstances` goes missing during a scale-down's hold
/// (a status patched or restored without it, or a CRD schema that prunes it on every write:
/// removed again and again here). The children step runs before the reconcile plans, and used
/// to build `<name>-client` from `spec.instances` then: the list of 3 with quorum 2, while a
/// client of the list of 5 held the lock on {2, 3, 4}; a client reading that version locks
/// {0, 1}. Every version of the Secret during the hold lists 5 with quorum 3, the removed
/// members' Services stay, and the shorter list is published after the hold, as without the
/// wipe.
#[tokio::test]
async fn a_status_that_loses_its_published_count_during_a_scale_down_keeps_the_long_client_list() {
    let env = Env::start(5).await;
    env.serving_with_ttl(NAME, 5, "6s").await;
    let ttl = Duration::from_secs(6);
    let login = env.client_login(NAME).await;
    let services: Api<Service> = Api::namespaced(env.cp.client(), &env.ns);
    let mut uids = vec![];
    for slot in [3, 4] {
        uids.push(
            services
                .get(&format!("{NAME}-{slot}"))
                .await
                .unwrap()
                .metadata
                .uid,
        );
    }
    let seen = watch_client_secret(&env);
    let expiry = env.first_lock(NAME, &[2, 3, 4], ttl).await;
    env.patch_spec(NAME, json!({"instances": 3})).await;
    let mut hold_end = Timestamp::now();
    for slot in [3, 4] {
        let m = env
            .wait_member(NAME, slot, "removed member held", Duration::from_secs(20), |m| {
                m.state == MemberState::Held && m.held_until.is_some()
            })
            .await;
        hold_end = hold_end.max(m.held_until.unwrap().0);
    }
    let mut wipes = 0;
    let mut attempts = 0;
    while Instant::now() < expiry && Timestamp::now() + Duration::from_millis(500) < hold_end {
        env.clusters()
            .patch_status(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"publishedInstances": null}})),
            )
            .await
            .unwrap();
        wipes += 1;
        // A client configured from the Secret alone, as it reads it now.
        let (ips, quorum) = list_from_the_secret(&env).await;
        let (granted, valid) =
            redlock_attempt(&ips, &login, "orders", "other-list", Duration::from_secs(2)).await;
        attempts += 1;
        assert!(
            !valid || Instant::now() >= expiry,
            "a client of the list of {} (quorum {quorum}) got {granted} during the old lock",
            ips.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(wipes >= 5 && attempts >= 5, "{wipes} wipes, {attempts} attempts");
    for (slot, uid) in [3, 4].into_iter().zip(&uids) {
        let now = services.get_opt(&format!("{NAME}-{slot}")).await.unwrap();
        assert_eq!(
            now.and_then(|s| s.metadata.uid).as_ref(),
            uid.as_ref(),
            "the Service of removed slot {slot} stays through the hold"
        );
    }
    wait_for("shorter list published", Duration::from_secs(30), async || {
        Ok(seen
            .lock()
            .unwrap()
            .iter()
            .any(|(_, urls, _)| *urls == 3)
            .then_some(()))
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    for (at, urls, quorum) in &seen {
        assert!(
            *at >= hold_end || (*urls, quorum.as_str()) == (5, "3"),
            "<name>-client listed {urls} with quorum {quorum} at {at}, before the hold ended at {hold_end}: {seen:?}"
        );
    }
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
}

/// Issue 14, liveness: passwords are never regenerated by accident. The running processes know
/// each password only by the hash they started from, so a new one would lock the operator (or
/// every client) out. A deleted client Secret comes back with the same password. A deleted or
/// edited admin Secret is written back from the operator's memory (the garbage collector can
/// delete it after a re-created cluster adopted the ACL Secret). Deleted while no operator
/// runs, it is reported and nothing is replaced, while lock clients keep working and a crashed
/// member stays fenced; once the Secret is restored, that member is held and released.
#[tokio::test]
async fn lost_or_edited_passwords_are_never_replaced() {
    let mut env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "4s").await;
    let client = env.client_login(NAME).await;
    let secrets: Api<Secret> = Api::namespaced(env.cp.client(), &env.ns);
    let (admin_name, client_name, acl_name) = (
        format!("{NAME}-admin"),
        format!("{NAME}-client"),
        format!("{NAME}-acl"),
    );
    let acl = secrets.get(&acl_name).await.unwrap().data;

    // The client Secret deleted: re-created from the operator's copy, same password.
    secrets
        .delete(&client_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("client Secret re-created", Duration::from_secs(10), async || {
        Ok(secrets.get_opt(&client_name).await.unwrap())
    })
    .await;
    assert_eq!(env.client_login(NAME).await.password, client.password);

    // The admin Secret deleted while the operator runs: written back from its memory, which
    // the ACL files confirm, with the same passwords, and reported.
    let saved = secrets.get(&admin_name).await.unwrap();
    let admin_data = saved.data.clone();
    secrets
        .delete(&admin_name, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_event("CredentialsRestored").await;
    let back = wait_for("admin Secret written back", Duration::from_secs(10), async || {
        Ok(secrets
            .get_opt(&admin_name)
            .await?
            .filter(|s| s.metadata.uid != saved.metadata.uid))
    })
    .await;
    assert_eq!(back.data, admin_data, "the same passwords");
    assert_eq!(
        secrets.get(&acl_name).await.unwrap().data,
        acl,
        "ACL file unchanged"
    );

    // Deleted while no operator runs: the next one knows no passwords; reported, not replaced.
    let saved = back;
    env.operator.kill().unwrap();
    env.operator.wait_exit(Duration::from_secs(5)).await.unwrap();
    secrets
        .delete(&admin_name, &DeleteParams::default())
        .await
        .unwrap();
    env.operator = start_operator(&env.cp, "operator-2.log").await;
    env.wait_event("CredentialsMissing").await;
    // Clients lose nothing: a lock on every member with the password they have.
    for slot in 0..3 {
        let ip = env.pod_ip(NAME, slot).await;
        assert!(
            lock(ip, &client, "orders", "during", Duration::from_secs(1))
                .await
                .unwrap(),
            "slot {slot}"
        );
    }
    // A member crashes meanwhile: its new process starts fenced and stays so.
    let before = env.member(NAME, 0).await.unwrap();
    kill(&env, 0).await;
    let ip = env.pod_ip(NAME, 0).await;
    let mut refused = 0;
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(8) {
        match connect(ip, &client).await {
            Ok(_) => panic!("the crashed member's new process served without the operator"),
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused > 10, "{refused}");
    assert!(
        secrets.get_opt(&admin_name).await.unwrap().is_none(),
        "no new admin password"
    );
    assert_eq!(
        secrets.get(&acl_name).await.unwrap().data,
        acl,
        "ACL file unchanged"
    );

    // Restored from a backup: the operator goes on with the same passwords; the crashed member
    // is held in full from when it is seen, then released.
    let mut restored = saved.clone();
    restored.metadata.resource_version = None;
    restored.metadata.uid = None;
    restored.metadata.creation_timestamp = None;
    restored.metadata.managed_fields = None;
    secrets.create(&PostParams::default(), &restored).await.unwrap();
    let m = env
        .wait_member(NAME, 0, "crashed member released", Duration::from_secs(30), |m| {
            m.state == MemberState::Ready && m.run_id.is_some() && m.run_id != before.run_id
        })
        .await;
    assert!(m.run_id.is_some());
    // The status is written before the release is sent (write-ahead): serving follows.
    wait_for("serves after its hold", Duration::from_secs(5), async || {
        Ok(connect(ip, &client).await.ok().map(|_| ()))
    })
    .await;
    assert_eq!(
        secrets.get(&acl_name).await.unwrap().data,
        acl,
        "ACL file unchanged"
    );

    // An edit of the admin password (a rotation by hand): put back from the operator's
    // memory, and not written into the ACL file.
    secrets
        .patch(
            &admin_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "rotated-by-hand"}})),
        )
        .await
        .unwrap();
    wait_for("admin password put back", Duration::from_secs(10), async || {
        let s = secrets.get(&admin_name).await?;
        Ok((s.data == admin_data).then_some(()))
    })
    .await;
    assert_eq!(
        secrets.get(&acl_name).await.unwrap().data,
        acl,
        "ACL file unchanged"
    );
}

/// The client user the pod of `slot` was built with (`REDIS_CLIENT_USER`), if the pod exists.
async fn pod_client_user(env: &Env, slot: i32) -> Option<String> {
    let pod = env.pods().get_opt(&format!("{NAME}-{slot}")).await.unwrap()?;
    pod.spec?
        .containers
        .into_iter()
        .flat_map(|c| c.env.unwrap_or_default())
        .find(|e| e.name == "REDIS_CLIENT_USER")?
        .value
}

/// Issue 14, liveness: auth turned off and on again while lock clients run. The containers of
/// pods the rollout has not replaced yet are killed after the ACL Secret was rewritten for the
/// new mode; each restarts with the ACL file and client user of its own pod's mode, is held and
/// released as before, and the rollout completes. Before that, a rejected edit that turns auth
/// off changes nothing about how the processes are addressed: a member killed meanwhile is
/// released to the client user it has.
#[tokio::test]
async fn auth_toggles_roll_out_while_old_processes_restart() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "8s").await;
    let login = env.client_login(NAME).await;
    assert_eq!(login.user, "redlock-client");

    env.patch_spec(
        NAME,
        json!({"auth": {"enabled": false},
               "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
    )
    .await;
    env.wait_event("SpecRejected").await;
    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    let ip = env.pod_ip(NAME, 1).await;
    wait_for(
        "released to its own client user",
        Duration::from_secs(20),
        async || Ok(connect(ip, &login).await.ok().map(|_| ())),
    )
    .await;
    env.patch_spec(NAME, json!({"auth": {"enabled": true}, "resources": null}))
        .await;

    let acl_secret = format!("{NAME}-acl");
    for (enabled, user) in [(false, "default"), (true, "redlock-client")] {
        env.patch_spec(NAME, json!({"auth": {"enabled": enabled}})).await;
        let started = Instant::now();
        // The ACL file redis.conf names now serves the new mode...
        let mode_file = if enabled {
            "user redlock-client off"
        } else {
            "user default off nopass ~*"
        };
        wait_for("ACL Secret rewritten", Duration::from_secs(10), async || {
            let s = env.secret(&acl_secret, "users.acl").await;
            Ok(s.contains(mode_file).then_some(()))
        })
        .await;
        // ... and the pods' volumes show it (the test kubelet refreshes them every 10 s).
        tokio::time::sleep(Duration::from_secs(11)).await;
        let mut restarted = 0;
        for slot in 0..3 {
            if pod_client_user(&env, slot).await.is_some_and(|u| u != user) {
                let pod = format!("{NAME}-{slot}");
                if env
                    .cp
                    .nodes()
                    .signal_pod(&env.ns, &pod, Signal::SIGKILL)
                    .await
                    .is_ok()
                {
                    restarted += 1;
                }
            }
        }
        assert!(
            restarted > 0,
            "the rollout replaced every pod before the files changed"
        );
        wait_for(
            &format!("rollout to auth {enabled} complete"),
            Duration::from_secs(120),
            async || {
                for slot in 0..3 {
                    if pod_client_user(&env, slot).await.as_deref() != Some(user) {
                        return Ok(None);
                    }
                }
                let c = env.cluster(NAME).await;
                let serving = c
                    .status
                    .map(|s| s.members.iter().filter(|m| m.state == MemberState::Ready).count())
                    .unwrap_or(0);
                Ok((serving == 3).then_some(()))
            },
        )
        .await;
        println!(
            "auth {enabled}: rollout with {restarted} old process(es) restarted took {:?}",
            started.elapsed()
        );
        let login = env.client_login(NAME).await;
        assert_eq!(login.user, user);
        for slot in 0..3 {
            let ip = env.pod_ip(NAME, slot).await;
            wait_for(
                "a client of the new mode locks",
                Duration::from_secs(10),
                async || {
                    Ok(lock(ip, &login, "orders", "new-mode", Duration::from_secs(1))
                        .await
                        .ok()
                        .filter(|ok| *ok))
                },
            )
            .await;
        }
    }
}

/// Issue 14, liveness: a pod create the API server refuses (a ResourceQuota, an admission
/// webhook) is reported and retried with its own backoff, while holds, probes and releases go
/// on at their pace. Failing the whole reconcile instead pushed its next run back by the error
/// backoff (1, 2, 4, … s): a member killed meanwhile was released that much late.
#[tokio::test]
async fn a_refused_pod_create_does_not_delay_releases() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let env = Env::start(4).await;
    env.serving_with_ttl(NAME, 3, "4s").await;
    // Room for the three pods there are, and no more.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "three-pods"}, "spec": {"hard": {"pods": "3"}}
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(env.cp.client(), &env.ns)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    env.patch_spec(NAME, json!({"instances": 4})).await;
    env.wait_event("PodChangeFailed").await;
    // Long enough for an error backoff to have grown past 16 s.
    tokio::time::sleep(Duration::from_secs(16)).await;

    let before = env.member(NAME, 0).await.unwrap();
    kill(&env, 0).await;
    let (_, until) = wait_held(&env, NAME, 0, before.run_id.as_deref().unwrap()).await;
    let m = env
        .wait_member(NAME, 0, "released", Duration::from_secs(30), |m| {
            m.state == MemberState::Ready && m.run_id != before.run_id
        })
        .await;
    let released = Timestamp::now();
    let late = released.duration_since(until).as_secs_f64();
    println!("released {late:.2} s after heldUntil while the pod create was refused");
    assert!(
        late < 5.0,
        "released {late:.2} s after its hold ended: the refused create delayed it ({m:?})"
    );
    assert!(env.pods().get_opt(&format!("{NAME}-3")).await.unwrap().is_none());
}

/// Issue 14 (audit finding F): the endpoints ConfigMap that tells clients which members serve
/// is refused by the API server (here a ValidatingAdmissionPolicy; in the field a webhook or a
/// policy engine). The refusal is reported (Warning event `EndpointsNotPublished`) and the
/// write retried, while the hold and release of a killed member go on; once the refusal ends,
/// the ConfigMap catches up without any other change.
#[tokio::test]
async fn a_refused_endpoints_config_map_is_reported_and_written_again() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = Env::start(3).await;
    // Holds of ~8.6 s: long enough to see the ConfigMap catch up while member 2 is held.
    env.serving_with_ttl(NAME, 3, "8s").await;
    let cm_name = format!("{NAME}-endpoints");
    let policy = refuse(&env, "freeze", "UPDATE", "configmaps", &cm_name).await;
    let cms = Api::<ConfigMap>::namespaced(env.cp.client(), &env.ns);
    wait_until_updates_refused(&cms, &cm_name).await;

    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    env.wait_event("EndpointsNotPublished").await;
    let ready = |cm: &ConfigMap| cm.data.as_ref().unwrap()["ready"].lines().count();
    assert_eq!(
        ready(&cms.get(&cm_name).await.unwrap()),
        3,
        "the refused write changed nothing"
    );
    // Hold and release go on regardless.
    env.wait_member(NAME, 1, "released", Duration::from_secs(30), |m| {
        m.state == MemberState::Ready && m.run_id != before.run_id
    })
    .await;

    // Still refused: the ConfigMap says 3 ready, which is true again. Kill another member so
    // the ConfigMap must change once the refusal ends.
    let before = env.member(NAME, 2).await.unwrap();
    kill(&env, 2).await;
    wait_held(&env, NAME, 2, before.run_id.as_deref().unwrap()).await;
    policy.lift().await;
    wait_for(
        "the ConfigMap lists 2 ready members",
        Duration::from_secs(20),
        async || {
            let cm = cms.get(&cm_name).await?;
            Ok((ready(&cm) == 2).then_some(()))
        },
    )
    .await;
}

/// The ledger (`<name>-ledger`, docs/design.md §9.5) must name a process before it is let in
/// to lock clients. With its updates refused (an admission policy), a member killed and
/// restarted stays held past its hold, says why (its message, Warning `LedgerNotWritten`), and
/// a lock client cannot log in to it; once the refusal ends it is released.
#[tokio::test]
async fn a_process_the_ledger_cannot_name_is_not_released() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "3s").await;
    let cm_name = format!("{NAME}-ledger");
    let policy = refuse(&env, "ledger", "UPDATE", "configmaps", &cm_name).await;
    let cms = Api::<ConfigMap>::namespaced(env.cp.client(), &env.ns);
    wait_until_updates_refused(&cms, &cm_name).await;
    let login = env.client_login(NAME).await;
    let before = env.member(NAME, 1).await.unwrap();
    kill(&env, 1).await;
    let (_, until) = wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    env.wait_event("LedgerNotWritten").await;
    let ip = env.pod_ip(NAME, 1).await;
    // Well past its hold's end (a 3 s hold): still held, saying why, and no client gets in.
    let past = until + k8s_openapi::jiff::SignedDuration::from_secs(4);
    tokio::time::sleep(Duration::try_from(past.duration_since(Timestamp::now())).unwrap_or_default()).await;
    let held = env.member(NAME, 1).await.unwrap();
    assert!(
        connect(ip, &login).await.is_err(),
        "released without the ledger naming it: {held:?}"
    );
    assert!(
        held.state.is_holding()
            && held
                .message
                .as_deref()
                .is_some_and(|t| t.contains("ledger (<name>-ledger) does not name this process")),
        "{held:?}"
    );
    policy.lift().await;
    env.wait_member(
        NAME,
        1,
        "released once the ledger names it",
        Duration::from_secs(30),
        |m| m.state == MemberState::Ready && m.run_id == held.run_id,
    )
    .await;
    wait_for("lock clients let in", Duration::from_secs(10), async || {
        Ok(connect(ip, &login).await.ok())
    })
    .await;
}

/// Waits until an update of the ConfigMap `name` is refused: a policy takes effect within a
/// second or two.
async fn wait_until_updates_refused(cms: &Api<k8s_openapi::api::core::v1::ConfigMap>, name: &str) {
    wait_for(
        "the policy refuses updates",
        Duration::from_secs(20),
        async || {
            let probe = cms
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {"probe": Timestamp::now().to_string()}}}),
                    ),
                )
                .await;
            Ok(probe.is_err().then_some(()))
        },
    )
    .await;
}

/// A ValidatingAdmissionPolicy (with its binding) that refuses one `operation` on the object
/// named `object` among `resources` (core group) in the test's namespace: in the field a
/// webhook or a policy engine.
async fn refuse(env: &Env, what: &str, operation: &str, resources: &str, object: &str) -> Refusal {
    let refused = Refused {
        api_group: "",
        operations: &[operation],
        resources,
        expression: format!("object.metadata.name != '{object}'"),
        message: "refused by the test",
    };
    admission::refuse(env.cp.client(), &env.ns, &format!("{what}-{}", env.ns), refused).await
}

/// Issue 14, liveness: a pod create refused for good (here an admission policy refuses
/// `locks-1`) does not hold up the deletes of a scale-down. Creates and deletes shared one
/// retry gate, creates first, and stopped at the first refusal: the removed member's pod was
/// never deleted, and the scale-down never finished.
#[tokio::test]
async fn a_refused_pod_create_does_not_block_a_scale_downs_deletes() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "3s").await;
    let policy = refuse(&env, "no-slot-1", "CREATE", "pods", &format!("{NAME}-1")).await;
    // The policy takes effect within a second or two: wait until a dry-run create of that
    // name is refused by it (admission comes before the name's existence is checked).
    let stand_in: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{NAME}-1")},
        "spec": {"containers": [{"name": "c", "image": "redis:7"}]},
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the policy refuses the pod",
        Duration::from_secs(20),
        async || {
            let refused = match env.pods().create(&dry_run, &stand_in).await {
                Err(e) => e.to_string().contains("refused by the test"),
                Ok(_) => false,
            };
            Ok(refused.then_some(()))
        },
    )
    .await;
    env.pods()
        .delete(&format!("{NAME}-1"), &DeleteParams::default())
        .await
        .unwrap();
    env.wait_event("PodChangeFailed").await;
    // Refused again and again: the create backoff has grown to several seconds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(env.pods().get_opt(&format!("{NAME}-1")).await.unwrap().is_none());

    env.patch_spec(NAME, json!({"instances": 2})).await;
    let removed = format!("{NAME}-2");
    wait_for(
        "the removed member's pod deleted while slot 1's create is refused",
        Duration::from_secs(60),
        async || Ok(env.pods().get_opt(&removed).await?.is_none().then_some(())),
    )
    .await;
    let c = env.cluster(NAME).await;
    assert_eq!(c.status.unwrap().published_instances, Some(2));

    // Once the refusal ends, slot 1 comes back.
    policy.lift().await;
    env.wait_ready(NAME, 2, Duration::from_secs(60)).await;
}

/// Issue 14, liveness: pod creates refused long enough for their retry backoff to have grown
/// (1, 2, 4, 8, 16 s …), then the cluster is deleted and re-created under the same name. The
/// new object starts from no backoff: its predecessor's, kept by namespace and name, is
/// forgotten with it (it would delay the new cluster's first pods by up to 5 min).
#[tokio::test]
async fn a_recreated_cluster_does_not_wait_out_its_predecessors_pod_backoff() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let env = Env::start(3).await;
    let quotas = Api::<ResourceQuota>::namespaced(env.cp.client(), &env.ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": "3s"}))
        .await;
    env.wait_event("PodChangeFailed").await;
    // Refused at 0, 1, 3, 7, 15 and 31 s: the next try would be 32 s later.
    tokio::time::sleep(Duration::from_secs(33)).await;
    env.clusters()
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the cluster is gone", Duration::from_secs(30), async || {
        Ok(env.clusters().get_opt(NAME).await?.is_none().then_some(()))
    })
    .await;
    quotas.delete("no-pods", &DeleteParams::default()).await.unwrap();
    // The quota's removal reaches the admission cache within a second or so.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let created = Instant::now();
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": "3s"}))
        .await;
    wait_for(
        "the re-created cluster's pods",
        Duration::from_secs(15),
        async || Ok(env.pods().get_opt(&format!("{NAME}-0")).await?.map(|_| ())),
    )
    .await;
    println!("first pod {:?} after the re-create", created.elapsed());
}

/// Safety review F12: a Service edited by hand (a user, a GitOps tool) is put back, like the
/// PDB and the NetworkPolicy. Slot 1's selector pointed at slot 0's pod would send slot 1's
/// clients to slot 0's process: a client's "majority" of 2 of 3 could be one process twice.
/// Each edit keeps the applied-hash annotation (a `kubectl patch` does not touch it), so only
/// a comparison by content finds it.
#[tokio::test]
async fn hand_edited_services_pdb_and_network_policy_are_put_back() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use redlock_testenv::resolver::Resolver;

    let env = Env::start(3).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "2s", "holdMargin": "0s", "networkPolicy": {"enabled": true}}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let services: Api<Service> = Api::namespaced(env.cp.client(), &env.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.cp.client(), &env.ns);
    let policies: Api<NetworkPolicy> = Api::namespaced(env.cp.client(), &env.ns);
    let resolver = Resolver::for_control_plane(&env.cp);
    let slot1_address = format!("{NAME}-1.{}.svc:6379", env.ns);
    let (ip0, ip1) = (env.pod_ip(NAME, 0).await, env.pod_ip(NAME, 1).await);
    // On real nodes the EndpointSlice follows readiness a moment after status does.
    resolves_to(&resolver, &slot1_address, &[ip1]).await;
    assert!(!env.has_event("ChildRestored").await, "nothing was edited yet");

    env.kubectl(&[
        "patch",
        "svc",
        &format!("{NAME}-1"),
        "-p",
        r#"{"spec":{"selector":{"redlock.dev/slot":"0"}}}"#,
    ])
    .await;
    wait_for(
        "slot 1's Service selecting slot 1 again",
        Duration::from_secs(15),
        async || {
            let s = services.get(&format!("{NAME}-1")).await?;
            let selector = s.spec.unwrap().selector.unwrap();
            Ok((selector["redlock.dev/slot"] == "1").then_some(()))
        },
    )
    .await;
    env.wait_event("ChildRestored").await;
    // Slot 1's address leads to slot 1's process again, not slot 0's. The selector above is
    // the evidence that the Service was put back; this checks the endpoints agree with it (a
    // slice the controller had not rewritten yet for the edit would agree too).
    let resolved = resolves_to(&resolver, &slot1_address, &[ip1]).await;
    let login = env.client_login(NAME).await;
    assert!(
        lock(
            resolved[0].ip(),
            &login,
            "f12",
            "through-slot-1",
            Duration::from_secs(10)
        )
        .await
        .unwrap()
    );
    let holder = |ip| {
        let login = login.clone();
        async move {
            let mut c = connect(ip, &login).await.unwrap();
            redis::cmd("GET")
                .arg("f12")
                .query_async::<Option<String>>(&mut c)
                .await
                .unwrap()
        }
    };
    assert_eq!(holder(ip1).await.as_deref(), Some("through-slot-1"));
    assert_eq!(holder(ip0).await, None, "slot 0's process got slot 1's lock");

    // Its slot label edited to a slot beyond N: put back, not taken for a retired slot's
    // Service and deleted (a new ClusterIP for slot 1's address).
    let uid = services.get(&format!("{NAME}-1")).await.unwrap().metadata.uid;
    env.kubectl(&[
        "label",
        "--overwrite",
        "svc",
        &format!("{NAME}-1"),
        "redlock.dev/slot=7",
    ])
    .await;
    wait_for(
        "slot 1's Service labelled slot 1 again",
        Duration::from_secs(15),
        async || {
            let s = services.get(&format!("{NAME}-1")).await?;
            Ok((s.metadata.labels.unwrap()["redlock.dev/slot"] == "1").then_some(s.metadata.uid))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        services.get(&format!("{NAME}-1")).await.unwrap().metadata.uid,
        uid,
        "slot 1's Service was deleted and made again"
    );

    // The PDB (a drain could otherwise take every member at once) and the NetworkPolicy (any
    // pod in any namespace could reach the lock servers).
    env.kubectl(&["patch", "pdb", NAME, "-p", r#"{"spec":{"minAvailable":0}}"#])
        .await;
    env.kubectl(&[
        "patch",
        "networkpolicy",
        NAME,
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/ingress/0/from/1/namespaceSelector","value":{}}]"#,
    ])
    .await;
    wait_for(
        "the PDB and the NetworkPolicy put back",
        Duration::from_secs(15),
        async || {
            let pdb = pdbs.get(NAME).await?.spec.unwrap();
            let np = policies.get(NAME).await?.spec.unwrap();
            let client_peer = &np.ingress.unwrap()[0].from.clone().unwrap()[1];
            Ok(
                (pdb.min_available == Some(IntOrString::Int(2)) && client_peer.namespace_selector.is_none())
                    .then_some(()),
            )
        },
    )
    .await;

    // A PDB switched to maxUnavailable: an apply cannot take that field away (it is
    // kubectl's), so it is replaced whole.
    env.kubectl(&[
        "patch",
        "pdb",
        NAME,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/minAvailable"},{"op":"add","path":"/spec/maxUnavailable","value":3}]"#,
    ])
    .await;
    wait_for("the PDB put back whole", Duration::from_secs(15), async || {
        let pdb = pdbs.get(NAME).await?.spec.unwrap();
        Ok((pdb.min_available == Some(IntOrString::Int(2)) && pdb.max_unavailable.is_none()).then_some(()))
    })
    .await;

    // Put back means settled: no object is written again, by the operator or anyone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let versions = async || {
        let mut v: Vec<String> = services
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|s| s.metadata.resource_version.unwrap())
            .collect();
        v.push(pdbs.get(NAME).await.unwrap().metadata.resource_version.unwrap());
        v.push(
            policies
                .get(NAME)
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap(),
        );
        v
    };
    let before = versions().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        versions().await,
        before,
        "children written again after they were put back"
    );
}
