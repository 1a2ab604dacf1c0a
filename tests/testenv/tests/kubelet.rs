//! The process kubelet against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler from `tests/controlplane/build.sh`).
//!
//! Each test starts its own control plane and drops it at the end, which kills every
//! process. Run with `--test-threads=1` on small machines.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction, Node,
    ObjectFieldSelector, Pod, PodSpec, Probe, Secret, SecretVolumeSource, Volume, VolumeMount,
};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use nix::sys::signal::Signal;
use redlock_testenv::{ControlPlane, ControlPlaneConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn control_plane(nodes: usize) -> ControlPlane {
    init_tracing();
    ControlPlane::start(ControlPlaneConfig {
        nodes,
        // This file tests the process kubelet itself, whatever the run's default nodes.
        real_nodes: false,
        ..Default::default()
    })
    .await
    .expect("control plane starts")
}

fn redis_container(image: &str) -> Container {
    Container {
        name: "redis".into(),
        image: Some(image.into()),
        ports: Some(vec![ContainerPort {
            container_port: 6379,
            name: Some("redis".into()),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn pod(name: &str, container: Container, volumes: Vec<Volume>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: (!volumes.is_empty()).then_some(volumes),
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Polls the pod until `ok` holds; the error shows the last status seen.
async fn wait_pod(api: &Api<Pod>, name: &str, timeout: Duration, ok: impl Fn(&Pod) -> bool) -> Result<Pod> {
    let deadline = Instant::now() + timeout;
    loop {
        let pod = api.get_opt(name).await?;
        if let Some(p) = &pod
            && ok(p)
        {
            return Ok(pod.expect("checked"));
        }
        if Instant::now() > deadline {
            bail!(
                "pod {name} not as expected within {timeout:?}; last seen status: {}",
                serde_json::to_string_pretty(&pod.map(|p| p.status)).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod has an IP")
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

fn process_alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

/// A RESP reply, just enough for these tests.
#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Reply>),
}

fn parse_reply(buf: &[u8]) -> Option<(Reply, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..end]).ok()?;
    let rest = end + 2;
    match buf.first()? {
        b'+' => Some((Reply::Simple(line.into()), rest)),
        b'-' => Some((Reply::Error(line.into()), rest)),
        b':' => Some((Reply::Int(line.parse().ok()?), rest)),
        b'$' => {
            let len: i64 = line.parse().ok()?;
            if len < 0 {
                return Some((Reply::Bulk(None), rest));
            }
            let len = len as usize;
            if buf.len() < rest + len + 2 {
                return None;
            }
            let s = String::from_utf8_lossy(&buf[rest..rest + len]).into_owned();
            Some((Reply::Bulk(Some(s)), rest + len + 2))
        }
        b'*' => {
            let n: i64 = line.parse().ok()?;
            let mut items = Vec::new();
            let mut at = rest;
            for _ in 0..n.max(0) {
                let (item, used) = parse_reply(&buf[at..])?;
                items.push(item);
                at += used;
            }
            Some((Reply::Array(items), at))
        }
        _ => None,
    }
}

/// A Redis connection over plain TCP.
struct Redis(tokio::net::TcpStream);

impl Redis {
    /// Connects, retrying for a few seconds: without a readiness probe a pod is Ready as
    /// soon as its process runs, which can be before Redis listens.
    async fn connect(ip: &str, port: u16) -> Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let attempt =
                tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect((ip, port)));
            match attempt.await {
                Ok(Ok(stream)) => return Ok(Self(stream)),
                other if Instant::now() > deadline => bail!("connect {ip}:{port}: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn cmd(&mut self, args: &[&str]) -> Result<Reply> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.0.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some((reply, _)) = parse_reply(&buf) {
                return Ok(reply);
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline.into(), self.0.read(&mut chunk))
                .await
                .context("reply timeout")??;
            if n == 0 {
                bail!("connection closed");
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn run_id(&mut self) -> Result<String> {
        match self.cmd(&["INFO", "server"]).await? {
            Reply::Bulk(Some(info)) => info
                .lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .map(|s| s.trim().to_string())
                .context("no run_id"),
            other => bail!("INFO: {other:?}"),
        }
    }
}

async fn running_redis(cp: &ControlPlane, ns: &str, p: Pod) -> Pod {
    let api: Api<Pod> = Api::namespaced(cp.client(), ns);
    let name = p.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &p).await.expect("create pod");
    wait_pod(&api, &name, Duration::from_secs(30), |p| {
        phase(p) == "Running" && is_ready(p)
    })
    .await
    .expect("pod Running and Ready")
}

#[tokio::test]
async fn redis_pod_runs_and_answers_ping_on_its_own_address() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let pod = running_redis(&cp, &ns, pod("r", redis_container("redis:7.4"), vec![])).await;
    let ip = pod_ip(&pod);
    let block = cp.ip_block();
    assert!(ip.starts_with(&format!("127.{block}.")), "{ip}");
    let status = pod.status.as_ref().unwrap();
    assert_eq!(
        status.host_ip.as_deref(),
        Some(format!("127.{block}.0.1").as_str())
    );
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    assert!(cs.ready && cs.started == Some(true) && cs.state.as_ref().unwrap().running.is_some());
    let pid = cp.kubelet().pid(&ns, "r").expect("main pid");
    assert_eq!(
        cs.container_id.as_deref(),
        Some(format!("process://{pid}").as_str())
    );

    let mut redis = Redis::connect(&ip, 6379).await.unwrap();
    assert_eq!(redis.cmd(&["PING"]).await.unwrap(), Reply::Simple("PONG".into()));

    // Nothing to report, nothing written: the status stays as it is.
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let rv = api.get("r").await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        api.get("r").await.unwrap().metadata.resource_version,
        rv,
        "no status churn"
    );
    drop(cp);
    assert!(!process_alive(pid), "control plane drop kills the pod's process");
}

/// The node lifecycle controller marks a late node's pods not Ready, and under load an older
/// status write can land after a newer one. Like the real kubelet's status manager, the
/// process kubelet sees the API's copy disagree with what it last wrote and writes its own
/// again (within its 10 s check), so a pod does not stay not Ready with every container ready.
#[tokio::test]
async fn a_status_changed_behind_the_kubelets_back_is_written_again() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    running_redis(&cp, &ns, pod("r", redis_container("redis:7.4"), vec![])).await;
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    // As the node lifecycle controller does (MarkPodsNotReady): Ready False, containers ready.
    let not_ready = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
    ]}});
    api.patch_status(
        "r",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(not_ready),
    )
    .await
    .unwrap();
    assert!(!is_ready(&api.get("r").await.unwrap()), "the patch took");
    let marked = Instant::now();
    wait_pod(&api, "r", Duration::from_secs(25), is_ready)
        .await
        .expect("the kubelet writes Ready back");
    println!("Ready again {:?} after it was marked not Ready", marked.elapsed());
}

#[tokio::test]
async fn kill_9_restarts_the_container_with_a_new_process() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let pod = running_redis(&cp, &ns, pod("r", redis_container("redis:7.4"), vec![])).await;
    let ip = pod_ip(&pod);
    let old_pid = cp.kubelet().pid(&ns, "r").unwrap();
    let old_run_id = Redis::connect(&ip, 6379).await.unwrap().run_id().await.unwrap();

    cp.kubelet().signal_pod(&ns, "r", Signal::SIGKILL).unwrap();
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let pod = wait_pod(&api, "r", Duration::from_secs(30), |p| {
        restart_count(p) == 1 && is_ready(p)
    })
    .await
    .unwrap();
    let cs = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    let last = cs
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .expect("lastState.terminated");
    assert_eq!((last.exit_code, last.signal), (137, Some(9)));
    assert!(last.finished_at.is_some());
    let new_pid = cp.kubelet().pid(&ns, "r").unwrap();
    assert_ne!(new_pid, old_pid);
    assert_eq!(pod_ip(&pod), ip, "same pod, same address");
    let new_run_id = Redis::connect(&ip, 6379).await.unwrap().run_id().await.unwrap();
    assert_ne!(new_run_id, old_run_id, "a fresh, empty Redis");
}

#[tokio::test]
async fn deleting_a_pod_stops_its_process_and_removes_the_object() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    running_redis(&cp, &ns, pod("r", redis_container("redis:7.4"), vec![])).await;
    let pid = cp.kubelet().pid(&ns, "r").unwrap();
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    api.delete("r", &DeleteParams::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get_opt("r").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "pod object still there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!process_alive(pid), "process gone");
    assert_eq!(cp.kubelet().pid(&ns, "r"), None);

    // A force delete (grace 0) kills at once.
    running_redis(&cp, &ns, pod("f", redis_container("redis:7.4"), vec![])).await;
    let pid = cp.kubelet().pid(&ns, "f").unwrap();
    cp.kubelet().signal_pod(&ns, "f", Signal::SIGSTOP).unwrap(); // would ignore SIGTERM
    api.delete("f", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "force-deleted pod's process still alive"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while cp.kubelet().process_count() != 0 {
        assert!(
            Instant::now() < deadline,
            "processes left: {}",
            cp.kubelet().process_count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn node_ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn a_lost_node_becomes_not_ready_and_its_processes_die() {
    let cp = control_plane(2).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let pod = running_redis(&cp, &ns, pod("r", redis_container("redis:7.4"), vec![])).await;
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    let pid = cp.kubelet().pid(&ns, "r").unwrap();

    cp.kubelet().lose_node(&node).await.unwrap();
    assert!(!process_alive(pid), "processes of a lost node are killed at once");
    let nodes: Api<Node> = Api::all(cp.client());
    let started = Instant::now();
    loop {
        let n = nodes.get(&node).await.unwrap();
        if node_ready(&n).as_deref() != Some("True") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "node {node} still Ready"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("node NotReady after {:?}", started.elapsed());
    assert_eq!(cp.kubelet().pid(&ns, "r"), None, "not restarted while lost");

    // Back again: Ready, and the pod is either running again or (evicted meanwhile) removed.
    cp.kubelet().restore_node(&node).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = node_ready(&nodes.get(&node).await.unwrap());
        if ready.as_deref() == Some("True") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node not Ready after restore: {ready:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.get_opt("r").await.unwrap() {
            None => break,
            Some(p) if p.metadata.deletion_timestamp.is_none() && is_ready(&p) && phase(&p) == "Running" => {
                assert!(restart_count(&p) >= 1, "the node-loss kill counts as a restart");
                let new_pid = cp.kubelet().pid(&ns, "r").unwrap();
                assert_ne!(new_pid, pid);
                break;
            }
            Some(_) => {}
        }
        assert!(Instant::now() < deadline, "pod neither running again nor removed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Lost long enough, its pods are evicted (deleted) by the taint manager but stay
    // Terminating while nobody runs the node; a kubelet coming back finalises them.
    if api.get_opt("r").await.unwrap().is_some() {
        cp.kubelet().lose_node(&node).await.unwrap();
        wait_pod(&api, "r", Duration::from_secs(90), |p| {
            p.metadata.deletion_timestamp.is_some()
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            api.get_opt("r").await.unwrap().is_some(),
            "a lost node's pod is not finalised"
        );
        cp.kubelet().restore_node(&node).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.get_opt("r").await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "evicted pod not removed after restore");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(cp.kubelet().pid(&ns, "r"), None);
    }
}

#[tokio::test]
async fn an_unknown_image_waits_with_a_clear_reason() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let mut c = redis_container("nginx:1.27");
    c.name = "web".into();
    api.create(&PostParams::default(), &pod("web", c, vec![]))
        .await
        .unwrap();
    let waiting_reason = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.clone())
    };
    let pod = wait_pod(&api, "web", Duration::from_secs(30), |p| {
        waiting_reason(p).is_some_and(|w| w.reason.as_deref() == Some("ImageNotMapped"))
    })
    .await
    .unwrap();
    let message = waiting_reason(&pod).unwrap().message.unwrap();
    assert!(
        message.contains("nginx:1.27") && message.contains("redis"),
        "{message}"
    );
    assert_eq!(phase(&pod), "Pending");
    assert!(!is_ready(&pod));
}

#[tokio::test]
async fn config_map_and_secret_volumes_reach_the_process() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let client = cp.client();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("redis-config".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "redis.conf".to_string(),
            "maxclients 77\nprotected-mode no\ninclude /etc/redis/secret/auth.conf\n".to_string(),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("redis-auth".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(b"requirepass s3cret\n".to_vec()),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let mut c = redis_container("docker.io/library/redis:7.2-alpine");
    c.command = Some(vec!["redis-server".into(), "/etc/redis/redis.conf".into()]);
    c.volume_mounts = Some(vec![
        VolumeMount {
            name: "config".into(),
            mount_path: "/etc/redis/redis.conf".into(),
            sub_path: Some("redis.conf".into()),
            ..Default::default()
        },
        VolumeMount {
            name: "auth".into(),
            mount_path: "/etc/redis/secret".into(),
            read_only: Some(true),
            ..Default::default()
        },
    ]);
    let volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "redis-config".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "auth".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("redis-auth".into()),
                items: Some(vec![k8s_openapi::api::core::v1::KeyToPath {
                    key: "password".into(),
                    path: "auth.conf".into(),
                    mode: Some(0o400),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    // No readiness probe: Ready as soon as it runs; then check what the process loaded.
    let pod = running_redis(&cp, &ns, pod("r", c, volumes)).await;
    let mut redis = Redis::connect(&pod_ip(&pod), 6379).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match redis.cmd(&["PING"]).await {
            Ok(Reply::Error(e)) if e.starts_with("NOAUTH") => break,
            other => assert!(Instant::now() < deadline, "expected NOAUTH, got {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        redis.cmd(&["AUTH", "s3cret"]).await.unwrap(),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        redis.cmd(&["CONFIG", "GET", "maxclients"]).await.unwrap(),
        Reply::Array(vec![
            Reply::Bulk(Some("maxclients".into())),
            Reply::Bulk(Some("77".into()))
        ])
    );
    // The mounts are private to the container: the host path is at most an empty placeholder.
    let host = std::fs::read_to_string("/etc/redis/redis.conf").unwrap_or_default();
    assert!(!host.contains("maxclients 77"), "mount leaked to the host");
}

#[tokio::test]
async fn an_exec_readiness_probe_with_downward_api_env_gates_readiness() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let mut c = redis_container("valkey/valkey:8");
    c.env = Some(vec![EnvVar {
        name: "POD_IP".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    c.readiness_probe = Some(Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "redis-cli -h \"$POD_IP\" ping | grep -q PONG".into(),
            ]),
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    });
    let started = Instant::now();
    running_redis(&cp, &ns, pod("r", c, vec![])).await;
    eprintln!("Ready after {:?}", started.elapsed());

    // A stopped process cannot answer: the probe times out and the pod turns unready;
    // SIGCONT brings it back.
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    cp.kubelet().signal_pod(&ns, "r", Signal::SIGSTOP).unwrap();
    wait_pod(&api, "r", Duration::from_secs(15), |p| !is_ready(p))
        .await
        .unwrap();
    cp.kubelet().signal_pod(&ns, "r", Signal::SIGCONT).unwrap();
    let pod = wait_pod(&api, "r", Duration::from_secs(15), is_ready)
        .await
        .unwrap();
    assert_eq!(restart_count(&pod), 0, "readiness never restarts");
}

#[test]
fn resp_parser() {
    assert_eq!(parse_reply(b"+PONG\r\n"), Some((Reply::Simple("PONG".into()), 7)));
    assert_eq!(
        parse_reply(b"$2\r\nhi\r\n").map(|r| r.0),
        Some(Reply::Bulk(Some("hi".into())))
    );
    assert_eq!(parse_reply(b"$5\r\nhi"), None);
    assert_eq!(
        parse_reply(b"*2\r\n:1\r\n$-1\r\n").map(|r| r.0),
        Some(Reply::Array(vec![Reply::Int(1), Reply::Bulk(None)]))
    );
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test]
async fn init_containers_run_first_and_restart_policies_apply() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let shell = |name: &str, script: &str| Container {
        name: name.into(),
        image: Some("redis:7.4".into()),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        volume_mounts: Some(vec![VolumeMount {
            name: "work".into(),
            mount_path: "/work".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let work = Volume {
        name: "work".into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    };

    // restartPolicy Never: the init container's file is there for the main container.
    let mut once = pod(
        "once",
        shell("main", "test \"$(cat /work/marker)\" = init"),
        vec![work.clone()],
    );
    let spec = once.spec.as_mut().unwrap();
    spec.restart_policy = Some("Never".into());
    spec.init_containers = Some(vec![shell("init", "echo init > /work/marker")]);
    api.create(&PostParams::default(), &once).await.unwrap();
    let done = wait_pod(&api, "once", Duration::from_secs(30), |p| phase(p) == "Succeeded")
        .await
        .unwrap();
    let status = done.status.unwrap();
    let init = &status.init_container_statuses.unwrap()[0];
    assert_eq!(
        init.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("Completed")
    );

    // restartPolicy Always: a crashing container is restarted with growing back-off.
    let crash = pod("crash", shell("main", "exit 3"), vec![work]);
    api.create(&PostParams::default(), &crash).await.unwrap();
    let p = wait_pod(&api, "crash", Duration::from_secs(30), |p| {
        restart_count(p) >= 2 && waiting_reason(p).as_deref() == Some("CrashLoopBackOff")
    })
    .await
    .unwrap();
    let cs = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        3
    );
    assert_eq!(
        phase(&p),
        "Running",
        "a crash-looping pod with restartPolicy Always stays Running"
    );
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container() {
    let cp = control_plane(1).await;
    let ns = cp.new_namespace("kubelet").await.unwrap();
    let mut c = redis_container("redis:7.4");
    c.liveness_probe = Some(Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                // `$(POD_IP)` is expanded by the kubelet, as for commands.
                "redis-cli -h $(POD_IP) ping | grep -q PONG".into(),
            ]),
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(2),
        ..Default::default()
    });
    c.env = Some(vec![EnvVar {
        name: "POD_IP".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    running_redis(&cp, &ns, pod("r", c, vec![])).await;
    let old_pid = cp.kubelet().pid(&ns, "r").unwrap();
    cp.kubelet().signal_pod(&ns, "r", Signal::SIGSTOP).unwrap();
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let p = wait_pod(&api, "r", Duration::from_secs(30), |p| {
        restart_count(p) == 1 && is_ready(p)
    })
    .await
    .unwrap();
    assert_ne!(cp.kubelet().pid(&ns, "r").unwrap(), old_pid);
    assert!(!process_alive(old_pid));
    assert_eq!(phase(&p), "Running");
}
