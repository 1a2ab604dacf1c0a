//! Shared by the integration tests and benchmarks: a control plane with the operator running,
//! RedlockCluster helpers, and Redis clients that log in the way lock clients do; the chart
//! rendered by Helm (`helm_chart`), PromQL against the exported metrics (`promql`), the
//! repository's Markdown as GitHub renders it (`markdown`), and the safety suite's harness
//! (`safety_harness`).

pub mod admission;
pub mod helm_chart;
pub mod markdown;
pub mod promql;
mod rounds;
pub mod safety_harness;

pub use rounds::Rounds;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use redlock_operator::crd::{MemberStatus, RedlockCluster};
use redlock_testenv::controlplane::OPERATOR_USER;
use redlock_testenv::operator::{OperatorProcess, deployment_restarts};
use redlock_testenv::{ControlPlane, ControlPlaneConfig};
use serde_json::json;

/// The `redlock-operator` binary cargo built for the running integration test or benchmark:
/// `CARGO_BIN_EXE_redlock-operator`, which cargo sets when it runs one (recent cargo; `env!` of
/// it works only in the main crate's own targets, not in this crate), else the file beside the
/// `deps` folder of the test's executable, where cargo puts it.
pub fn operator_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_redlock-operator") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("own executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the executable is in <target>/<profile>/deps");
    profile_dir.join("redlock-operator")
}

/// A control plane with nodes, the CRD, a namespace and a running operator.
pub struct Env {
    pub operator: OperatorProcess,
    pub ns: String,
    pub cp: ControlPlane,
}

impl Env {
    pub async fn start(nodes: usize) -> Self {
        Self::start_with(nodes, &[]).await
    }

    /// Like `start`, on the process kubelet whatever the run's default nodes: for tests and
    /// benchmarks that use what only it can do (`cp.kubelet()`).
    pub async fn start_on_process_kubelet(nodes: usize) -> Self {
        Self::start_config(
            ControlPlaneConfig {
                nodes,
                real_nodes: false,
                ..Default::default()
            },
            &[],
        )
        .await
    }

    /// Like `start`, with extra `redlock-operator run` flags.
    pub async fn start_with(nodes: usize, operator_args: &[&str]) -> Self {
        Self::start_config(
            ControlPlaneConfig {
                nodes,
                ..Default::default()
            },
            operator_args,
        )
        .await
    }

    /// A control plane as `config` says, with extra `redlock-operator run` flags.
    pub async fn start_config(config: ControlPlaneConfig, operator_args: &[&str]) -> Self {
        let cp = ControlPlane::start(config).await.expect("control plane starts");
        cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
        let ns = cp.new_namespace("lifecycle").await.unwrap();
        let operator = start_operator_with(&cp, "operator.log", operator_args).await;
        Self { operator, ns, cp }
    }

    pub fn clusters(&self) -> Api<RedlockCluster> {
        Api::namespaced(self.cp.client(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.cp.client(), &self.ns)
    }

    /// On real nodes a spec without `image` gets one built here (`ControlPlane::redis_image`).
    pub async fn create_cluster(&self, name: &str, mut spec: serde_json::Value) {
        if let Some(image) = self.cp.redis_image()
            && spec.get("image").is_none()
        {
            spec["image"] = json!(image);
        }
        let c: RedlockCluster = serde_json::from_value(json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        self.clusters().create(&PostParams::default(), &c).await.unwrap();
    }

    /// Merge-patches the cluster's spec with `spec`, as `kubectl patch --type merge` would.
    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) -> RedlockCluster {
        self.clusters()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap()
    }

    /// The cluster object; retries transient API errors (a dropped connection on a loaded
    /// machine) for a few seconds before giving up.
    pub async fn cluster(&self, name: &str) -> RedlockCluster {
        let mut attempts = 0;
        loop {
            match self.clusters().get(name).await {
                Ok(c) => return c,
                Err(e) if attempts < 20 && !matches!(&e, kube::Error::Api(s) if s.is_not_found()) => {
                    attempts += 1;
                    eprintln!("get {name}: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("get {name}: {e}"),
            }
        }
    }

    pub async fn member(&self, name: &str, slot: i32) -> Option<MemberStatus> {
        self.cluster(name)
            .await
            .status
            .and_then(|s| s.members.into_iter().find(|m| m.slot == slot))
    }

    /// Waits until the cluster reports `Available=True` with `ready` ready instances.
    pub async fn wait_ready(&self, name: &str, ready: i32, timeout: Duration) -> RedlockCluster {
        wait_for(&format!("{name} with {ready} ready"), timeout, async || {
            let c = self.cluster(name).await;
            let s = c.status.clone().unwrap_or_default();
            Ok((s.ready_instances == Some(ready)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True"))
            .then_some(c))
        })
        .await
    }

    pub async fn pod_ip(&self, name: &str, slot: i32) -> IpAddr {
        wait_for("pod IP", Duration::from_secs(30), async || {
            let pod = self.pods().get(&format!("{name}-{slot}")).await?;
            Ok(pod.status.and_then(|s| s.pod_ip).and_then(|ip| ip.parse().ok()))
        })
        .await
    }

    pub async fn secret(&self, name: &str, key: &str) -> String {
        let s = Api::<Secret>::namespaced(self.cp.client(), &self.ns)
            .get(name)
            .await
            .unwrap();
        String::from_utf8(s.data.unwrap()[key].0.clone()).unwrap()
    }

    /// A key of a ConfigMap in the test namespace.
    pub async fn config_map(&self, name: &str, key: &str) -> String {
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(self.cp.client(), &self.ns)
            .get(name)
            .await
            .unwrap()
            .data
            .unwrap()[key]
            .clone()
    }

    /// `kubectl <args>` in the test namespace; panics with stderr when it fails. Async: the
    /// process kubelet runs on this test's runtime and must keep running meanwhile.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let mut cmd = self.cp.kubectl();
        cmd.arg("-n").arg(&self.ns).args(args);
        let out = tokio::process::Command::from(cmd).output().await.unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// What the namespace's pods, the nodes and the latest events say, for a failure message:
    /// a wait that timed out says where the pod got stuck (scheduling, sandbox, image, probe)
    /// even when the machine and its kept state are gone by the time anyone reads the log.
    ///
    /// Never hangs the failing test: each kubectl has 10 s.
    pub async fn describe(&self) -> String {
        let mut out = String::new();
        // Events by creation: the operator's and the scheduler's set `eventTime`, not
        // `lastTimestamp`, and would sort first. Only their tail: the latest say what is
        // happening now.
        for (args, tail) in [
            (&["get", "pods", "-o", "wide"][..], None),
            (&["get", "nodes", "-o", "wide"], None),
            (
                &["get", "events", "--sort-by=.metadata.creationTimestamp"],
                Some(60),
            ),
            (&["get", "rlc", "-o", "yaml"], None),
        ] {
            let mut cmd = self.cp.kubectl();
            cmd.arg("--request-timeout=10s")
                .arg("-n")
                .arg(&self.ns)
                .args(args);
            let mut cmd = tokio::process::Command::from(cmd);
            cmd.kill_on_drop(true);
            out.push_str(&format!("$ kubectl {}\n", args.join(" ")));
            match tokio::time::timeout(Duration::from_secs(15), cmd.output()).await {
                Ok(Ok(o)) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    let lines: Vec<&str> = text.lines().collect();
                    let from = tail.map_or(0, |n| lines.len().saturating_sub(n));
                    out.push_str(&lines[from..].join("\n"));
                    out.push_str(&String::from_utf8_lossy(&o.stderr));
                }
                Ok(Err(e)) => out.push_str(&format!("kubectl did not run: {e}")),
                Err(_) => out.push_str("kubectl gave no answer in 15 s"),
            }
            out.push('\n');
        }
        out
    }

    /// The login the client Secret gives (no `password` key with auth off: the `default`
    /// user has no password, so any is accepted).
    pub async fn client_login(&self, name: &str) -> Login {
        let s = Api::<Secret>::namespaced(self.cp.client(), &self.ns)
            .get(&format!("{name}-client"))
            .await
            .unwrap();
        let data = s.data.unwrap_or_default();
        let text = |key: &str| data.get(key).map(|v| String::from_utf8(v.0.clone()).unwrap());
        Login {
            user: text("username").expect("the client Secret names a user"),
            password: text("password").unwrap_or_default(),
        }
    }

    pub async fn admin_login(&self, name: &str) -> Login {
        Login {
            user: self.secret(&format!("{name}-admin"), "username").await,
            password: self.secret(&format!("{name}-admin"), "password").await,
        }
    }
}

pub async fn start_operator(cp: &ControlPlane, log: &str) -> OperatorProcess {
    start_operator_with(cp, log, &[]).await
}

pub async fn start_operator_with(cp: &ControlPlane, log: &str, args: &[&str]) -> OperatorProcess {
    start_operator_env(cp, log, args, &[]).await
}

/// A redis-server that runs under libfaketime (tests/tools/build-redis-libc.sh builds it once
/// and caches it outside the clone; `make test` runs it before the tests).
pub fn redis_under_faketime() -> std::path::PathBuf {
    let script = redlock_testenv::controlplane::repo_root().join("tests/tools/build-redis-libc.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run build-redis-libc.sh");
    assert!(out.status.success(), "build-redis-libc.sh failed");
    let path = String::from_utf8(out.stdout).unwrap();
    std::path::PathBuf::from(path.lines().last().expect("a path").trim())
}

/// Election timings of `start_replica`: short, so failover tests are fast; they obey the same
/// rules as the defaults.
pub const REPLICA_LEASE_SECONDS: u64 = 3;
pub const REPLICA_RETRY_MS: u64 = 300;
/// The Lease the replicas elect a leader with (the default name, in `default`).
pub const LEASE: &str = "redlock-operator";

/// An operator replica with leader election on, its own identity and short election timings;
/// `extra_args` and `env` (e.g. libfaketime's) on top.
pub async fn start_replica(
    env: &Env,
    identity: &str,
    extra_args: &[&str],
    vars: &[(String, String)],
) -> OperatorProcess {
    let identity_arg = format!("--leader-identity={identity}");
    let lease_arg = format!("--lease-duration-seconds={REPLICA_LEASE_SECONDS}");
    let retry_arg = format!("--lease-retry-period-ms={REPLICA_RETRY_MS}");
    let mut args = vec![
        identity_arg.as_str(),
        lease_arg.as_str(),
        "--lease-renew-deadline-ms=2000",
        retry_arg.as_str(),
    ];
    args.extend_from_slice(extra_args);
    start_operator_env(&env.cp, &format!("{identity}.log"), &args, vars).await
}

/// An operator with extra environment variables (libfaketime's: `redlock_testenv::operator::faketime_env`).
///
/// Every test's operator (this, `start_operator*`, `start_replica`, `Env`'s) runs as a
/// Deployment's pod would: when it exits on its own (its lease lost on a loaded machine, a
/// crash) it is started again with the kubelet's back-off, same flags, port and log
/// (`redlock_testenv::operator::deployment_restarts`). A test that kills it (`kill`,
/// `terminate`) or waits for its exit (`wait_exit`) ends that first, so the exit it causes or
/// exercises is final; `OperatorProcess::stop_restarting` says so without either.
pub async fn start_operator_env(
    cp: &ControlPlane,
    log: &str,
    args: &[&str],
    env: &[(String, String)],
) -> OperatorProcess {
    // Under its own name (with every permission), so the API server's audit log records each
    // of its requests (`operator_requests`).
    let kubeconfig = cp
        .kubeconfig_for_user(OPERATOR_USER, Some("system:masters"))
        .unwrap();
    let mut op = OperatorProcess::start_with_restarts(
        &operator_bin(),
        &kubeconfig,
        &cp.dir().join(log),
        args,
        env,
        deployment_restarts(),
    )
    .unwrap();
    op.wait_ready(Duration::from_secs(60)).await.unwrap();
    op
}

/// The API server's audit entries of requests received between `from` and `to`, one each
/// (`AUDIT_POLICY` in redlock_testenv: every request of the operator's user, and everyone's
/// requests for RedlockClusters).
pub fn audit_entries(cp: &ControlPlane, from: Timestamp, to: Timestamp) -> Vec<serde_json::Value> {
    let log = std::fs::read_to_string(cp.audit_log()).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            // One entry per stage (a watch has ResponseStarted and ResponseComplete): count one.
            e["stage"] == "ResponseComplete"
                && e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_some_and(|at| at >= from && at <= to)
        })
        .collect()
}

/// The operator's requests received between `from` and `to`, one audit entry each, from the
/// API server's audit log (which records every request of the operator's user).
pub fn operator_audit(cp: &ControlPlane, from: Timestamp, to: Timestamp) -> Vec<serde_json::Value> {
    audit_entries(cp, from, to)
        .into_iter()
        .filter(|e| e["user"]["username"] == OPERATOR_USER)
        .collect()
}

/// How many requests the operator sent with `verb` for `resource` (and object `name`, if
/// given) between `from` and `to` (`operator_audit`).
pub fn operator_requests(
    cp: &ControlPlane,
    verb: &str,
    resource: &str,
    name: Option<&str>,
    from: Timestamp,
    to: Timestamp,
) -> usize {
    operator_audit(cp, from, to)
        .iter()
        .filter(|e| {
            e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && name.is_none_or(|n| e["objectRef"]["name"] == n)
        })
        .count()
}

#[derive(Clone)]
pub struct Login {
    pub user: String,
    pub password: String,
}

/// A fresh connection logged in as `login` (errors include WRONGPASS for a fenced user).
/// Switches `login`'s user on behind the operator's back (`ACL SETUSER <user> on` on the admin
/// connection `admin`) and logs a client in while it is on, retrying a few times (the
/// operator may fence it again in between): the client's connection, and when the user was
/// last switched on.
pub async fn switch_on_and_log_in(
    admin: &mut redis::aio::MultiplexedConnection,
    ip: IpAddr,
    login: &Login,
) -> (redis::aio::MultiplexedConnection, Timestamp) {
    for _ in 0..5 {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&login.user)
            .arg("on")
            .query_async(admin)
            .await
            .expect("ACL SETUSER on");
        let turned_on = Timestamp::now();
        if let Ok(c) = connect(ip, login).await {
            return (c, turned_on);
        }
    }
    panic!("no client logged in while the user was on");
}

pub async fn connect(ip: IpAddr, login: &Login) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let info =
        redis::IntoConnectionInfo::into_connection_info(redis::ConnectionAddr::Tcp(ip.to_string(), 6379))?
            .set_redis_settings(
                redis::RedisConnectionInfo::default()
                    .set_username(&login.user)
                    .set_password(&login.password)
                    .set_skip_set_lib_name(),
            );
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_response_timeout(Some(Duration::from_millis(300)));
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// `SET key value NX PX ttl` as a Redlock client does; Ok(true) when the lock was taken here.
pub async fn lock(
    ip: IpAddr,
    login: &Login,
    key: &str,
    value: &str,
    ttl: Duration,
) -> redis::RedisResult<bool> {
    let mut c = connect(ip, login).await?;
    let r: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(&mut c)
        .await?;
    Ok(r.is_some())
}

/// Tries `SET` as the client every few ms until it works; returns when it first did.
pub async fn first_client_write(ip: IpAddr, login: &Login, timeout: Duration) -> Result<Timestamp> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(mut c) = connect(ip, login).await {
            let r: redis::RedisResult<()> = redis::cmd("SET").arg("probe").arg("1").query_async(&mut c).await;
            if r.is_ok() {
                return Ok(Timestamp::now());
            }
        }
        if Instant::now() > deadline {
            bail!("client could not write to {ip} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn wait_for<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Result<Option<T>>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => eprintln!("{what}: {e:#}"),
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (10 s at most) until `server` resolves to exactly `ips`, and returns its addresses: on
/// real nodes the EndpointSlices follow pod readiness with the endpointslice controller's
/// delay, so a check made the moment status changes could see the previous endpoints.
pub async fn resolves_to(
    resolver: &redlock_testenv::resolver::Resolver,
    server: &str,
    ips: &[IpAddr],
) -> Vec<std::net::SocketAddr> {
    wait_for(
        &format!("{server} resolving to {ips:?} ({:?})", resolver.source()),
        Duration::from_secs(10),
        async || {
            let addrs = resolver.resolve(server).await?;
            let found: Vec<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
            Ok((found == ips).then_some(addrs))
        },
    )
    .await
}

/// The member's `heldUntil`, once it is Held or Lost with a run id different from `old_run`.
pub async fn wait_held(env: &Env, name: &str, slot: i32, old_run: &str) -> (MemberStatus, Timestamp) {
    wait_for("member held", Duration::from_secs(20), async || {
        let m = env.member(name, slot).await.context("member")?;
        let held = matches!(
            m.state,
            redlock_operator::crd::MemberState::Held | redlock_operator::crd::MemberState::Lost
        ) && m.run_id.as_deref() != Some(old_run);
        Ok(held.then(|| {
            let until = m.held_until.as_ref().expect("held member has heldUntil").0;
            (m, until)
        }))
    })
    .await
}

/// Kills slot `slot`'s Redis process (SIGKILL, its container restarts) and waits until the
/// member is held: the record before the kill, and the held record with its `heldUntil`.
pub async fn kill_until_held(env: &Env, name: &str, slot: i32) -> (MemberStatus, MemberStatus, Timestamp) {
    let before = env.member(name, slot).await.expect("member on record");
    env.cp
        .nodes()
        .signal_pod(
            &env.ns,
            &format!("{name}-{slot}"),
            nix::sys::signal::Signal::SIGKILL,
        )
        .await
        .expect("signal the pod's process");
    let (held, until) = wait_held(env, name, slot, before.run_id.as_deref().expect("a run id")).await;
    (before, held, until)
}

/// One Redlock acquisition as the reference clients make it: `SET key value NX PX ttl` on
/// every address, a success when a majority took it within the TTL (minus 1 % drift); on
/// failure, the partial locks are released again (compare-and-delete). Returns how many
/// instances granted the lock and whether that made a valid Redlock lock.
pub async fn redlock_attempt(
    ips: &[IpAddr],
    login: &Login,
    key: &str,
    value: &str,
    ttl: Duration,
) -> (usize, bool) {
    let started = Instant::now();
    let tries = ips.iter().map(|ip| lock(*ip, login, key, value, ttl));
    let granted: Vec<IpAddr> = futures::future::join_all(tries)
        .await
        .into_iter()
        .zip(ips)
        .filter_map(|(r, ip)| matches!(r, Ok(true)).then_some(*ip))
        .collect();
    let drift = ttl / 100 + Duration::from_millis(2);
    let valid = granted.len() > ips.len() / 2 && started.elapsed() + drift < ttl;
    if !valid {
        for ip in &granted {
            if let Ok(mut c) = connect(*ip, login).await {
                let _: redis::RedisResult<i64> = redis::cmd("EVAL")
                    .arg(r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#)
                    .arg(1)
                    .arg(key)
                    .arg(value)
                    .query_async(&mut c)
                    .await;
            }
        }
    }
    (granted.len(), valid)
}

impl Env {
    /// The current pod IP of every slot `0..n` that has one.
    pub async fn member_ips(&self, name: &str, n: i32) -> Vec<IpAddr> {
        let mut ips = vec![];
        for slot in 0..n {
            if let Ok(pod) = self.pods().get(&format!("{name}-{slot}")).await
                && let Some(ip) = pod.status.and_then(|s| s.pod_ip).and_then(|ip| ip.parse().ok())
            {
                ips.push(ip);
            }
        }
        ips
    }

    /// `instances` members serving with maxLockTTL `ttl`: created at 2 s (so the first
    /// processes' holds are short), then raised, which applies at once.
    pub async fn serving_with_ttl(&self, name: &str, instances: i32, ttl: &str) {
        self.create_cluster(
            name,
            json!({"instances": instances, "maxLockTTL": "2s", "holdMargin": "0s"}),
        )
        .await;
        self.wait_ready(name, instances, Duration::from_secs(40)).await;
        self.patch_spec(name, json!({"maxLockTTL": ttl})).await;
        let want: Duration = ttl.parse::<kube::core::Duration>().unwrap().into();
        self.wait_hold(name, "raise in force and published", |h| {
            h.max_lock_ttl == want && h.published_max_lock_ttl == Some(want.into())
        })
        .await;
        self.wait_event("MaxLockTTLRaised").await;
    }

    /// A first client's lock on key `orders` on `slots`, with `ttl`; returns when it expires at
    /// the latest.
    pub async fn first_lock(&self, name: &str, slots: &[i32], ttl: Duration) -> Instant {
        let login = self.client_login(name).await;
        let taken = Instant::now();
        for slot in slots {
            let ip = self.pod_ip(name, *slot).await;
            assert!(
                lock(ip, &login, "orders", "first-holder", ttl).await.unwrap(),
                "slot {slot}"
            );
        }
        taken + ttl
    }

    /// `node` is cut off from the API server (its kubelet silent, its processes serving: either
    /// runtime) and cordoned, so a replacement goes elsewhere.
    pub async fn partition_and_cordon(&self, node: &str) {
        self.cp.nodes().partition_node(node).unwrap();
        Api::<k8s_openapi::api::core::v1::Node>::all(self.cp.client())
            .patch(
                node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
    }

    /// The node slot `slot`'s pod is bound to.
    pub async fn node_of(&self, name: &str, slot: i32) -> String {
        self.pods()
            .get(&format!("{name}-{slot}"))
            .await
            .unwrap()
            .spec
            .and_then(|s| s.node_name)
            .expect("the pod is bound to a node")
    }

    /// Slot `slot`'s record, once `f` accepts it.
    pub async fn wait_member(
        &self,
        name: &str,
        slot: i32,
        what: &str,
        timeout: Duration,
        f: impl Fn(&MemberStatus) -> bool,
    ) -> MemberStatus {
        wait_for(what, timeout, async || {
            Ok(self.member(name, slot).await.filter(|m| f(m)))
        })
        .await
    }

    /// The identity holding the operators' leader Lease, if any.
    pub async fn lease_holder(&self) -> Option<String> {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(self.cp.client(), "default")
            .get_opt(LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// A second client tries, every 50 ms until `until`, to take a Redlock lock on `key` over
    /// all N members while the first holder's lock is still valid: panics if it ever gets one.
    /// Returns what the attempts covered, for [`Attempts::assert_cover`].
    pub async fn no_second_holder_until(
        &self,
        name: &str,
        n: i32,
        key: &str,
        ttl: Duration,
        until: Instant,
    ) -> Attempts {
        let login = self.client_login(name).await;
        let started = Instant::now();
        let mut tried = Attempts {
            count: 0,
            window: until.saturating_duration_since(started),
            longest_gap: Duration::ZERO,
        };
        let mut last = started;
        while Instant::now() < until {
            let ips = self.member_ips(name, n).await;
            let (granted, valid) = redlock_attempt(&ips, &login, key, "second-holder", ttl).await;
            tried.count += 1;
            assert!(
                !valid || Instant::now() >= until,
                "a second client got a majority ({granted} of {n}) {:?} before the first lock expired",
                until.saturating_duration_since(Instant::now())
            );
            let now = Instant::now();
            tried.longest_gap = tried.longest_gap.max(now - last);
            last = now;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tried
    }

    /// The cluster's `status.hold`, once `f` accepts it.
    pub async fn wait_hold(
        &self,
        name: &str,
        what: &str,
        f: impl Fn(&redlock_operator::crd::HoldPolicy) -> bool,
    ) -> redlock_operator::crd::HoldPolicy {
        wait_for(what, Duration::from_secs(20), async || {
            let c = self.cluster(name).await;
            Ok(c.status.and_then(|s| s.hold).filter(|h| f(h)))
        })
        .await
    }

    /// Confirms a scale-up the way a user does: with the token the `Resizing` condition names
    /// (`status.confirmationToken`), once every client uses the new list.
    pub async fn confirm_resize(&self, name: &str) {
        let token = wait_for("confirmation token", Duration::from_secs(20), async || {
            Ok(self.cluster(name).await.status.and_then(|s| s.confirmation_token))
        })
        .await;
        self.kubectl(&[
            "annotate",
            "--overwrite",
            "rlc",
            name,
            &format!(
                "{}={token}",
                redlock_operator::decide::resize::CLIENTS_USE_INSTANCES
            ),
        ])
        .await;
    }

    /// Waits until an event with `reason` is published in the namespace (events follow the
    /// status write they belong to).
    pub async fn wait_event(&self, reason: &str) {
        wait_for(&format!("event {reason}"), Duration::from_secs(10), async || {
            Ok(self.has_event(reason).await.then_some(()))
        })
        .await;
    }

    /// Whether an event with `reason` was published in the namespace.
    pub async fn has_event(&self, reason: &str) -> bool {
        let list: kube::api::ObjectList<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.cp.client(), &self.ns)
                .list(&Default::default())
                .await
                .unwrap();
        list.items.iter().any(|e| e.reason.as_deref() == Some(reason))
    }
}

/// The shell lines between the README's `install-steps` markers.
pub fn install_steps() -> Vec<String> {
    readme_block("install-steps")
}

/// The shell lines between the README's `tour-steps` markers (the five-minute tour).
pub fn tour_steps() -> Vec<String> {
    readme_block("tour-steps")
}

/// The lines of the ```sh block between `<!-- {marker}` and `<!-- /{marker} -->`: blank and
/// comment-only lines dropped, trailing `# ...` remarks kept (the shell ignores them).
fn readme_block(marker: &str) -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let start = readme
        .find(&format!("<!-- {marker}"))
        .unwrap_or_else(|| panic!("README has a {marker} block"));
    let end = readme[start..]
        .find(&format!("<!-- /{marker} -->"))
        .unwrap_or_else(|| panic!("{marker} block is closed"))
        + start;
    let block = &readme[start..end];
    let code = block
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(code, _)| code)
        .unwrap_or_else(|| panic!("{marker} holds a ```sh block"));
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// `redis://user:password@host:port` → (login, host:port).
pub fn parse_url(url: &str) -> (Login, String) {
    let rest = url.strip_prefix("redis://").expect("redis:// URL");
    let (userinfo, hostport) = rest.rsplit_once('@').expect("URL has credentials");
    let (user, password) = userinfo.split_once(':').expect("user:password");
    (
        Login {
            user: user.into(),
            password: password.into(),
        },
        hostport.into(),
    )
}

/// One README line under `sh`, from the repository root, with the control plane's kubeconfig
/// and the locally built kubectl and helm first on PATH.
pub async fn readme_step(cp: &ControlPlane, line: &str) -> std::process::Output {
    let path = format!(
        "{}:{}",
        redlock_testenv::controlplane::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let helm_home = cp.dir().join("helm");
    tokio::process::Command::new("sh")
        .args(["-ec", line])
        .current_dir(redlock_testenv::controlplane::repo_root())
        .env("KUBECONFIG", cp.kubeconfig())
        .env("KUBECACHEDIR", cp.kube_cache_dir())
        .env("PATH", path)
        .env("HELM_CACHE_HOME", helm_home.join("cache"))
        .env("HELM_CONFIG_HOME", helm_home.join("config"))
        .env("HELM_DATA_HOME", helm_home.join("data"))
        .output()
        .await
        .unwrap()
}

/// The value of `series` (a metric name, or a name with its labels as the operator writes
/// them: `name{namespace="ns",cluster="locks"}`) in a `/metrics` body.
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(series) && matches!(l[series.len()..].chars().next(), Some(' ' | '{')))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
}

/// A cluster's counter `name` (`redlock_..._total`) as the env's operator exports it; 0 before
/// the operator first counted anything for the cluster.
pub async fn cluster_counter(env: &Env, name: &str, cluster: &str) -> f64 {
    let (_, body) = env.operator.get("/metrics").await.unwrap();
    metric_value(
        &body,
        &format!("{name}{{namespace=\"{}\",cluster=\"{cluster}\"}}", env.ns),
    )
    .unwrap_or(0.0)
}

/// A released process served its first client at `served`: not before `until` (its
/// `heldUntil`), and at most 1 s after it.
pub fn assert_released_on_time(until: Timestamp, served: Timestamp) {
    let late = served.duration_since(until);
    assert!(
        late >= SignedDuration::ZERO,
        "served {} before heldUntil {until}",
        served
    );
    assert!(
        late <= SignedDuration::from_secs(1),
        "served {late:?} after heldUntil (limit 1s)"
    );
}

/// How a second client tried the lock while the first was valid
/// ([`Env::no_second_holder_until`]).
#[derive(Debug, Clone, Copy)]
pub struct Attempts {
    /// Attempts made.
    pub count: usize,
    /// From the first attempt to the first lock's expiry.
    pub window: Duration,
    /// The longest time between the ends of two attempts (or the start and the first end).
    pub longest_gap: Duration,
}

impl Attempts {
    /// Panics unless the attempts covered at least `min` of the first lock's validity with no
    /// gap over 2 s: judged in time, not in a count, so a slow machine (each attempt
    /// reads pods and connects to every member) cannot fail it while a check that stopped
    /// early or started too late still does.
    pub fn assert_cover(&self, min: Duration) {
        assert!(
            self.window >= min && self.longest_gap <= Duration::from_secs(2) && self.count >= 2,
            "the second client's attempts did not cover {min:?} of the first lock's validity: {self}"
        );
    }
}

impl std::fmt::Display for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} attempts over {:?}, at most {:?} apart",
            self.count, self.window, self.longest_gap
        )
    }
}
