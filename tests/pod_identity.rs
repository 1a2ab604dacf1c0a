//! A release names its pod (issue 15, docs/design.md §9.6), against a real redis-server: the
//! process was started for pod `uid-A` (its `proc-title-template` says so, as the operator's
//! pod command line makes it). An address reused by that process, looked up for another pod
//! `uid-B` (a stale pod cache after the CNI handed the address on), is never released for
//! `uid-B`, even with the right run id; the probe reports the pod the process names. And a
//! release sets the client user's passwords to those on record in the same command as `on`.
//! End to end, on the real control plane: a replacement pod whose address (as the API shows
//! it) is another slot's process neither fences nor releases that process.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;

use redlock_operator::children::secrets::password_hash;
use redlock_operator::redis::admin::{AdminAccess, GuardedError};
use redlock_testenv::procs::{ManagedChild, free_port};

fn start_redis(port: u16, dir: &std::path::Path) -> ManagedChild {
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .args([
        "--proc-title-template",
        "{title} {listen-addr} {server-mode} pod=uid-A",
    ])
    .args(["--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all"])
    .args(["--user", "client", "off", ">client-pw", "~*", "+@all"])
    .args(["--user", "default", "off"]);
    ManagedChild::spawn("redis-server", cmd, &dir.join("redis.log")).unwrap()
}

fn access(port: u16) -> AdminAccess {
    AdminAccess {
        admin_user: "admin".into(),
        admin_password: "admin-pw".into(),
        admin_fallback_password: None,
        client_user: "client".into(),
        port,
        timeout: Duration::from_millis(500),
        tls_ca: None,
    }
}

/// The first probe's answer, once the server is up.
async fn first_probe(access: &AdminAccess, ip: IpAddr) -> redlock_operator::decide::observe::RedisInfo {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match access.probe(ip).await {
            Ok((found, _)) => break found,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("redis-server did not answer: {e}"),
        }
    }
}

#[tokio::test]
async fn a_process_is_released_only_for_the_pod_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let _redis = start_redis(port, dir.path());
    let access = access(port);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let info = first_probe(&access, ip).await;
    assert_eq!(info.pod_uid.as_deref(), Some("uid-A"));
    assert!(!info.client_enabled);

    // Looked up for pod uid-B: refused, and the client user stays off.
    match access.release(ip, &info.run_id, Some("uid-B"), &[]).await {
        Err(GuardedError::OtherPod { expected, found, .. }) => {
            assert_eq!((expected.as_str(), found.as_str()), ("uid-B", "uid-A"));
        }
        other => panic!("released for the wrong pod: {other:?}"),
    }
    let (after, _) = access.probe(ip).await.unwrap();
    assert!(!after.client_enabled, "still fenced");

    // A stale run id is refused too, whatever the pod.
    assert!(matches!(
        access.release(ip, "0000", Some("uid-A"), &[]).await,
        Err(GuardedError::OtherProcess { .. })
    ));

    // For its own pod: released.
    access
        .release(ip, &info.run_id, Some("uid-A"), &[])
        .await
        .unwrap();
    let (after, _) = access.probe(ip).await.unwrap();
    assert!(after.client_enabled, "released");
}

/// Issue 14: a process whose client user accepts a password that is not on record (its last
/// password sync failed, or someone added one by hand while it was held) is released with
/// exactly the passwords on record: the other one never logs in, not even until the next
/// probe would sync it.
#[tokio::test]
async fn a_release_sets_the_passwords_on_record_with_on() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let _redis = start_redis(port, dir.path());
    let access = access(port);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let info = first_probe(&access, ip).await;
    let url = |user: &str, pw: &str| format!("redis://{user}:{pw}@127.0.0.1:{port}/");
    let mut admin = redis::Client::open(url("admin", "admin-pw"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "client", ">stale-pw"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let login = async |pw: &str| {
        let client = redis::Client::open(url("client", pw)).unwrap();
        match client.get_multiplexed_async_connection().await {
            Ok(mut c) => redis::cmd("PING").query_async::<String>(&mut c).await.is_ok(),
            Err(_) => false,
        }
    };
    assert!(!login("client-pw").await && !login("stale-pw").await, "fenced");

    let on_record = [password_hash("client-pw"), password_hash("new-pw")];
    access
        .release(ip, &info.run_id, Some("uid-A"), &on_record)
        .await
        .unwrap();
    assert!(login("client-pw").await, "a password on record logs in");
    assert!(login("new-pw").await, "a password on record logs in");
    assert!(!login("stale-pw").await, "a password not on record is refused");
}

/// Whether a client's write failed because the client user is fenced (not a slow answer).
fn fenced(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || ["WRONGPASS", "NOPERM", "NOAUTH", "disabled"]
            .iter()
            .any(|w| text.contains(w))
}

/// Issue 15 (IP reuse, docs/design.md §9.6), end to end. Slot 0's replacement pod is seen at
/// slot 1's address, as a stale pod view shows it after the CNI handed the address on (the
/// process kubelet reports it so; the replacement's own process listens elsewhere). Before
/// its own process was ever seen, slot 0's record knows no run id, so the run id cannot tell
/// the processes apart: only the pod each process names can.
/// 1. While slot 0 is held, slot 1's serving process is not fenced for it: clients keep
///    writing to slot 1, whose record stays Ready.
/// 2. Once slot 0's hold has run, slot 1's process is killed: its fenced replacement process
///    (on the same address) is not released for slot 0, whose hold is over, but only when
///    its own hold ends: no client writes to it before its `heldUntil`.
/// 3. Replaced by a pod seen at its true address, slot 0 is held in full and released.
///
/// Mutation check: with the probe's pod check off (`observe::foreign_process`), slot 0 takes
/// slot 1's serving process for its own and fences it: step 1 fails. (Step 2 cannot then
/// fail as well: slot 0 has taken slot 1's run id, so the restart reads as a new process.)
#[tokio::test]
async fn a_replacement_seen_at_another_slots_address_neither_fences_nor_releases_that_process() {
    const NAME: &str = "reuse";
    // The stale view of a reused address is a fault only the process kubelet can make
    // (`report_address`); a real kubelet reports what the CNI gave the pod.
    let env = Env::start_on_process_kubelet(3).await;
    env.serving_with_ttl(NAME, 3, "8s").await;
    let client = env.client_login(NAME).await;
    let slot1_ip = env.pod_ip(NAME, 1).await;
    let IpAddr::V4(slot1_v4) = slot1_ip else {
        panic!("IPv4 pod address")
    };
    let slot1_before = env.member(NAME, 1).await.unwrap();
    let kubelet = env.cp.kubelet();
    let slot0_pod = format!("{NAME}-0");
    kubelet.report_address(&env.ns, &slot0_pod, Some(slot1_v4));
    let old_uid = env.pods().get(&slot0_pod).await.unwrap().metadata.uid.unwrap();
    env.pods().delete(&slot0_pod, &Default::default()).await.unwrap();

    // The replacement runs, shown at slot 1's address; its probe finds slot 1's process and
    // says whose it is.
    let slot0 = env
        .wait_member(
            NAME,
            0,
            "slot 0 probed at the reused address",
            Duration::from_secs(30),
            |m| {
                m.message
                    .as_deref()
                    .is_some_and(|t| t.contains("the address was reused"))
            },
        )
        .await;
    assert_ne!(slot0.state, MemberState::Ready, "{slot0:?}");
    let new_pod = env.pods().get(&slot0_pod).await.unwrap();
    assert_ne!(new_pod.metadata.uid.as_ref(), Some(&old_uid), "a replacement pod");
    assert_eq!(
        new_pod.status.and_then(|s| s.pod_ip).as_deref(),
        Some(slot1_ip.to_string().as_str())
    );
    let until0 = wait_for("slot 0's hold on record", Duration::from_secs(10), async || {
        Ok(env.member(NAME, 0).await.and_then(|m| m.held_until).map(|t| t.0))
    })
    .await;

    // 1. Throughout slot 0's hold (and a little beyond), slot 1 serves and stays Ready.
    // Judged by the gaps between writes that went through, not by their count: a loaded
    // machine answers slower, but slot 1 must answer throughout.
    let writes = Rounds::new();
    let from = Instant::now();
    while Timestamp::now() < until0 + Duration::from_secs(2) {
        let began = Instant::now();
        let key = format!("k{}", writes.count());
        match lock(slot1_ip, &client, &key, "v", Duration::from_secs(5)).await {
            Ok(true) => writes.record(began),
            Ok(false) => panic!("{key} was already taken"),
            Err(e) if fenced(&e) => panic!("slot 1's process was fenced for slot 0: {e}"),
            // A slow answer on a loaded machine proves nothing either way.
            Err(e) => eprintln!("write to slot 1: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    writes.assert_steady(Duration::from_secs(3), from, 5);
    let slot1 = env.member(NAME, 1).await.unwrap();
    assert_eq!(slot1.state, MemberState::Ready, "{slot1:?}");
    assert_eq!(slot1.run_id, slot1_before.run_id, "{slot1:?}");
    let slot0 = env.member(NAME, 0).await.unwrap();
    assert_ne!(
        slot0.state,
        MemberState::Ready,
        "released at another slot's address: {slot0:?}"
    );

    // 2. Slot 1's process is killed. Its fenced replacement process at the same address is
    // released for slot 1 when its hold ends, never earlier for slot 0.
    kubelet
        .signal_pod(&env.ns, &format!("{NAME}-1"), Signal::SIGKILL)
        .unwrap();
    let (_, until1) = wait_held(&env, NAME, 1, slot1_before.run_id.as_deref().unwrap()).await;
    let served = first_client_write(slot1_ip, &client, Duration::from_secs(40))
        .await
        .unwrap();
    assert_released_on_time(until1, served);
    let slot0 = env.member(NAME, 0).await.unwrap();
    assert_ne!(slot0.state, MemberState::Ready, "{slot0:?}");

    // 3. Replaced by a pod seen at its true address (the API never changes a pod's address),
    // slot 0 is held as a new process and then released.
    kubelet.report_address(&env.ns, &slot0_pod, None);
    let lying_uid = env.pods().get(&slot0_pod).await.unwrap().metadata.uid;
    env.pods().delete(&slot0_pod, &Default::default()).await.unwrap();
    wait_for("slot 0 replaced", Duration::from_secs(60), async || {
        let pod = env.pods().get_opt(&slot0_pod).await?;
        Ok(pod.filter(|p| p.metadata.uid != lying_uid).map(|_| ()))
    })
    .await;
    env.wait_member(NAME, 0, "slot 0 released", Duration::from_secs(60), |m| {
        m.state == MemberState::Ready
    })
    .await;
    let ip0 = env.pod_ip(NAME, 0).await;
    assert_ne!(ip0, slot1_ip);
    first_client_write(ip0, &client, Duration::from_secs(10))
        .await
        .unwrap();
}

/// The admin password rotation's fallback (docs/design.md §8.11), against a real redis-server
/// whose admin user accepts only the old password (a process restarted from an ACL file its
/// kubelet had not updated): with the new password alone it cannot be probed; with the old one
/// as the fallback it is probed, and its admin user is set to the new one only, on a
/// connection that checked the run id; the old one is refused afterwards.
#[tokio::test]
async fn a_process_that_knows_only_the_old_admin_password_is_reached_through_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let _redis = start_redis(port, dir.path());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let old = access(port);
    let info = first_probe(&old, ip).await;
    assert_eq!(
        info.admin_password_hashes,
        Some(vec![password_hash("admin-pw")]),
        "the probe reads the admin user's passwords"
    );

    let new_only = AdminAccess {
        admin_password: "admin-pw-2".into(),
        ..access(port)
    };
    assert!(
        new_only.probe(ip).await.is_err(),
        "the new password alone is refused"
    );
    let with_fallback = AdminAccess {
        admin_fallback_password: Some("admin-pw".into()),
        ..new_only.clone()
    };
    let (found, _) = with_fallback.probe(ip).await.unwrap();
    assert_eq!(found.run_id, info.run_id);
    assert!(matches!(
        with_fallback
            .set_admin_passwords(ip, "0000", &[password_hash("admin-pw-2")])
            .await,
        Err(GuardedError::OtherProcess { .. })
    ));
    with_fallback
        .set_admin_passwords(ip, &info.run_id, &[password_hash("admin-pw-2")])
        .await
        .unwrap();
    let (found, _) = new_only.probe(ip).await.unwrap();
    assert_eq!(
        found.admin_password_hashes,
        Some(vec![password_hash("admin-pw-2")])
    );
    assert!(old.probe(ip).await.is_err(), "the old password is refused");
}

/// How many `INFO` commands the redis-server at `port` has run (its `INFO commandstats`,
/// asked on a connection of its own; the asking `INFO` counts only after it has answered).
async fn info_calls(port: u16) -> u64 {
    let client = redis::Client::open(format!("redis://admin:admin-pw@127.0.0.1:{port}/")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .map_or(0, |v| v.split(',').next().unwrap().parse().unwrap())
}

/// Issue 17: a kept probe connection reads which process it reaches (`INFO server`) once; later
/// probes on it read only what can change (the fence, passwords, the clock). A process that
/// restarts on the same address closes that connection, and the probe that finds it reads
/// the new process's run id on a new connection.
#[tokio::test]
async fn a_kept_probe_connection_reads_its_process_once_and_a_restart_is_a_new_process() {
    use redlock_operator::redis::probe_connections::ProbeConnections;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let redis = start_redis(port, dir.path());
    let access = access(port);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let first = first_probe(&access, ip).await;
    let kept = ProbeConnections::default();

    let (info, _) = access.probe_kept(ip, &kept, "uid").await.unwrap();
    assert_eq!(info.run_id, first.run_id);
    assert_eq!(kept.len(), 1);
    let calls = info_calls(port).await;
    // What a kept connection still reads: here the client user turned on behind its back.
    let client = redis::Client::open(format!("redis://admin:admin-pw@127.0.0.1:{port}/")).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("client")
        .arg("on")
        .query_async(&mut admin)
        .await
        .unwrap();
    let (again, _) = access.probe_kept(ip, &kept, "uid").await.unwrap();
    // Since then: the INFO that counted `calls`, and the probe's own `INFO stats` and `INFO
    // commandstats` (`evicted_keys` and the key-dropping commands, read every probe); no
    // `INFO server` on the kept connection.
    assert_eq!(
        info_calls(port).await,
        calls + 3,
        "no INFO server on the kept connection"
    );
    assert_eq!(again.run_id, first.run_id);
    assert_eq!(again.version, first.version);
    assert_eq!(again.pod_uid.as_deref(), Some("uid-A"));
    assert!(again.client_enabled, "the fence is read on every probe");

    // kill -9 and a new process on the same port.
    redis.signal(Signal::SIGKILL).unwrap();
    drop(redis);
    let _redis = start_redis(port, dir.path());
    let second = first_probe(&access, ip).await;
    assert_ne!(second.run_id, first.run_id);
    let (after, _) = access.probe_kept(ip, &kept, "uid").await.unwrap();
    assert_eq!(
        after.run_id, second.run_id,
        "the kept connection's process is not trusted after a restart"
    );
    assert!(!after.client_enabled);
    assert_eq!(kept.len(), 1);
}
