//! A release names its pod (issue 15, docs/design.md §9.6), against a real redis-server: the
//! process was started for pod `uid-A` (its `proc-title-template` says so, as the operator's
//! pod command line makes it). An address reused by that process, looked up for another pod
//! `uid-B` (a stale pod cache after the CNI handed the address on), is never released for
//! `uid-B`, even with the right run id; the probe reports the pod the process names.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use redlock_operator::redis_admin::{AdminAccess, GuardedError};
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

#[tokio::test]
async fn a_process_is_released_only_for_the_pod_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let _redis = start_redis(port, dir.path());
    let access = AdminAccess {
        admin_user: "admin".into(),
        admin_password: "admin-pw".into(),
        client_user: "client".into(),
        port,
        timeout: Duration::from_millis(500),
        tls_ca: None,
    };
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (info, _) = loop {
        match access.probe(ip).await {
            Ok(found) => break found,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("redis-server did not answer: {e}"),
        }
    };
    assert_eq!(info.pod_uid.as_deref(), Some("uid-A"));
    assert!(!info.client_enabled);

    // Looked up for pod uid-B: refused, and the client user stays off.
    match access.release(ip, &info.run_id, Some("uid-B")).await {
        Err(GuardedError::OtherPod { expected, found, .. }) => {
            assert_eq!((expected.as_str(), found.as_str()), ("uid-B", "uid-A"));
        }
        other => panic!("released for the wrong pod: {other:?}"),
    }
    let (after, _) = access.probe(ip).await.unwrap();
    assert!(!after.client_enabled, "still fenced");

    // A stale run id is refused too, whatever the pod.
    assert!(matches!(
        access.release(ip, "0000", Some("uid-A")).await,
        Err(GuardedError::OtherProcess { .. })
    ));

    // For its own pod: released.
    access.release(ip, &info.run_id, Some("uid-A")).await.unwrap();
    let (after, _) = access.probe(ip).await.unwrap();
    assert!(after.client_enabled, "released");
}
