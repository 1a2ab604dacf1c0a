//! Hardening on the real control plane with real redis-server processes: what the client ACL
//! user may and may not do (also from inside scripts), the restricted Pod Security Standard
//! enforced by the API server, the per-cluster NetworkPolicy, that generated passwords
//! appear nowhere but in their Secrets, and that a fence waits for no status write.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use nix::sys::signal::Signal;
use redis::aio::MultiplexedConnection;
use redlock_operator::crd::MemberState;
use redlock_test_support::admission::Refusal;
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";

async fn query(conn: &mut MultiplexedConnection, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await
}

/// A refusal by the ACL: `NOPERM` for a command sent directly; from inside a script, Redis 7.0
/// reports it as "can't run this command", Valkey 9 as "ACL failure in script" (others keep
/// the NOPERM code).
fn is_acl_refusal(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    is_noperm(e) || text.contains("can't run this command") || text.contains("ACL failure in script")
}

fn is_noperm(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
}

/// Lock and unlock the way Redlock clients do. Written for this test; they use the commands the
/// published client libraries' scripts use (GET/DEL compare-and-delete, PEXPIRE or SET XX PX to
/// extend, multi-key EXISTS + SET PX to acquire several resources at once).
const UNLOCK: &str =
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;
const EXTEND_PEXPIRE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end"#;
const EXTEND_SET_XX: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "XX", "PX", ARGV[2]) and 1 or 0 else return 0 end"#;
const ACQUIRE_ALL: &str = r#"for _, k in ipairs(KEYS) do if redis.call("exists", k) == 1 then return 0 end end
for _, k in ipairs(KEYS) do redis.call("set", k, ARGV[1], "PX", ARGV[2]) end
return #KEYS"#;

async fn eval_int(conn: &mut MultiplexedConnection, script: &str, keys: &[&str], args: &[&str]) -> i64 {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
    cmd.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// What a Redlock client sends, from connecting to unlocking, works as the client user.
async fn real_client_commands_work(ip: IpAddr, client: &Login, version: &str) {
    let mut c = connect(ip, client).await.unwrap();
    // Connection set-up of go-redis, redis-py, ioredis, node-redis.
    for args in [
        &["PING"][..],
        &["HELLO", "3"],
        &["HELLO", "2"],
        &["CLIENT", "SETNAME", "app-1"],
        &["CLIENT", "GETNAME"],
        &["CLIENT", "ID"],
        &["INFO"],
        &["INFO", "server"],
        &["SELECT", "0"],
    ] {
        query(&mut c, args)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    let setinfo = query(&mut c, &["CLIENT", "SETINFO", "LIB-NAME", "redsync"]).await;
    match release_knows_setinfo(version) {
        true => {
            setinfo.unwrap_or_else(|e| panic!("CLIENT SETINFO on {version}: {e}"));
        }
        // The server does not know the subcommand: 7.0 and 7.1 say so, and it is not an ACL
        // refusal (the rule was left out on purpose). 6.2 checks the ACL's subcommand rules
        // before the subcommand exists and answers NOPERM. Clients ignore either error.
        false => {
            let e = setinfo.unwrap_err();
            assert!(!is_acl_refusal(&e) || !seven_or_later(version), "{version}: {e}");
        }
    }

    // Acquire, extend, release; by EVAL and by EVALSHA of a loaded script.
    let set: Option<String> = redis::cmd("SET")
        .arg("lock:a")
        .arg("token-1")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"));
    let again: Option<String> = redis::cmd("SET")
        .arg("lock:a")
        .arg("token-2")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(again, None, "NX refuses a taken lock");
    assert_eq!(
        eval_int(&mut c, EXTEND_PEXPIRE, &["lock:a"], &["token-1", "9000"]).await,
        1
    );
    assert!(pttl(&mut c, "lock:a").await > 5000);
    assert_eq!(
        eval_int(&mut c, EXTEND_SET_XX, &["lock:a"], &["token-1", "12000"]).await,
        1
    );
    assert!(pttl(&mut c, "lock:a").await > 9000);
    assert_eq!(
        eval_int(&mut c, EXTEND_PEXPIRE, &["lock:a"], &["token-2", "9000"]).await,
        0
    );
    assert_eq!(
        eval_int(&mut c, UNLOCK, &["lock:a"], &["token-2"]).await,
        0,
        "not the holder"
    );
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(UNLOCK)
        .query_async(&mut c)
        .await
        .unwrap();
    let deleted: i64 = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("lock:a")
        .arg("token-1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(
        eval_int(&mut c, ACQUIRE_ALL, &["lock:x", "lock:y"], &["token-3", "5000"]).await,
        2
    );
    assert_eq!(
        eval_int(&mut c, ACQUIRE_ALL, &["lock:y", "lock:z"], &["token-4", "5000"]).await,
        0
    );
}

/// The same gate the operator applies at release, restated: `CLIENT SETINFO` from 7.2 on.
fn release_knows_setinfo(version: &str) -> bool {
    redlock_operator::children::secrets::release_rules(version).contains(&"+client|setinfo")
}

/// Each of these would let one client break the safety argument for all: drop or move every
/// lock key, persist or replicate them, stop or reconfigure the server, silence or cut other
/// clients, or change the ACLs themselves.
const FORBIDDEN: &[&[&str]] = &[
    &["FLUSHALL"],
    &["FLUSHALL", "ASYNC"],
    &["FLUSHDB"],
    &["SWAPDB", "0", "1"],
    &["CONFIG", "SET", "appendonly", "yes"],
    &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    &["CONFIG", "GET", "*"],
    &["CONFIG", "REWRITE"],
    &["SHUTDOWN", "NOSAVE"],
    &["REPLICAOF", "127.0.0.1", "1"],
    &["SLAVEOF", "127.0.0.1", "1"],
    &["DEBUG", "SLEEP", "0"],
    &["ACL", "SETUSER", "other", "on", "+@all"],
    &["ACL", "LIST"],
    &["ACL", "WHOAMI"],
    &["CLIENT", "PAUSE", "10000"],
    &["CLIENT", "KILL", "ID", "1"],
    &["CLIENT", "LIST"],
    &["MODULE", "LIST"],
    &["MODULE", "LOAD", "/tmp/x.so"],
    &["SAVE"],
    &["BGSAVE"],
    &["BGREWRITEAOF"],
    &["MONITOR"],
    &["RESTORE", "k", "0", "x"],
    &["MIGRATE", "127.0.0.1", "1", "k", "0", "1"],
    // Would let one client stop the server for an interactive Lua debugging session.
    &["SCRIPT", "DEBUG", "SYNC"],
];

/// Whether the server is Redis >= 7.0 (or Valkey, which reports 7.2.4): `DEBUG` and `MODULE`
/// are then switched off server-wide by default (`enable-debug-command no`,
/// `enable-module-command no`), and the release denies `SCRIPT DEBUG` alone. Redis 6.2 has
/// neither switch nor subcommand rules: its client ACL refuses `DEBUG` and `MODULE` outright,
/// and `SCRIPT DEBUG` stays allowed (docs/security.md "Client ACL").
fn seven_or_later(version: &str) -> bool {
    redlock_operator::children::secrets::version_at_least(version, (7, 0))
}

async fn forbidden_commands_are_refused(ip: IpAddr, client: &Login, admin: &Login, version: &str) {
    let seven = seven_or_later(version);
    assert_eq!(
        seven,
        redlock_operator::children::secrets::release_rules(version).contains(&"-script|debug"),
        "the release denies SCRIPT DEBUG exactly from 7.0 on ({version})"
    );
    let mut c = connect(ip, client).await.unwrap();
    let () = redis::cmd("SET")
        .arg("canary")
        .arg("1")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .unwrap();
    for args in FORBIDDEN {
        if args.starts_with(&["SCRIPT", "DEBUG"]) && !seven {
            // Not deniable on 6.2 (the documented gap); sending it would start a session.
            continue;
        }
        let e = query(&mut c, args)
            .await
            .expect_err(&format!("{args:?} must be refused"));
        if seven && (args[0] == "DEBUG" || args.starts_with(&["MODULE", "LOAD"])) {
            // Refused before the ACL is even consulted: disabled server-wide by Redis >= 7.0's
            // defaults (`enable-debug-command no`, `enable-module-command no`).
            assert!(e.to_string().contains("not allowed"), "{args:?}: {e}");
        } else {
            assert!(is_noperm(&e), "{args:?}: {e}");
        }
        // Scripts run with the caller's permissions.
        let lua_args = args
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let script = format!("return redis.call({lua_args})");
        let e = redis::cmd("EVAL")
            .arg(&script)
            .arg(0)
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err(&format!("{script} must be refused"));
        assert!(
            is_acl_refusal(&e) || e.to_string().contains("not allowed from script"),
            "{script}: {e}"
        );
        // `pcall` lets a script see the refusal as a value instead of failing; still refused.
        let script = format!(
            "local r = redis.pcall({lua_args}); if type(r) == 'table' and r.err then return 0 end return 1"
        );
        let ran: redis::RedisResult<i64> = redis::cmd("EVAL").arg(&script).arg(0).query_async(&mut c).await;
        assert!(!matches!(ran, Ok(1)), "{script} ran the command");
    }
    // Nothing above had an effect: the key is there, the server still runs with its settings.
    let canary: Option<String> = redis::cmd("GET").arg("canary").query_async(&mut c).await.unwrap();
    assert_eq!(canary.as_deref(), Some("1"));
    let mut a = connect(ip, admin).await.unwrap();
    for (key, want) in [("appendonly", "no"), ("maxmemory-policy", "noeviction")] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(key)
            .query_async(&mut a)
            .await
            .unwrap();
        assert_eq!(got[1], want);
    }
    // DEBUG and MODULE are not merely withheld from clients: nobody, not even the operator,
    // can run them. From 7.0 on the server refuses them before any ACL is consulted; on 6.2
    // the admin user's own ACL denies them.
    for args in [
        &["DEBUG", "SLEEP", "0"][..],
        &["MODULE", "LOAD", "/tmp/x.so"],
        &["MODULE", "LIST"],
    ] {
        let e = query(&mut a, args)
            .await
            .expect_err(&format!("{args:?} must be refused to the operator's user"));
        if seven && args != ["MODULE", "LIST"] {
            assert!(e.to_string().contains("not allowed"), "{args:?}: {e}");
        } else {
            assert!(is_noperm(&e), "{args:?}: {e}");
        }
    }
    // Nor anything else that drops keys or changes the server (safety review 3, N1): the
    // operator's user runs only what the operator sends.
    for args in ADMIN_FORBIDDEN {
        let e = query(&mut a, args)
            .await
            .expect_err(&format!("{args:?} must be refused to the operator's user"));
        assert!(is_noperm(&e), "{args:?}: {e}");
    }
    let canary: Option<String> = redis::cmd("GET").arg("canary").query_async(&mut a).await.unwrap();
    assert_eq!(
        canary.as_deref(),
        Some("1"),
        "the admin's refused commands had no effect"
    );
}

/// What the operator's own user is refused (`secrets::ADMIN_RULES`): every way to drop, move
/// or persist keys or to change the server's settings.
const ADMIN_FORBIDDEN: &[&[&str]] = &[
    &["FLUSHALL"],
    &["FLUSHDB"],
    &["SWAPDB", "0", "1"],
    &["DEL", "canary"],
    &["UNLINK", "canary"],
    &["PEXPIRE", "canary", "1"],
    &["SET", "canary", "2"],
    &["RESTORE", "k", "0", "x"],
    &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    &["CONFIG", "SET", "appendonly", "yes"],
    &["CONFIG", "REWRITE"],
    &["REPLICAOF", "127.0.0.1", "1"],
    &["SLAVEOF", "127.0.0.1", "1"],
    &["SHUTDOWN", "NOSAVE"],
    &["EVAL", "return 1", "0"],
    &["ACL", "LOAD"],
    &["ACL", "SAVE"],
];

#[tokio::test]
async fn client_user_runs_redlock_clients_and_nothing_that_breaks_safety() {
    let env = Env::start(1).await;
    // 10s: the commands below set 10s locks (PX within maxLockTTL); the first process is held
    // for one hold (10.1s + 1s) before it serves.
    env.create_cluster(NAME, json!({"instances": 1, "maxLockTTL": "10s"}))
        .await;
    env.wait_ready(NAME, 1, Duration::from_secs(40)).await;
    let ip = env.pod_ip(NAME, 0).await;
    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    let mut a = connect(ip, &admin).await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut a)
        .await
        .unwrap();
    let (_, version) = redlock_operator::redis::admin::parse_info_server(&info).unwrap();
    assert!(!version.is_empty(), "{info}");
    real_client_commands_work(ip, &client, &version).await;
    forbidden_commands_are_refused(ip, &client, &admin, &version).await;
}

async fn network_policy(env: &Env) -> Option<NetworkPolicy> {
    Api::<NetworkPolicy>::namespaced(env.cp.client(), &env.ns)
        .get_opt(NAME)
        .await
        .unwrap()
}

/// The API server's PodSecurity admission enforces the restricted standard on the namespace,
/// so every instance pod the operator creates is checked by the real thing. The
/// NetworkPolicy is created, changed and removed with the spec; no network plugin runs here,
/// so what is checked is the object, not packet filtering.
#[tokio::test]
async fn pods_pass_restricted_pod_security_and_the_network_policy_follows_the_spec() {
    // The operator says it runs in `redlock-system` (what the NetworkPolicy admits), a
    // namespace this control plane does not have; its Lease stays in `default`.
    let env = Env::start_with(
        2,
        &[
            "--operator-namespace",
            "redlock-system",
            "--lease-namespace",
            "default",
        ],
    )
    .await;
    env.kubectl(&[
        "label",
        "namespace",
        &env.ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ])
    .await;
    // Admission really runs: a pod without the restricted settings is refused.
    let loose: Pod = serde_json::from_value(json!({
        "metadata": {"name": "loose"},
        "spec": {"containers": [{"name": "redis", "image": "redis:7.4"}]},
    }))
    .unwrap();
    let refused = env
        .pods()
        .create(&PostParams::default(), &loose)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("violates PodSecurity"), "{refused}");

    let app = json!({"matchLabels": {"app": "checkout"}});
    env.create_cluster(
        NAME,
        json!({"instances": 2, "maxLockTTL": "3s",
               "networkPolicy": {"enabled": true, "clientPodSelector": app}}),
    )
    .await;
    env.wait_ready(NAME, 2, Duration::from_secs(40)).await;

    let np = wait_for("NetworkPolicy", Duration::from_secs(10), async || {
        Ok(network_policy(&env).await)
    })
    .await;
    let spec = serde_json::to_value(np.spec.unwrap()).unwrap();
    assert_eq!(
        spec["podSelector"],
        json!({"matchLabels": {"app.kubernetes.io/instance": NAME, "app.kubernetes.io/name": "redis"}})
    );
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "redlock-system"}},
                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redlock-operator"}}},
                {"podSelector": app},
            ],
            "ports": [{"port": 6379, "protocol": "TCP"}],
        }])
    );
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));

    // Client namespaces instead of client pods: the policy is updated in place.
    let prod = json!({"matchLabels": {"env": "prod"}});
    env.patch_spec(
        NAME,
        json!({"networkPolicy": {"clientPodSelector": null, "clientNamespaceSelector": prod}}),
    )
    .await;
    wait_for(
        "NetworkPolicy for namespaces",
        Duration::from_secs(10),
        async || {
            let spec = serde_json::to_value(network_policy(&env).await.and_then(|n| n.spec))?;
            Ok(
                (spec["ingress"][0]["from"][1] == json!({"podSelector": {}, "namespaceSelector": prod}))
                    .then_some(()),
            )
        },
    )
    .await;

    // Disabled: removed. Pods were not replaced for it (the policy does not shape them).
    let uids = pod_uids(&env).await;
    env.patch_spec(NAME, json!({"networkPolicy": {"enabled": false}}))
        .await;
    wait_for("NetworkPolicy removed", Duration::from_secs(10), async || {
        Ok(network_policy(&env).await.is_none().then_some(()))
    })
    .await;
    assert_eq!(uids, pod_uids(&env).await);
}

/// `password` as it appears inside any base64 text, whatever its offset there: for each of the
/// three alignments, the characters that depend on the password's bytes alone.
fn base64_forms(password: &str) -> Vec<String> {
    (0..3)
        .map(|pad| {
            let mut bytes = vec![0u8; pad];
            bytes.extend_from_slice(password.as_bytes());
            let encoded = serde_json::to_value(ByteString(bytes)).unwrap();
            let encoded = encoded.as_str().unwrap();
            let skip = (pad * 8).div_ceil(6);
            encoded[skip..encoded.len() - 4].to_owned()
        })
        .collect()
}

/// Everything the operator writes or says, except the two Secrets that exist to hold the
/// passwords: its log (at trace level for its own code), /metrics, events, the cluster's status
/// and every other object in the namespace, Secrets included (decoded too).
async fn published(env: &Env) -> Vec<(String, String)> {
    let mut out = vec![
        ("operator log".to_owned(), env.operator.log()),
        (
            "/metrics".to_owned(),
            env.operator.get("/metrics").await.unwrap().1,
        ),
    ];
    for kind in [
        "events",
        "events.events.k8s.io",
        "redlockclusters",
        "pods",
        "services",
        "configmaps",
        "poddisruptionbudgets",
        "networkpolicies",
        "leases",
        "endpointslices",
    ] {
        out.push((kind.to_owned(), env.kubectl(&["get", kind, "-o", "json"]).await));
    }
    let described = env.kubectl(&["describe", "rlc", NAME]).await;
    out.push(("kubectl describe".to_owned(), described));
    let secrets = Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .list(&Default::default())
        .await
        .unwrap();
    for s in secrets.items {
        let name = s.metadata.name.clone().unwrap();
        if name == format!("{NAME}-admin") || name == format!("{NAME}-client") {
            continue;
        }
        let decoded: String = s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}\n", String::from_utf8_lossy(&v.0)))
            .collect();
        out.push((format!("Secret {name}"), serde_json::to_string(&s).unwrap()));
        out.push((format!("Secret {name} (decoded)"), decoded));
    }
    out
}

#[tokio::test]
async fn generated_passwords_appear_only_in_their_secrets() {
    let env = Env::start_with(2, &["--log-filter", "info,redlock_operator=trace"]).await;
    env.create_cluster(
        NAME,
        json!({"instances": 2, "maxLockTTL": "2s", "holdMargin": "0s",
               "networkPolicy": {"enabled": true}}),
    )
    .await;
    env.wait_ready(NAME, 2, Duration::from_secs(40)).await;
    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;

    // Make the operator log, count and report as much as it does: a loss, a hold, a release,
    // a refused spec and its fix.
    kill_until_held(&env, 0).await;
    env.wait_ready(NAME, 2, Duration::from_secs(20)).await;
    env.patch_spec(
        NAME,
        json!({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
    )
    .await;
    wait_for("SpecRejected", Duration::from_secs(10), async || {
        Ok(env
            .kubectl(&["describe", "rlc", NAME])
            .await
            .contains("SpecRejected")
            .then_some(()))
    })
    .await;
    env.patch_spec(NAME, json!({"resources": null})).await;
    // A lock client at work, and the TTL audit reading its keys.
    let ip = env.pod_ip(NAME, 1).await;
    assert!(
        lock(ip, &client, "orders:1", "token", Duration::from_secs(1))
            .await
            .unwrap()
    );

    let mut needles = vec![];
    for (whose, password) in [("admin", &admin.password), ("client", &client.password)] {
        assert_eq!(password.len(), 64, "{whose} password is generated");
        needles.push((format!("{whose} password"), password.clone()));
        for (i, b64) in base64_forms(password).into_iter().enumerate() {
            needles.push((format!("{whose} password in base64 (alignment {i})"), b64));
        }
    }
    // The search works: the password Secret holds what is searched for, in both forms.
    let client_secret = serde_json::to_string(
        &Api::<Secret>::namespaced(env.cp.client(), &env.ns)
            .get(&format!("{NAME}-client"))
            .await
            .unwrap(),
    )
    .unwrap();
    let client_b64: Vec<_> = needles
        .iter()
        .filter(|(w, _)| w.starts_with("client password in base64"))
        .collect();
    assert!(
        client_b64.iter().any(|(_, n)| client_secret.contains(n.as_str())),
        "the base64 forms must find the password in its own Secret"
    );

    let haystacks = published(&env).await;
    let log = &haystacks[0].1;
    assert!(log.contains("released"), "the log has content: {log}");
    let mut leaks = vec![];
    for (place, text) in &haystacks {
        for (what, needle) in &needles {
            if text.contains(needle.as_str()) {
                leaks.push(format!("{what} in {place}"));
            }
        }
    }
    assert!(leaks.is_empty(), "leaked: {leaks:?}");
}

/// A CA made for this test and an instance certificate it issued for `*.<ns>.svc` (the names
/// in the client URLs), as a `kubernetes.io/tls` Secret with `ca.crt`. Returns the Secret and
/// the CA's PEM.
fn tls_secret(ns: &str, name: &str) -> (Secret, Vec<u8>) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let mut server = CertificateParams::new(vec![format!("*.{ns}.svc")]).unwrap();
    server.distinguished_name = DistinguishedName::new();
    server
        .distinguished_name
        .push(DnType::CommonName, format!("*.{ns}.svc"));
    let key = KeyPair::generate().unwrap();
    let cert = server.signed_by(&key, &ca).unwrap();
    let ca_pem = ca.pem().into_bytes();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": cert.pem(),
            "tls.key": key.serialize_pem(),
            "ca.crt": String::from_utf8(ca_pem.clone()).unwrap(),
        },
    }))
    .unwrap();
    (secret, ca_pem)
}

/// The UIDs of the cluster's pods, to tell whether any was replaced.
async fn pod_uids(env: &Env) -> Vec<Option<String>> {
    let pods = env.pods().list(&Default::default()).await.unwrap().items;
    pods.into_iter().map(|p| p.metadata.uid).collect()
}

/// A TLS connection to `ip` trusting only `ca`, logged in as `login`, verified like the
/// operator's own (`admin_connection::tls_config`): the address is an IP, which the certificate
/// does not name; the chain must still lead to `ca`.
async fn connect_tls(ip: IpAddr, login: &Login, ca: &[u8]) -> redis::RedisResult<MultiplexedConnection> {
    let info = redis::IntoConnectionInfo::into_connection_info(redis::ConnectionAddr::TcpTls {
        host: ip.to_string(),
        port: 6379,
        insecure: false,
        tls_params: None,
    })?
    .set_redis_settings(
        redis::RedisConnectionInfo::default()
            .set_username(&login.user)
            .set_password(&login.password)
            .set_skip_set_lib_name(),
    );
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    tls_client(info, ca)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// A client that trusts only `ca` and does not match the host name (an IP).
fn tls_client(info: redis::ConnectionInfo, ca: &[u8]) -> redis::RedisResult<redis::Client> {
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    };
    let built = redis::Client::build_with_tls(info, certificates)?;
    let mut addr = built.get_connection_info().addr().clone();
    addr.set_danger_accept_invalid_hostnames(true);
    redis::Client::open(built.get_connection_info().clone().set_addr(addr))
}

#[tokio::test]
async fn tls_only_instances_with_a_ca_made_in_the_test() {
    let env = Env::start(2).await;
    let (secret, ca) = tls_secret(&env.ns, "locks-tls");
    env.create_cluster(
        NAME,
        json!({"instances": 2, "maxLockTTL": "3s", "holdMargin": "0s",
               "tls": {"secretName": "locks-tls"}}),
    )
    .await;
    // The Secret does not exist yet: the user is told so on the cluster object.
    wait_for("TLSSecretInvalid event", Duration::from_secs(20), async || {
        let describe = env.kubectl(&["describe", "rlc", NAME]).await;
        Ok((describe.contains("TLSSecretInvalid") && describe.contains("locks-tls")).then_some(()))
    })
    .await;
    Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // Ready means: the operator probed and released each instance over TLS, and the startup
    // probe (`redis-cli --tls`, as the client user) got its PONG.
    env.wait_ready(NAME, 2, Duration::from_secs(40)).await;

    let urls = env.secret(&format!("{NAME}-client"), "urls").await;
    assert_eq!(urls.lines().count(), 2);
    assert!(urls.lines().all(|u| u.starts_with("rediss://")), "{urls}");

    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    for slot in 0..2 {
        let ip = env.pod_ip(NAME, slot).await;
        let mut c = connect_tls(ip, &client, &ca).await.unwrap();
        let set: Option<String> = redis::cmd("SET")
            .arg("orders:1")
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(set.as_deref(), Some("OK"));
        // TLS only: the plain protocol gets no answer on the port, and there is no other port.
        assert!(
            connect(ip, &client).await.is_err(),
            "plain TCP served on slot {slot}"
        );
        let mut a = connect_tls(ip, &admin, &ca).await.unwrap();
        let port: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("port")
            .query_async(&mut a)
            .await
            .unwrap();
        assert_eq!(port[1], "0");
        // A certificate from another CA is not trusted.
        let (_, other_ca) = tls_secret(&env.ns, "other");
        assert!(connect_tls(ip, &client, &other_ca).await.is_err());
    }

    // A loss is held and released over TLS like any other.
    let before = kill_until_held(&env, 0).await;
    let after = env.wait_ready(NAME, 2, Duration::from_secs(20)).await;
    let m = &after.status.unwrap().members[0];
    assert_ne!(m.run_id, before.run_id);

    // Issue 17: the CA is read once, not on every reconcile (one probe reconcile a second).
    let read_at_all = operator_requests(
        &env.cp,
        "get",
        "secrets",
        Some("locks-tls"),
        Timestamp::MIN,
        Timestamp::MAX,
    );
    assert!(
        read_at_all >= 1,
        "the audit log shows no read of the TLS Secret at all"
    );
    let from = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let reads = operator_requests(
        &env.cp,
        "get",
        "secrets",
        Some("locks-tls"),
        from,
        Timestamp::now(),
    );
    assert_eq!(
        reads, 0,
        "the operator read the TLS Secret {reads} times in 5 s of steady state"
    );

    // A CA rotation: the Secret gets a new CA and certificate. The running processes keep
    // their certificates (from the old CA, which the operator still trusts). A restarted one
    // presents the new certificate, which the kept CA does not verify: the failed connection
    // makes the operator read the Secret again, and the new process is released.
    let (rotated, new_ca) = tls_secret(&env.ns, "locks-tls");
    Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .replace("locks-tls", &PostParams::default(), &rotated)
        .await
        .unwrap();
    // The kubelet's volume resync (10 s) puts the new files in the pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let before = kill_until_held(&env, 0).await;
    let ip = env.pod_ip(NAME, 0).await;
    wait_for(
        "restarted member released under the new CA",
        Duration::from_secs(40),
        async || {
            let m = env.member(NAME, 0).await.context("member 0")?;
            if m.state != MemberState::Ready || m.run_id == before.run_id {
                return Ok(None);
            }
            // Its certificate is the new CA's (else this would not test a rotation).
            Ok(connect_tls(ip, &client, &new_ca).await.ok().map(|_| ()))
        },
    )
    .await;
}

/// kill -9 of the member in `slot`, then waits until status holds its successor; returns the
/// member's record from before the kill.
async fn kill_until_held(env: &Env, slot: i32) -> redlock_operator::crd::MemberStatus {
    let before = env.member(NAME, slot).await.unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-{slot}"), Signal::SIGKILL)
        .await
        .unwrap();
    wait_held(env, NAME, slot, before.run_id.as_deref().unwrap()).await;
    before
}

/// Whether the pod of `slot` was built TLS only (it mounts a certificate), if the pod exists.
async fn pod_tls(env: &Env, slot: i32) -> Option<bool> {
    let pod = env.pods().get_opt(&format!("{NAME}-{slot}")).await.unwrap()?;
    Some(
        pod.spec?
            .volumes
            .unwrap_or_default()
            .iter()
            .any(|v| v.name == "tls"),
    )
}

/// Issue 14, liveness: TLS turned on and off again while lock clients run. The containers of
/// pods the rollout has not replaced yet are killed after redis.conf was rewritten for the new
/// mode; each restarts listening as its pod was built (`--port`/`--tls-port` on its command
/// line override redis.conf), the operator reaches it the same way (the CA of the Secret the
/// pod mounts, also once the spec no longer names it), and the rollout completes both ways.
#[tokio::test]
async fn tls_toggles_roll_out_while_old_processes_restart() {
    let env = Env::start(3).await;
    let (secret, ca) = tls_secret(&env.ns, "locks-tls");
    Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.serving_with_ttl(NAME, 3, "8s").await;
    let login = env.client_login(NAME).await;
    for tls in [true, false] {
        let spec_tls = if tls {
            json!({"secretName": "locks-tls"})
        } else {
            serde_json::Value::Null
        };
        env.patch_spec(NAME, json!({"tls": spec_tls})).await;
        let started = std::time::Instant::now();
        wait_for("redis.conf rewritten", Duration::from_secs(10), async || {
            let conf = env.config_map(&format!("{NAME}-config"), "redis.conf").await;
            Ok((conf.contains("tls-port 6379") == tls).then_some(()))
        })
        .await;
        // The pods' volumes show it (the test kubelet refreshes them every 10 s).
        tokio::time::sleep(Duration::from_secs(11)).await;
        let mut restarted = 0;
        for slot in 0..3 {
            if pod_tls(&env, slot).await == Some(!tls)
                && env
                    .cp
                    .nodes()
                    .signal_pod(&env.ns, &format!("{NAME}-{slot}"), Signal::SIGKILL)
                    .await
                    .is_ok()
            {
                restarted += 1;
            }
        }
        assert!(
            restarted > 0,
            "the rollout replaced every pod before the file changed"
        );
        wait_for(
            &format!("rollout to tls {tls} complete"),
            Duration::from_secs(120),
            async || {
                for slot in 0..3 {
                    if pod_tls(&env, slot).await != Some(tls) {
                        return Ok(None);
                    }
                }
                let ready = env.cluster(NAME).await.status.and_then(|s| s.ready_instances);
                Ok((ready == Some(3)).then_some(()))
            },
        )
        .await;
        println!(
            "tls {tls}: rollout with {restarted} old process(es) restarted took {:?}",
            started.elapsed()
        );
        for slot in 0..3 {
            let ip = env.pod_ip(NAME, slot).await;
            wait_for(
                "a client of the new mode connects",
                Duration::from_secs(10),
                async || {
                    let ok = if tls {
                        connect_tls(ip, &login, &ca).await.is_ok()
                    } else {
                        connect(ip, &login).await.is_ok()
                    };
                    Ok(ok.then_some(()))
                },
            )
            .await;
        }
    }
}

/// The TTL audit samples each member as its pod was built, as the probe does: during a TLS
/// toggle's rollout, members not yet replaced still listen in plain text, and an audit made in
/// the spec's (new) mode could not reach them, so a key with no expiry set there went unseen
/// for the whole rollout. Here the first replacement is held for 60 s, which keeps the other
/// two plain meanwhile.
#[tokio::test]
async fn the_ttl_audit_reaches_members_not_yet_rolled_to_tls() {
    let env = Env::start_with(3, &["--ttl-audit-period-ms=500"]).await;
    let (secret, _) = tls_secret(&env.ns, "locks-tls");
    Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.serving_with_ttl(NAME, 3, "60s").await;
    let login = env.client_login(NAME).await;
    let ttl_policy = async || {
        env.cluster(NAME)
            .await
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "TTLPolicy"))
    };
    wait_for("first TTL audit", Duration::from_secs(10), async || {
        Ok(ttl_policy().await.filter(|c| c.status == "True"))
    })
    .await;

    env.patch_spec(NAME, json!({"tls": {"secretName": "locks-tls"}}))
        .await;
    wait_for(
        "the rollout's first replacement",
        Duration::from_secs(30),
        async || {
            for slot in 0..3 {
                if pod_tls(&env, slot).await == Some(true) {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        },
    )
    .await;
    let mut plain = vec![];
    for slot in 0..3 {
        if pod_tls(&env, slot).await == Some(false) {
            plain.push(slot);
        }
    }
    assert_eq!(plain.len(), 2, "the rollout waits out the replacement's hold");
    for &slot in &plain {
        let mut c = connect(env.pod_ip(NAME, slot).await, &login).await.unwrap();
        query(&mut c, &["SET", "forever", "x"]).await.unwrap();
    }

    let flagged = wait_for("TTLPolicy False", Duration::from_secs(10), async || {
        Ok(ttl_policy().await.filter(|c| c.status == "False"))
    })
    .await;
    assert!(flagged.message.contains("\"forever\""), "{}", flagged.message);
    for &slot in &plain {
        assert_eq!(pod_tls(&env, slot).await, Some(false), "still plain when flagged");
    }
}

/// A process that outlives its pod is looked for and fenced in the mode its pod was built
/// with, not the spec's: slot 1's node is cut off with its plain-text process serving, the pod
/// is force-deleted, and TLS is turned on. Looked for with TLS (the spec's mode), the old
/// process never answered, and a client still using the old address kept getting locks from it.
#[tokio::test]
async fn a_process_that_outlives_its_pod_is_fenced_in_its_own_mode_after_a_tls_toggle() {
    use kube::api::DeleteParams;
    let env = Env::start(4).await;
    let (secret, _) = tls_secret(&env.ns, "locks-tls");
    Api::<Secret>::namespaced(env.cp.client(), &env.ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(40)).await;
    let login = env.client_login(NAME).await;
    let old_ip = env.pod_ip(NAME, 1).await;
    let node = env.node_of(NAME, 1).await;
    env.partition_and_cordon(&node).await;
    env.pods()
        .delete(&format!("{NAME}-1"), &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    env.patch_spec(NAME, json!({"tls": {"secretName": "locks-tls"}}))
        .await;

    env.wait_event("UnstoppedProcessFenced").await;
    wait_for("the old process fenced", Duration::from_secs(5), async || {
        Ok(connect(old_ip, &login).await.is_err().then_some(()))
    })
    .await;
    let u = env.member(NAME, 1).await.and_then(|m| m.unstopped);
    assert_eq!(
        u.and_then(|u| u.listener),
        Some(redlock_operator::crd::Listener { tls_secret: None }),
        "recorded as listening in plain text"
    );
}

/// The status subresource of every RedlockCluster in the test's namespace refused, create and
/// update alike (in the field a webhook, a policy engine, or a writer that makes each
/// conditional write a 409); lifted by [`Refusal::lift`].
async fn freeze_status(env: &Env) -> Refusal {
    admission::refuse_status_writes(
        env.cp.client(),
        &env.ns,
        &format!("freeze-rlc-status-{}", env.ns),
        "status frozen by the test",
    )
    .await
}

/// Whether a write of the cluster's status is refused by the test's policy: a dry run (nothing
/// is stored) of the kind of patch the operator sends, a change of the status subresource.
async fn status_write_refused(env: &Env) -> bool {
    use kube::api::{Patch, PatchParams};
    let params = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patch = Patch::Merge(json!({"status": {"observedGeneration": 999_999}}));
    match env.clusters().patch_status(NAME, &params, &patch).await {
        Err(e) => e.to_string().contains("status frozen by the test"),
        Ok(_) => false,
    }
}

/// Safety review 3, N4: a fence does not wait for a status write. The member in slot 0 is
/// killed (its new process held, on record), then every status write is refused by an
/// admission policy, and the held process's client user is switched on by hand as the admin
/// user. Within a probe period or two it refuses clients again (its logged-in connections
/// closed), while the status stays exactly as it was: the fence came without a write. It
/// stays fenced past the end of the hold on record, for the hold its re-fence started counts
/// from then; once writes are allowed again that hold goes on record, and the member is
/// released no earlier than its end.
///
/// Before, the failed write returned before the fence: the process served inside its hold for
/// as long as writes were refused, and the retries backed off up to 5 min.
#[tokio::test]
async fn a_held_process_let_in_while_status_writes_are_refused_is_fenced_again() {
    let env = Env::start(3).await;
    env.serving_with_ttl(NAME, 3, "15s").await;
    let before = env.member(NAME, 0).await.unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-0"), Signal::SIGKILL)
        .await
        .unwrap();
    let killed = Timestamp::now();
    let held = env
        .wait_member(
            NAME,
            0,
            "the new process held, on record",
            Duration::from_secs(30),
            |m| m.state == MemberState::Held && m.run_id.is_some() && m.run_id != before.run_id,
        )
        .await;
    let ip = env.pod_ip(NAME, 0).await;
    let client = env.client_login(NAME).await;
    let admin = env.admin_login(NAME).await;
    let mut a = wait_for(
        "the restarted process answers",
        Duration::from_secs(20),
        async || Ok(connect(ip, &admin).await.ok()),
    )
    .await;

    let frozen = freeze_status(&env).await;
    wait_for(
        "the policy refuses status writes",
        Duration::from_secs(20),
        async || Ok(status_write_refused(&env).await.then_some(())),
    )
    .await;
    let refused_from = Timestamp::now();
    // Some seconds into the hold on record, so that the re-fence's hold ends well after it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stored = env.cluster(NAME).await;
    let record = &stored.status.as_ref().unwrap().members[0];
    assert_eq!(
        (record.state, &record.run_id),
        (MemberState::Held, &held.run_id),
        "the record is the hold written before the policy"
    );
    let stored_until = record.held_until.as_ref().unwrap().0;
    let hold = stored_until.duration_since(record.hold_started_at.as_ref().unwrap().0);
    assert!(
        Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(5) < stored_until,
        "too little of the hold left to test in (the policy took long to apply): {stored_until}"
    );

    // The client user switched on behind the operator's back; a client logs in.
    let (mut logged_in, turned_on) = switch_on_and_log_in(&mut a, ip, &client).await;
    let fenced_at = wait_for("fenced again", Duration::from_secs(10), async || {
        Ok(connect(ip, &client).await.is_err().then(Timestamp::now))
    })
    .await;
    let took = fenced_at.duration_since(turned_on);
    eprintln!("fenced again {took:#} after the client user was switched on, status writes refused");
    assert!(
        took <= k8s_openapi::jiff::SignedDuration::from_secs(3),
        "fenced again only after {took:#}"
    );
    let ping: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut logged_in).await;
    assert!(
        ping.is_err(),
        "the connection logged in before the fence still works: {ping:?}"
    );
    // No write landed: the fence came without one; the Refenced event was told all the same.
    assert!(status_write_refused(&env).await);
    let now = env.cluster(NAME).await;
    assert_eq!(
        now.metadata.resource_version, stored.metadata.resource_version,
        "the status changed while writes were refused"
    );
    env.wait_event("Refenced").await;
    let writes: Vec<_> = operator_audit(&env.cp, refused_from, Timestamp::now())
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "redlockclusters" && e["objectRef"]["subresource"] == "status"
        })
        .map(|e| e["responseStatus"]["code"].as_i64().unwrap_or_default())
        .collect();
    assert!(
        !writes.is_empty() && writes.iter().all(|code| *code >= 400),
        "the operator's status writes meanwhile: {writes:?}"
    );
    eprintln!(
        "{} status writes refused in {:#}",
        writes.len(),
        Timestamp::now().duration_since(refused_from)
    );

    // Still refused past the end of the hold on record: the re-fence's hold runs from it.
    let past_stored_end = stored_until + k8s_openapi::jiff::SignedDuration::from_secs(1);
    while Timestamp::now() < past_stored_end {
        assert!(
            connect(ip, &client).await.is_err(),
            "served while its re-fence's hold ran (the hold on record ended at {stored_until})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(status_write_refused(&env).await, "writes still refused");

    // Writes allowed again: the re-fence's hold goes on record, and ends in full.
    frozen.lift().await;
    let lifted = Timestamp::now();
    let refenced_until = turned_on + hold;
    let m = env
        .wait_member(
            NAME,
            0,
            "the re-fence's hold on record",
            Duration::from_secs(30),
            |m| m.held_until.as_ref().is_some_and(|u| u.0 >= refenced_until) || m.state == MemberState::Ready,
        )
        .await;
    assert_eq!(m.state, MemberState::Held, "{m:?}");
    let served = first_client_write(ip, &client, Duration::from_secs(60))
        .await
        .unwrap();
    eprintln!(
        "killed at {killed}, held until {stored_until} on record; switched on at {turned_on}, fenced at {fenced_at}; writes allowed at {lifted}; served again at {served} (its re-fence's hold ended no earlier than {refenced_until})"
    );
    assert!(
        served >= refenced_until,
        "served at {served}, before the re-fence's hold ended ({refenced_until})"
    );
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
}
