//! A release names its pod (issue 15, docs/design.md §9.6), against a real redis-server: the
//! process was started for pod `uid-A` (its `proc-title-template` says so, as the operator's
//! pod command line makes it). An address reused by that process, looked up for another pod
//! `uid-B` (a stale pod cache after the CNI handed the address on), is never released for
//! `uid-B`, even with the right run id; the probe reports the pod the process names. And a
//! release sets the client user's passwords to those on record in the same command as `on`.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use redlock_operator::redis_admin::{AdminAccess, GuardedError};
use redlock_operator::resources::secrets::password_hash;
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
        client_user: "client".into(),
        port,
        timeout: Duration::from_millis(500),
        tls_ca: None,
    }
}

/// The first probe's answer, once the server is up.
async fn first_probe(access: &AdminAccess, ip: IpAddr) -> redlock_operator::observe::RedisInfo {
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
