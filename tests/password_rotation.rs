//! Issue 14: rotating the client password while lock clients run, on the real control plane
//! with real redis-server processes (docs/design.md §8.10). A client that re-reads
//! `<name>-client` before each lock never fails to log in: both passwords work from before the
//! new one is published until the user confirms; a member restarted mid-rotation accepts both
//! too; after the confirmation only the new one does; and the request left in place does not
//! rotate again.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_operator::credentials::client_rotation::{CONDITION, CONFIRM_ANNOTATION, ROTATE_ANNOTATION};
use redlock_test_support::*;

const NAME: &str = "locks";

/// The longest a background client may go without finishing a round: a round is a read of the
/// client Secret and three locks and unlocks, each on a fresh connection that gives up after
/// 300 ms to connect and 300 ms for an answer (a member that does not answer costs at most
/// 1.2 s), so a longer gap means it stalled, and the moments it was meant to cover went
/// untested.
const STEADY: Duration = Duration::from_secs(3);

/// A lock client that, every 50 ms, reads the password from `<name>-client` (as a client that
/// re-reads its mounted Secret) and locks and unlocks a key on every member. Records its rounds
/// and the members that refused or failed it.
struct Client {
    stop: Arc<AtomicBool>,
    rounds: Rounds,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Client {
    fn start(env: &Env, ips: Vec<IpAddr>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Rounds::new();
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let secrets = Api::<Secret>::namespaced(env.cp.client(), &env.ns);
        let task = tokio::spawn({
            let (stop, rounds, failures) = (stop.clone(), rounds.clone(), failures.clone());
            async move {
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let s = secrets.get(&format!("{NAME}-client")).await.unwrap();
                    let data = s.data.unwrap();
                    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
                    let login = Login {
                        user: text("username"),
                        password: text("password"),
                    };
                    for ip in &ips {
                        let r = lock(*ip, &login, "rotation", "holder", Duration::from_millis(500)).await;
                        match r {
                            Ok(true) => unlock(*ip, &login).await,
                            Ok(false) => failures.lock().unwrap().push(format!("{ip}: key taken")),
                            Err(e) => failures.lock().unwrap().push(format!("{ip}: {e}")),
                        }
                    }
                    rounds.record(began);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        Self {
            stop,
            rounds,
            failures,
            task,
        }
    }

    /// Stops it; returns its rounds and failures.
    async fn finish(self) -> (Rounds, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        (self.rounds, failures)
    }
}

/// Best effort, as a lock client's unlock is: a member killed since it granted the lock (the
/// tests kill members mid-rotation) lost the key with its process, and its restarted process
/// refuses connections until it is released.
async fn unlock(ip: IpAddr, login: &Login) {
    if let Ok(mut c) = connect(ip, login).await {
        let _: redis::RedisResult<i64> = redis::cmd("DEL").arg("rotation").query_async(&mut c).await;
    }
}

/// Whether `password` logs the client user in at `ip` (a fresh connection; the member must
/// serve, i.e. be released).
async fn accepts(ip: IpAddr, password: &str) -> bool {
    let login = Login {
        user: "redlock-client".into(),
        password: password.into(),
    };
    match connect(ip, &login).await {
        Ok(mut c) => redis::cmd("PING").query_async::<String>(&mut c).await.is_ok(),
        Err(_) => false,
    }
}

async fn annotate(env: &Env, key: &str, value: &str) {
    env.kubectl(&["annotate", "--overwrite", "rlc", NAME, &format!("{key}={value}")])
        .await;
}

async fn wait_rotation(env: &Env, reason: &str) {
    wait_for(
        &format!("condition {CONDITION} reason {reason}"),
        Duration::from_secs(60),
        async || {
            let c = env.cluster(NAME).await;
            let found = c
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .any(|c| c.type_ == CONDITION && c.reason == reason);
            Ok(found.then_some(()))
        },
    )
    .await;
}

#[tokio::test]
async fn the_client_password_is_rotated_while_clients_lock_without_a_failed_login() {
    // Clients get 4 s (instead of 2 min) between the publication and the earliest removal.
    let env = Env::start_with(3, &["--password-rotation-grace-ms=4000"]).await;
    env.serving_with_ttl(NAME, 3, "3s").await;
    let old = env.client_login(NAME).await.password;
    let mut ips = Vec::new();
    for slot in 0..3 {
        ips.push(env.pod_ip(NAME, slot).await);
    }

    // Requested while a client locks: added everywhere, then published.
    let client = Client::start(&env, ips.clone());
    annotate(&env, ROTATE_ANNOTATION, "t1").await;
    wait_rotation(&env, "AwaitingClientConfirmation").await;
    env.wait_event("ClientPasswordRotationStarted").await;
    env.wait_event("ClientPasswordPublished").await;
    let new = env.client_login(NAME).await.password;
    let published = Instant::now();
    assert_ne!(new, old, "the client Secret holds the new password");
    // Give the client some rounds with the new password.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rounds, failures) = client.finish().await;
    rounds.assert_steady(STEADY, published, 1);
    assert!(failures.is_empty(), "failed logins or locks: {failures:?}");
    for ip in &ips {
        assert!(
            accepts(*ip, &old).await && accepts(*ip, &new).await,
            "{ip}: both passwords"
        );
    }

    // A member restarted mid-rotation: held, released, and it accepts both as well.
    let before = env.member(NAME, 1).await.unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-1"), Signal::SIGKILL)
        .await
        .unwrap();
    env.wait_member(NAME, 1, "restarted and released", Duration::from_secs(30), |m| {
        m.state == MemberState::Ready && m.run_id.is_some() && m.run_id != before.run_id
    })
    .await;
    let ip1 = env.pod_ip(NAME, 1).await;
    wait_for(
        "the restarted member accepts both",
        Duration::from_secs(10),
        async || Ok((accepts(ip1, &old).await && accepts(ip1, &new).await).then_some(())),
    )
    .await;

    // Confirmed while a client locks with the new password: the old one is removed.
    let client = Client::start(&env, ips.clone());
    annotate(&env, CONFIRM_ANNOTATION, "t1").await;
    wait_rotation(&env, "Rotated").await;
    env.wait_event("ClientPasswordRotated").await;
    let removed = Instant::now();
    // Some rounds after the old password is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rounds, failures) = client.finish().await;
    rounds.assert_steady(STEADY, removed, 1);
    assert!(failures.is_empty(), "failed logins or locks: {failures:?}");
    for ip in &ips {
        assert!(!accepts(*ip, &old).await, "{ip}: the old password is refused");
        assert!(accepts(*ip, &new).await, "{ip}: the new password works");
    }
    // What is kept: the new password only, and the token.
    let admin = Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .get(&format!("{NAME}-admin"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(admin["clientPassword"].0, new.as_bytes());
    assert_eq!(admin["rotatedToken"].0, b"t1");
    assert!(!admin.contains_key("clientPasswordNext") && !admin.contains_key("clientPasswordPrevious"));
    let acl = env.secret(&format!("{NAME}-acl"), "users-auth.acl").await;
    let client_line = acl
        .lines()
        .find(|l| l.starts_with("user redlock-client "))
        .unwrap();
    // The new password's hash and the startup probe's, not the old one's.
    use redlock_operator::children::secrets::password_hash;
    assert_eq!(client_line.matches(" #").count(), 2, "{client_line}");
    assert!(client_line.contains(&password_hash(&new)), "{client_line}");
    assert!(!client_line.contains(&password_hash(&old)), "{client_line}");

    // Every pod stays Ready: its gate stays open, and the startup probe, should a container
    // restart, logs in with its own password, which no rotation removes. The request stays on the object:
    // nothing rotates again.
    tokio::time::sleep(Duration::from_secs(7)).await;
    for slot in 0..3 {
        let pod = env.pods().get(&format!("{NAME}-{slot}")).await.unwrap();
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "{NAME}-{slot} is Ready after the rotation");
    }
    let c = env.cluster(NAME).await;
    assert_eq!(c.status.unwrap().ready_instances, Some(3));
    assert_eq!(env.client_login(NAME).await.password, new);
}

/// With auth off lock clients have no password: a request is reported, and nothing changes.
#[tokio::test]
async fn a_rotation_asked_for_without_auth_is_refused_with_a_reason() {
    let env = Env::start(3).await;
    env.create_cluster(
        NAME,
        serde_json::json!({"instances": 3, "maxLockTTL": "2s", "auth": {"enabled": false}}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    annotate(&env, ROTATE_ANNOTATION, "t1").await;
    wait_rotation(&env, "AuthDisabled").await;
    assert!(!env.has_event("ClientPasswordRotationStarted").await);
}

/// A rotation step is written over the `<name>-admin` it was decided from, or not at all
/// (`apply::apply_if_changed_at`, against the real API server): a writer that read the Secret
/// before someone else wrote it (a replica that lost its lease and has not noticed yet, acting
/// on the step before the one now recorded) is refused, and the newer content stays.
#[tokio::test]
async fn a_step_decided_from_an_older_read_is_refused() {
    use k8s_openapi::ByteString;
    use kube::api::PostParams;
    use redlock_operator::children::names::{LABEL_INSTANCE, LABEL_MANAGED_BY};
    use redlock_operator::reconcile::apply::apply_if_changed_at;
    let env = Env::start(1).await;
    let api: Api<Secret> = Api::namespaced(env.cp.client(), &env.ns);
    let (cache, _writer) = kube::runtime::reflector::store::<Secret>();
    let secret = |phase: &str| -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "locks-admin", "labels": {
                LABEL_INSTANCE: "locks", LABEL_MANAGED_BY: "redlock-operator"}},
            "stringData": {"phase": phase},
        }))
        .unwrap()
    };
    let phase = async || {
        let s = api.get("locks-admin").await.unwrap();
        s.data.unwrap()["phase"].clone()
    };
    let read = api
        .create(&PostParams::default(), &secret("adding"))
        .await
        .unwrap();
    let read_at = read.metadata.resource_version.unwrap();
    // Another writer records the next step.
    let mut newer = api.get("locks-admin").await.unwrap();
    newer.data = Some([("phase".to_owned(), ByteString(b"published".to_vec()))].into());
    let newer = api
        .replace("locks-admin", &PostParams::default(), &newer)
        .await
        .unwrap();

    // The stale writer's step, decided from the first read: refused, nothing changes.
    let stale = apply_if_changed_at(&api, &cache, secret("adding-again"), Some(&read_at)).await;
    assert!(
        matches!(&stale, Err(redlock_operator::error::Error::Kube(kube::Error::Api(s))) if s.code == 409),
        "{stale:?}"
    );
    assert_eq!(phase().await, ByteString(b"published".to_vec()));
    // Decided from the current version: written.
    let current = newer.metadata.resource_version.unwrap();
    assert!(
        apply_if_changed_at(&api, &cache, secret("revoking"), Some(&current))
            .await
            .unwrap()
            == redlock_operator::reconcile::apply::Applied::Written
    );
    assert_eq!(phase().await, ByteString(b"revoking".to_vec()));
}

/// A Redlock client that, every 50 ms, tries to lock a key on every member (a fresh
/// connection each, as after a reconnect) and counts rounds in which it got no majority.
struct MajorityClient {
    stop: Arc<AtomicBool>,
    rounds: Rounds,
    outages: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MajorityClient {
    fn start(login: Login, ips: Vec<IpAddr>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Rounds::new();
        let outages = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (stop, rounds, outages) = (stop.clone(), rounds.clone(), outages.clone());
            async move {
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let mut got = Vec::new();
                    let mut errors = Vec::new();
                    for ip in &ips {
                        match lock(*ip, &login, "rotation", "holder", Duration::from_millis(500)).await {
                            Ok(true) => got.push(*ip),
                            Ok(false) => errors.push(format!("{ip}: key taken")),
                            Err(e) => errors.push(format!("{ip}: {e}")),
                        }
                    }
                    for ip in &got {
                        unlock(*ip, &login).await;
                    }
                    if got.len() < ips.len() / 2 + 1 {
                        outages.lock().unwrap().push(errors.join("; "));
                    }
                    rounds.record(began);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        Self {
            stop,
            rounds,
            outages,
            task,
        }
    }

    async fn finish(self) -> (Rounds, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let outages = self.outages.lock().unwrap().clone();
        (self.rounds, outages)
    }
}

/// Whether `login` logs in at `ip` (a fresh connection).
async fn logs_in(ip: IpAddr, login: &Login) -> bool {
    match connect(ip, login).await {
        Ok(mut c) => redis::cmd("PING").query_async::<String>(&mut c).await.is_ok(),
        Err(_) => false,
    }
}

async fn wait_admin_rotation(env: &Env, reason: &str) {
    use redlock_operator::credentials::admin_rotation::CONDITION as ADMIN_CONDITION;
    wait_for(
        &format!("condition {ADMIN_CONDITION} reason {reason}"),
        Duration::from_secs(60),
        async || {
            let c = env.cluster(NAME).await;
            let found = c
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .any(|c| c.type_ == ADMIN_CONDITION && c.reason == reason);
            Ok(found.then_some(()))
        },
    )
    .await;
}

/// The admin password (the operator's own) is rotated on request while a Redlock client keeps
/// getting majorities: the new one is on record and added everywhere before the operator uses
/// it, a member killed after the switch comes back and is probed and released with the new
/// one, the old one is refused everywhere at the end, the startup probes keep their password
/// (pods stay Ready), and the request left in place does not rotate again.
#[tokio::test]
async fn the_admin_password_is_rotated_without_a_lock_outage() {
    use redlock_operator::children::secrets::password_hash;
    use redlock_operator::credentials::admin_rotation::ROTATE_ADMIN_ANNOTATION;
    // 4 s (instead of 2 min) between the switch and the end of the old password's fallback.
    let env = Env::start_with(3, &["--password-rotation-grace-ms=4000"]).await;
    env.serving_with_ttl(NAME, 3, "3s").await;
    let old = env.admin_login(NAME).await;
    let probe_password = env.secret(&format!("{NAME}-admin"), "probePassword").await;
    let mut ips = Vec::new();
    for slot in 0..3 {
        ips.push(env.pod_ip(NAME, slot).await);
    }
    let client = MajorityClient::start(env.client_login(NAME).await, ips.clone());

    annotate(&env, ROTATE_ADMIN_ANNOTATION, "a1").await;
    env.wait_event("AdminPasswordRotationStarted").await;
    // Switched: every member accepts both, and the operator logs in with the new one.
    wait_admin_rotation(&env, "RemovingOldPassword").await;
    env.wait_event("AdminPasswordSwitched").await;
    let new = env.admin_login(NAME).await;
    assert_ne!(new.password, old.password, "<name>-admin holds the new password");

    // A member killed mid-rotation: restarted, probed with the new password, held, released.
    let before = env.member(NAME, 1).await.unwrap();
    let killed = Instant::now();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-1"), Signal::SIGKILL)
        .await
        .unwrap();
    env.wait_member(NAME, 1, "restarted and released", Duration::from_secs(30), |m| {
        m.state == MemberState::Ready && m.run_id.is_some() && m.run_id != before.run_id
    })
    .await;
    wait_admin_rotation(&env, "Rotated").await;
    env.wait_event("AdminPasswordRotated").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rounds, outages) = client.finish().await;
    rounds.assert_steady(STEADY, killed, 2);
    assert!(outages.is_empty(), "rounds without a majority: {outages:?}");

    let ip1 = env.pod_ip(NAME, 1).await;
    for ip in ips.iter().chain([&ip1]) {
        assert!(
            !logs_in(*ip, &old).await,
            "{ip}: the old admin password is refused"
        );
        assert!(logs_in(*ip, &new).await, "{ip}: the new admin password works");
    }
    // What is kept: the new password, the token, the startup probe's password unchanged.
    let admin = Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .get(&format!("{NAME}-admin"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(admin["adminRotatedToken"].0, b"a1");
    assert!(!admin.contains_key("passwordNext") && !admin.contains_key("passwordPrevious"));
    assert_eq!(admin["probePassword"].0, probe_password.as_bytes());
    let acl = env.secret(&format!("{NAME}-acl"), "users-auth.acl").await;
    let admin_line = acl
        .lines()
        .find(|l| l.starts_with("user redlock-admin "))
        .unwrap();
    assert_eq!(admin_line.matches(" #").count(), 1, "{admin_line}");
    assert!(admin_line.contains(&password_hash(&new.password)), "{admin_line}");

    // The request stays on the object: nothing rotates again; every pod stays Ready (a TCP
    // readiness period and more later).
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(env.admin_login(NAME).await.password, new.password);
    for slot in 0..3 {
        let pod = env.pods().get(&format!("{NAME}-{slot}")).await.unwrap();
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "{NAME}-{slot} is Ready after the rotation");
    }
    let c = env.cluster(NAME).await;
    assert_eq!(c.status.unwrap().ready_instances, Some(3));
    wait_admin_rotation(&env, "Rotated").await;
}

/// An admin rotation survives an operator restart: held in its first phase by a member that
/// does not answer (SIGSTOP), the operator is killed and another started; it recovers the
/// phase from the Secrets (the new password it finds is the one recorded before, not a
/// fresh one), and once the member answers again the rotation ends with that password, while
/// a Redlock client keeps getting majorities.
#[tokio::test]
async fn an_admin_rotation_held_by_a_silent_member_survives_an_operator_restart() {
    use redlock_operator::credentials::admin_rotation::{
        CONDITION as ADMIN_CONDITION, ROTATE_ADMIN_ANNOTATION,
    };
    let args = ["--leader-elect=false", "--password-rotation-grace-ms=4000"];
    let mut env = Env::start_with(3, &args).await;
    env.serving_with_ttl(NAME, 3, "3s").await;
    let old = env.admin_login(NAME).await;
    let mut ips = Vec::new();
    for slot in 0..3 {
        ips.push(env.pod_ip(NAME, slot).await);
    }
    let client = MajorityClient::start(env.client_login(NAME).await, ips.clone());
    let stopped = format!("{NAME}-2");
    env.cp
        .nodes()
        .signal_pod(&env.ns, &stopped, Signal::SIGSTOP)
        .await
        .unwrap();

    annotate(&env, ROTATE_ADMIN_ANNOTATION, "a1").await;
    env.wait_event("AdminPasswordRotationStarted").await;
    let message = async |env: &Env| {
        let c = env.cluster(NAME).await;
        c.status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == ADMIN_CONDITION)
            .map(|c| (c.reason, c.message))
    };
    let held = async |env: &Env| {
        wait_for(
            "the rotation held by member 2",
            Duration::from_secs(20),
            async || {
                Ok(message(env).await.filter(|(reason, m)| {
                    reason == "AddingPassword" && m.contains("waiting for members [2]")
                }))
            },
        )
        .await
    };
    held(&env).await;
    let next = env.secret(&format!("{NAME}-admin"), "passwordNext").await;
    assert_eq!(env.admin_login(NAME).await.password, old.password);

    // The operator dies mid-rotation; another one starts and finds the rotation where it was.
    env.operator.kill().unwrap();
    env.operator.wait_exit(Duration::from_secs(5)).await.unwrap();
    env.operator = start_operator_with(&env.cp, "operator-2.log", &args).await;
    let restarted = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    held(&env).await;
    assert_eq!(env.secret(&format!("{NAME}-admin"), "passwordNext").await, next);

    env.cp
        .nodes()
        .signal_pod(&env.ns, &stopped, Signal::SIGCONT)
        .await
        .unwrap();
    wait_admin_rotation(&env, "Rotated").await;
    let (rounds, outages) = client.finish().await;
    rounds.assert_steady(STEADY, restarted, 2);
    assert!(outages.is_empty(), "rounds without a majority: {outages:?}");
    let new = env.admin_login(NAME).await;
    assert_eq!(new.password, next, "the password recorded before the restart");
    for ip in &ips {
        assert!(
            !logs_in(*ip, &old).await,
            "{ip}: the old admin password is refused"
        );
        assert!(logs_in(*ip, &new).await, "{ip}: the new admin password works");
    }
}
