//! `kubectl redlock` against the real control plane, with real redis-server processes and a
//! real lock client: status, a fence/unfence round trip the client feels, and the errors a
//! user meets (missing cluster, no permission, operator not running, CRD not installed).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use serde_json::json;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-redlock");
const NAME: &str = "locks";

/// hold = 3 s + ceil(3 s × 0.01) + 0.5 s = 3.53 s.
fn short_spec(instances: i32) -> serde_json::Value {
    json!({"instances": instances, "maxLockTTL": "3s", "holdMargin": "500ms"})
}

/// Runs the plugin in the test namespace as the user of `kubeconfig`. Async: the process
/// kubelet runs on this test's runtime and must keep running meanwhile.
async fn plugin_as(env: &Env, kubeconfig: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(PLUGIN)
        .env("KUBECONFIG", kubeconfig)
        .arg("-n")
        .arg(&env.ns)
        .args(args)
        .output()
        .await
        .unwrap()
}

async fn plugin(env: &Env, args: &[&str]) -> Output {
    plugin_as(env, env.cp.kubeconfig(), args).await
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "plugin failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "plugin succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr.clone()).unwrap()
}

async fn status_json(env: &Env) -> serde_json::Value {
    serde_json::from_str(&stdout(&plugin(env, &["status", NAME, "-o", "json"]).await)).unwrap()
}

/// Whether a lock client can write to `ip` now (a fenced member refuses its login).
async fn client_gets_in(ip: std::net::IpAddr, login: &Login) -> bool {
    lock(ip, login, "maintenance-probe", "x", Duration::from_millis(100))
        .await
        .is_ok()
}

#[tokio::test]
async fn fence_and_unfence_take_a_member_out_and_back_as_a_lock_client_sees_it() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec(3)).await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let login = env.client_login(NAME).await;
    let ips = env.member_ips(NAME, 3).await;

    let text = stdout(&plugin(&env, &["status", NAME]).await);
    assert!(
        text.contains("3 of 3 serving, quorum 2: 1 more may fail"),
        "{text}"
    );
    assert!(text.contains("Operator:     running"), "{text}");
    assert!(!text.contains('\x1b'), "piped output has no colour: {text}");
    // As kubectl runs it: `kubectl redlock` finds `kubectl-redlock` on the PATH.
    let mut kubectl = tokio::process::Command::from(env.cp.kubectl());
    let path = format!(
        "{}:{}",
        Path::new(PLUGIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = kubectl
        .env("PATH", path)
        .args(["redlock", "status", NAME, "-o", "json", "-n", &env.ns])
        .output()
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["serving"], 3);
    assert_eq!(v["members"].as_array().unwrap().len(), 3);

    // Fence slot 1: the lock client is shut out of it, and a Redlock lock still needs (and
    // gets) the other two.
    let out = stdout(&plugin(&env, &["fence", NAME, "1", "--reason", "kernel upgrade"]).await);
    assert!(out.contains("locks-1 fenced for maintenance"), "{out}");
    assert!(
        !client_gets_in(ips[1], &login).await,
        "a fenced member let a client in"
    );
    let (granted, valid) = redlock_attempt(&ips, &login, "orders", "a", Duration::from_secs(5)).await;
    assert_eq!((granted, valid), (2, true));
    // A second one would leave 1 of 3: refused unless forced.
    let err = stderr(&plugin(&env, &["fence", NAME, "2", "--reason", "disk"]).await);
    assert!(
        err.contains("below the quorum of 2") && err.contains("--force"),
        "{err}"
    );
    assert!(client_gets_in(ips[2], &login).await);

    let v = status_json(&env).await;
    assert_eq!(v["members"][1]["maintenance"], "kernel upgrade");
    assert_eq!(v["members"][1]["state"], "Held");
    assert_eq!(v["moreMayFail"], 0);
    let maintenance = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Maintenance")
        .unwrap();
    assert_eq!(maintenance["status"], "True", "{maintenance}");
    let text = stdout(&plugin(&env, &["status", NAME]).await);
    eprintln!("kubectl redlock status {NAME}, slot 1 fenced:\n{text}");
    assert!(text.contains("fenced for maintenance: kernel upgrade"), "{text}");
    wait_for(
        "FencedForMaintenance in status events",
        Duration::from_secs(10),
        async || {
            let v = status_json(&env).await;
            Ok(v["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["reason"] == "FencedForMaintenance")
                .then_some(()))
        },
    )
    .await;

    // Its hold (3.53 s) runs out; it stays fenced while in maintenance.
    let until = env.member(NAME, 1).await.unwrap().held_until.unwrap().0;
    let wait = until.duration_since(Timestamp::now()).as_secs_f64().max(0.0) + 1.5;
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    assert!(
        !client_gets_in(ips[1], &login).await,
        "released after its hold while fenced"
    );
    assert_eq!(env.member(NAME, 1).await.unwrap().state, MemberState::Held);

    // Unfenced after its hold: serves again at once.
    let out = stdout(&plugin(&env, &["unfence", NAME, "1"]).await);
    assert!(out.contains("locks-1 unfenced"), "{out}");
    first_client_write(ips[1], &login, Duration::from_secs(10))
        .await
        .unwrap();
    env.wait_ready(NAME, 3, Duration::from_secs(10)).await;

    // Unfenced before its hold ends: the client gets in no earlier than the hold's end.
    stdout(&plugin(&env, &["fence", NAME, "0", "--reason", "quick look"]).await);
    assert!(!client_gets_in(ips[0], &login).await);
    let until = env.member(NAME, 0).await.unwrap().held_until.unwrap().0;
    let out = stdout(&plugin(&env, &["unfence", NAME, "0"]).await);
    assert!(out.contains("once its hold ends"), "{out}");
    let served = first_client_write(ips[0], &login, Duration::from_secs(20))
        .await
        .unwrap();
    assert_released_on_time(until, served);
}

/// The operator's status writes of the cluster between `from` and `to` (audit log).
fn status_writes(env: &Env, from: Timestamp, to: Timestamp) -> usize {
    operator_audit(&env.cp, from, to)
        .iter()
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["resource"] == "redlockclusters"
                && e["objectRef"]["subresource"] == "status"
        })
        .count()
}

/// Safety-review 3, N5: the admin password of one member changed by hand. The operator's kept
/// probe connection stays logged in; its fresh logins, which fences use, are refused. `fence`
/// must not say "fenced" (the member still serves lock clients); the operator reports the
/// failed fence with a Warning and does not rewrite the status in a loop of probes that find
/// it serving and fences that fail (it did, about ten times a second). Once the password is
/// put back, the fence lands and the plugin says so.
#[tokio::test]
async fn fence_does_not_say_fenced_while_the_fence_cannot_land() {
    let env = Env::start(3).await;
    env.create_cluster(NAME, short_spec(3)).await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let login = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    let ips = env.member_ips(NAME, 3).await;
    let mut by_hand = connect(ips[1], &admin).await.unwrap();
    let set_admin_password = |password: String| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&admin.user)
            .arg("resetpass")
            .arg(format!(">{password}"))
            .clone()
    };
    let () = set_admin_password("other".into())
        .query_async(&mut by_hand)
        .await
        .unwrap();

    let err = stderr(&plugin(&env, &["fence", NAME, "1", "--reason", "disk", "--wait", "10s"]).await);
    assert!(err.contains("its fence not seen in place"), "{err}");
    assert!(
        client_gets_in(ips[1], &login).await,
        "the fence did not land: the member still serves"
    );
    env.wait_event("FenceFailed").await;
    let m = env.member(NAME, 1).await.unwrap();
    assert_eq!(
        (m.maintenance.as_deref(), m.fence_seen_at.is_none()),
        (Some("disk"), true),
        "{m:?}"
    );
    // No storm: over 6 s, the status is written at most about once a second.
    let from = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let writes = status_writes(&env, from, Timestamp::now());
    assert!(writes <= 6, "{writes} status writes in 6 s while the fence fails");

    // The password put back: the fence lands, a probe sees it, and the plugin says so.
    let () = set_admin_password(admin.password.clone())
        .query_async(&mut by_hand)
        .await
        .unwrap();
    let out = stdout(&plugin(&env, &["fence", NAME, "1", "--reason", "disk"]).await);
    assert!(out.contains("locks-1 fenced for maintenance"), "{out}");
    assert!(
        !client_gets_in(ips[1], &login).await,
        "a fenced member let a client in"
    );
    assert!(env.member(NAME, 1).await.unwrap().fence_seen_at.is_some());
}

#[tokio::test]
async fn errors_say_what_is_wrong() {
    // Short lease timings, so a dead operator shows within seconds.
    let env = Env::start_with(
        1,
        &[
            "--lease-duration-seconds=3",
            "--lease-renew-deadline-ms=2000",
            "--lease-retry-period-ms=300",
        ],
    )
    .await;
    env.create_cluster(NAME, short_spec(1)).await;
    env.wait_ready(NAME, 1, Duration::from_secs(40)).await;

    let err = stderr(&plugin(&env, &["status", "nope"]).await);
    assert!(
        err.contains(&format!("RedlockCluster nope not found in namespace {}", env.ns)),
        "{err}"
    );
    let err = stderr(&plugin(&env, &["fence", NAME, "0", "--reason", "x"]).await);
    assert!(err.contains("below the quorum of 1"), "{err}");
    let err = stderr(&plugin(&env, &["fence", NAME, "5", "--reason", "x"]).await);
    assert!(err.contains("slot 5 does not exist"), "{err}");
    let err = stderr(&plugin(&env, &["client-config", NAME, "--lang", "cobol"]).await);
    assert!(
        err.contains("possible values: node, go, python, python-redlock, ruby, php, dotnet, rust, java"),
        "{err}"
    );
    for lang in [
        "node",
        "go",
        "python",
        "python-redlock",
        "ruby",
        "php",
        "dotnet",
        "rust",
        "java",
    ] {
        let out = stdout(&plugin(&env, &["client-config", NAME, "--lang", lang]).await);
        assert!(
            out.contains(&format!("locks-0.{}.svc:6379", env.ns)),
            "{lang}: {out}"
        );
        assert!(out.contains("name: locks-client, key: urls"), "{lang}: {out}");
        assert!(out.contains("quorum 1, maxLockTTL 3s (3000 ms)"), "{lang}: {out}");
    }

    // A user RBAC grants nothing.
    let nobody = env.cp.kubeconfig_for_user("nobody", None).unwrap();
    let err = stderr(&plugin_as(&env, &nobody, &["status", NAME]).await);
    assert!(err.contains("no permission to get RedlockCluster locks"), "{err}");

    // The operator dies without releasing its Lease: status says so, and a fence is not
    // recorded (the request itself is kept for when it runs again).
    env.operator.kill().unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let text = stdout(&plugin(&env, &["status", NAME]).await);
    assert!(text.contains("NOT RUNNING"), "{text}");
    let err = stderr(
        &plugin(
            &env,
            &["fence", NAME, "0", "--reason", "x", "--force", "--wait", "2s"],
        )
        .await,
    );
    assert!(err.contains("has not recorded it within 2s"), "{err}");
    let c = env.cluster(NAME).await;
    assert_eq!(
        c.metadata.annotations.unwrap()[redlock_operator::hold::maintenance::FENCED_MEMBERS],
        r#"{"0":"x"}"#
    );

    env.kubectl(&["delete", "crd", "redlockclusters.redlock.dev", "--wait=true"])
        .await;
    let err = stderr(&plugin(&env, &["status", NAME]).await);
    assert!(err.contains("RedlockCluster resource is not installed"), "{err}");
}
