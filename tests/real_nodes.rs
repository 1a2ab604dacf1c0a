//! The operator on real nodes: kubelet v1.37, containerd 2.x, runc, CNI bridges and
//! kube-proxy, Redis in containers from images built here (tests/nodes). Runs inside the
//! run's own network, mount and PID namespaces, so it has its own `main` (harness = false):
//! it re-executes itself there first, then runs the tests one after another. What only real
//! nodes have: container restarts, the version matrix, a container that outlives its pod, a
//! machine that dies and boots, the operator image in-cluster. `make test` runs every other
//! test binary on real nodes too (tests/safety.rs has the short safety run).
//!
//! `cargo test --test real_nodes -- FILTER` runs the tests whose name contains FILTER.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams};
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use redlock_testenv::{ControlPlaneConfig, NodeImages};
use serde_json::json;

const NAME: &str = "locks";

type TestFn = fn() -> Pin<Box<dyn Future<Output = ()>>>;

const TESTS: &[(&str, TestFn)] = &[
    (
        "kill_9_in_a_container_holds_the_restarted_process_until_held_until",
        || Box::pin(kill_9_in_a_container_holds_the_restarted_process_until_held_until()),
    ),
    ("every_image_locks_holds_and_releases", || {
        Box::pin(every_image_locks_holds_and_releases())
    }),
    (
        "a_container_that_outlives_its_force_deleted_pod_is_fenced_before_its_replacement_serves",
        || {
            Box::pin(
                a_container_that_outlives_its_force_deleted_pod_is_fenced_before_its_replacement_serves(),
            )
        },
    ),
    (
        "a_node_that_dies_and_boots_again_holds_its_members_new_processes",
        || Box::pin(a_node_that_dies_and_boots_again_holds_its_members_new_processes()),
    ),
    (
        "services_follow_their_pods_after_the_node_kube_proxy_runs_as_is_deleted",
        || Box::pin(services_follow_their_pods_after_the_node_kube_proxy_runs_as_is_deleted()),
    ),
    ("readme_install_runs_the_operator_image_in_cluster", || {
        Box::pin(readme_install_runs_the_operator_image_in_cluster())
    }),
    (
        "a_control_planes_nodes_reach_its_api_server_and_nothing_else_of_the_run",
        || Box::pin(a_control_planes_nodes_reach_its_api_server_and_nothing_else_of_the_run()),
    ),
];

/// The images of the version matrix (tests/nodes/images.sh builds each from Debian packages,
/// redis:6.2 from source with Debian's libraries); docs/development.md "Tested versions" lists them.
const IMAGES: &[(&str, &str)] = &[
    ("r62", "redis:6.2"),
    ("r70", "redis:7.0"),
    ("r80", "redis:8.0"),
    ("v81", "valkey/valkey:8.1"),
    ("v91", "valkey/valkey:9.1"),
];

fn main() -> ExitCode {
    if let Err(e) = redlock_testenv::nodes::namespace::enter() {
        eprintln!("cannot enter the run's namespaces: {e:#}");
        return ExitCode::FAILURE;
    }
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let selected: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests (real nodes, one at a time)", selected.len());
    let mut failed = Vec::new();
    for (name, test) in selected {
        let started = Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        // A panicking test drops its environment (every process, mount and cgroup) on unwind.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(test())));
        drop(runtime);
        let secs = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => println!("test {name} ... ok ({secs:.1}s)"),
            Err(_) => {
                println!("test {name} ... FAILED ({secs:.1}s)");
                failed.push(*name);
            }
        }
    }
    if failed.is_empty() {
        println!("\ntest result: ok");
        ExitCode::SUCCESS
    } else {
        println!("\nfailures: {failed:?}\ntest result: FAILED");
        ExitCode::FAILURE
    }
}

/// Five real nodes in three zones, as the process kubelet's tests use.
async fn real_env() -> Env {
    Env::start_config(
        ControlPlaneConfig {
            nodes: 5,
            real_nodes: true,
            // The version matrix runs every image.
            node_images: NodeImages::All,
            ..Default::default()
        },
        &[],
    )
    .await
}

/// Debian's redis 7.0 in a container; hold = 3s + ceil(3s × 0.01) + 0.5s = 3.53s.
fn spec() -> serde_json::Value {
    json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "500ms", "image": "redis:7.0"})
}

/// The lifecycle rule on a real container: kill -9 of redis-server (found through
/// containerd) is restarted by the kubelet in the same pod, and the new process serves no
/// client until its `heldUntil`, then at once. The Service's EndpointSlice (the real
/// controller's) drops the member while it is held.
async fn kill_9_in_a_container_holds_the_restarted_process_until_held_until() {
    let env = real_env().await;
    env.create_cluster(NAME, spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(120)).await;
    let client = env.client_login(NAME).await;
    let before = env.member(NAME, 0).await.unwrap();
    let ip = env.pod_ip(NAME, 0).await;
    assert!(ip.to_string().starts_with("10."), "a real pod IP: {ip}");
    lock(ip, &client, "warmup", "a", Duration::from_secs(1))
        .await
        .expect("the ready member serves a client in its container");

    let old_pid = env
        .cp
        .real_nodes()
        .pid(&env.ns, &format!("{NAME}-0"))
        .await
        .unwrap();
    kill_9_then_held_and_released(&env, NAME, 0, &client).await;
    let after = env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let m = after
        .status
        .unwrap()
        .members
        .into_iter()
        .find(|m| m.slot == 0)
        .unwrap();
    assert_eq!(m.state, MemberState::Ready);
    assert_ne!(m.run_id, before.run_id, "a new process serves");
    let new_pid = env
        .cp
        .real_nodes()
        .pid(&env.ns, &format!("{NAME}-0"))
        .await
        .unwrap();
    assert_ne!(new_pid, old_pid, "the kubelet restarted the container");

    // The real endpointslice controller publishes the members' pod IPs.
    let slices = Api::<EndpointSlice>::namespaced(env.cp.client(), &env.ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let addresses: Vec<String> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    assert!(addresses.contains(&ip.to_string()), "{addresses:?}");
}

/// kill -9 of a member's process in its container: the member is held, its new process
/// refuses lock clients until `heldUntil` and serves them at most 1 s after it. Returns how
/// late after `heldUntil` it served.
async fn kill_9_then_held_and_released(env: &Env, name: &str, slot: i32, client: &Login) -> SignedDuration {
    let before = env.member(name, slot).await.unwrap();
    let ip = env.pod_ip(name, slot).await;
    env.cp
        .real_nodes()
        .signal_pod(&env.ns, &format!("{name}-{slot}"), Signal::SIGKILL)
        .await
        .unwrap();
    let (_, until) = wait_held(env, name, slot, before.run_id.as_deref().unwrap()).await;
    let refused = lock(ip, client, "res", "b", Duration::from_secs(1)).await;
    assert!(
        refused.is_err() || Timestamp::now() >= until,
        "{name}: the fenced process accepted a client: {refused:?}"
    );
    let served = first_client_write(ip, client, Duration::from_secs(30))
        .await
        .unwrap();
    assert_released_on_time(until, served);
    served.duration_since(until)
}

/// The version matrix: on every image, a cluster's ready members serve a lock client (and only
/// as the client user: `default` is off, and the client user may not change what the hold
/// rule depends on), and kill -9 of a member's process is held until `heldUntil`, then
/// released at once. One control plane, one cluster per image, side by side.
async fn every_image_locks_holds_and_releases() {
    let env = real_env().await;
    // `busy-reply-threshold` is 7.0's name: every image must still start (redis.conf says
    // `lua-time-limit`, which all of them read) and take the value.
    for (name, image) in IMAGES {
        env.create_cluster(
            name,
            json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "500ms", "image": image,
                   "redisConfig": {"busy-reply-threshold": "4321"}}),
        )
        .await;
    }
    // And one the nodes cannot pull (they reach no registry; `redis:7.4` is not built here).
    env.create_cluster(
        "nopull",
        json!({"instances": 1, "maxLockTTL": "3s", "image": "redis:7.4"}),
    )
    .await;
    for (name, image) in IMAGES {
        env.wait_ready(name, 3, Duration::from_secs(180)).await;
        let client = env.client_login(name).await;
        let ip = env.pod_ip(name, 0).await;
        assert_eq!(
            lock(ip, &client, "orders", "a", Duration::from_secs(5))
                .await
                .ok(),
            Some(true),
            "{image}: a ready member grants a lock"
        );
        let mut as_client = connect(ip, &client).await.unwrap();
        let refused: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query_async(&mut as_client)
            .await;
        let err = refused.expect_err("the client user may not CONFIG SET");
        assert!(
            err.to_string().to_lowercase().contains("permission"),
            "{image}: {err:?}"
        );
        let anonymous = Login {
            user: "default".into(),
            password: String::new(),
        };
        assert!(
            lock(ip, &anonymous, "orders", "b", Duration::from_secs(1))
                .await
                .is_err(),
            "{image}: the default user is off"
        );
        let server: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut as_client)
            .await
            .unwrap_or_default();
        // Valkey reports the Redis version it is compatible with too; its own comes first.
        let version = ["valkey_version:", "redis_version:"]
            .iter()
            .find_map(|key| server.lines().find(|l| l.starts_with(key)))
            .unwrap_or("version hidden from the client user")
            .to_owned();

        let admin = env.admin_login(name).await;
        let mut as_admin = connect(ip, &admin).await.unwrap();
        let limit: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("lua-time-limit")
            .query_async(&mut as_admin)
            .await
            .unwrap();
        assert_eq!(
            limit.get(1).map(String::as_str),
            Some("4321"),
            "{image}: {limit:?}"
        );
        // On every image: the operator's own user cannot drop keys or change the server
        // (its ACL names only what the operator sends; every rule exists from 6.2 on, or the
        // server would not have started from the file).
        for args in [
            &["FLUSHALL"][..],
            &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
            &["REPLICAOF", "127.0.0.1", "1"],
            &["SWAPDB", "0", "1"],
        ] {
            let refused: redis::RedisResult<redis::Value> = redis::cmd(args[0])
                .arg(&args[1..])
                .query_async(&mut as_admin)
                .await;
            let e = refused.expect_err(&format!(
                "{image}: {args:?} must be refused to the operator's user"
            ));
            assert!(
                e.to_string().to_lowercase().contains("permission"),
                "{image}: {args:?}: {e}"
            );
        }

        let late = kill_9_then_held_and_released(&env, name, 0, &client).await;
        println!("{image} ({version}): locks, held after kill -9, released {late:?} after heldUntil");
    }
    // The member whose image cannot be pulled says which image, and a Warning tells it once.
    let want = "image redis:7.4 cannot be pulled; the pod's events say why";
    let message = wait_for(
        "the unpullable member says why",
        Duration::from_secs(120),
        async || {
            Ok(env
                .member("nopull", 0)
                .await
                .and_then(|m| m.message)
                .filter(|m| m == want))
        },
    )
    .await;
    // Events follow the status write they belong to: waited for, then counted.
    let told = wait_for("the ImagePullFailed event", Duration::from_secs(20), async || {
        let events: kube::api::ObjectList<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.cp.client(), &env.ns)
                .list(&Default::default())
                .await?;
        let told: Vec<String> = events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("ImagePullFailed"))
            .map(|e| e.note.clone().unwrap_or_default())
            .collect();
        Ok((!told.is_empty()).then_some(told))
    })
    .await;
    assert_eq!(told, [format!("nopull-0: {want}")], "{message}");
}

/// Issue 15 on a real node: slot 1's node is cut off from the API server (its kubelet stops;
/// its container keeps serving at the old pod IP), cordoned, and the administrator
/// force-deletes the pod. The replacement is released only after the operator fenced the old
/// process where it still runs; real lock clients with the old and the new address lists never
/// both get a majority. When the partition heals, the kubelet kills the orphaned container.
async fn a_container_that_outlives_its_force_deleted_pod_is_fenced_before_its_replacement_serves() {
    let env = real_env().await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s", "image": "redis:7.0"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(120)).await;
    let old: Vec<IpAddr> = env.member_ips(NAME, 3).await;
    let old_run = env.member(NAME, 1).await.unwrap().run_id.unwrap();
    let node = env.node_of(NAME, 1).await;
    let old_pid = env
        .cp
        .real_nodes()
        .pid(&env.ns, &format!("{NAME}-1"))
        .await
        .unwrap();
    env.partition_and_cordon(&node).await;
    let login = env.client_login(NAME).await;
    env.pods()
        .delete(&format!("{NAME}-1"), &DeleteParams::default().grace_period(0))
        .await
        .unwrap();

    env.wait_member(NAME, 1, "replacement released", Duration::from_secs(120), |m| {
        m.state == MemberState::Ready && m.run_id.as_deref() != Some(old_run.as_str())
    })
    .await;
    let new: Vec<IpAddr> = env.member_ips(NAME, 3).await;
    assert_ne!(new[1], old[1], "the replacement has another address");
    assert!(
        std::path::Path::new(&format!("/proc/{old_pid}")).exists(),
        "the old container still runs on the partitioned node"
    );

    let ttl = Duration::from_secs(3);
    let (granted, _) = redlock_attempt(&[new[0], new[1]], &login, "orders", "fresh-client", ttl).await;
    assert_eq!(granted, 2, "the current list's client takes {{0, new 1}}");
    let (granted, valid) = redlock_attempt(&old, &login, "orders", "stale-client", ttl).await;
    assert!(
        !valid,
        "the stale client got a majority of the old list ({granted} of 3) while the fresh one holds the lock"
    );
    env.wait_event("UnstoppedProcessFenced").await;
    assert!(
        connect(old[1], &login).await.is_err(),
        "the old process no longer lets lock clients log in"
    );

    // The partition heals: the kubelet finds the container of a pod that no longer exists.
    env.cp.real_nodes().heal_node(&node).unwrap();
    wait_for(
        "the orphaned container is gone",
        Duration::from_secs(60),
        async || Ok((!std::path::Path::new(&format!("/proc/{old_pid}")).exists()).then_some(())),
    )
    .await;
}

/// A node's machine dies and boots again (`RealNodes::lose_node`: kubelet, containerd and every
/// container killed, runtime state gone, disk kept). Its kubelet starts slot 0's pod anew in a
/// new sandbox: a new process without the keys of the old one. A lock client that took a bare
/// quorum {0, 1} just before keeps its lock: a second client with the whole list, trying all
/// along, never gets a majority while the first lock is valid, because the new process refuses
/// clients until `heldUntil`; it serves them right after.
async fn a_node_that_dies_and_boots_again_holds_its_members_new_processes() {
    let env = real_env().await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "15s", "holdMargin": "500ms", "image": "redis:7.0"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(120)).await;
    let login = env.client_login(NAME).await;
    let before = env.member(NAME, 0).await.unwrap();
    let old_ips = env.member_ips(NAME, 3).await;
    let node = env.node_of(NAME, 0).await;
    let ttl = Duration::from_secs(15);
    let first_taken = Instant::now();
    let (granted, valid) = redlock_attempt(&old_ips[..2], &login, "orders", "first", ttl).await;
    assert!(valid, "the first client takes {{0, 1}} ({granted} of 2)");
    let first_valid_until = first_taken + ttl - ttl / 100;

    let nodes = env.cp.real_nodes();
    nodes.lose_node(&node).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    nodes.restore_node(&node).await.unwrap();

    // The second client tries the whole list (old and new addresses of slot 0) until the
    // first lock has expired; its partial locks are released after each try.
    let mut attempts = 0;
    while Instant::now() + Duration::from_millis(500) < first_valid_until {
        let mut ips = env.member_ips(NAME, 3).await;
        ips.retain(|ip| !old_ips.contains(ip));
        ips.extend(&old_ips);
        let (granted, valid) = redlock_attempt(
            &ips,
            &login,
            "orders",
            &format!("second-{attempts}"),
            Duration::from_secs(1),
        )
        .await;
        let majority = granted > 1;
        assert!(
            !valid && !majority,
            "the second client got {granted} of the 3 members ({ips:?}) while the first lock was valid"
        );
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let held = env
        .wait_member(NAME, 0, "slot 0's new process", Duration::from_secs(60), |m| {
            m.run_id.is_some() && m.run_id != before.run_id
        })
        .await;
    let until = held.held_until.expect("the new process was held").0;
    let ip = env.pod_ip(NAME, 0).await;
    let served = first_client_write(ip, &login, Duration::from_secs(60))
        .await
        .unwrap();
    assert_released_on_time(until, served);
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let m = env.member(NAME, 0).await.unwrap();
    println!(
        "node {node} rebooted: slot 0 at {} (was {}), {attempts} tries of a second client refused, released {:?} after heldUntil",
        ip,
        old_ips[0],
        served.duration_since(until)
    );
    assert_eq!(m.state, MemberState::Ready);
}

/// kube-proxy exits when the Node it runs as is deleted (pkg/proxy/node.go); the environment
/// starts it again as the next node, as a DaemonSet would start a node's. A Service created
/// after that deletion is served at its new ClusterIP. Unsupervised, the rules kube-proxy had
/// written stayed and nothing followed the Services any more: after a `partition-delete-node`
/// of that node a re-created Service's ClusterIP led nowhere, and a 150-fault safety run went
/// 38 minutes without a lock.
async fn services_follow_their_pods_after_the_node_kube_proxy_runs_as_is_deleted() {
    use k8s_openapi::api::core::v1::{Node, Service};

    let env = real_env().await;
    env.create_cluster(NAME, spec()).await;
    env.wait_ready(NAME, 3, Duration::from_secs(120)).await;
    let login = env.client_login(NAME).await;
    let nodes = env.cp.real_nodes();
    let proxy_node = nodes.kube_proxy_node();
    let mut slot = None;
    for i in 0..3 {
        if env.node_of(NAME, i).await != proxy_node {
            slot = Some(i);
            break;
        }
    }
    let slot = slot.expect("three members on five nodes: one is not on kube-proxy's node");
    Api::<Node>::all(env.cp.client())
        .delete(&proxy_node, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("kube-proxy started again", Duration::from_secs(30), async || {
        Ok((nodes.kube_proxy_restarts() >= 1).then_some(()))
    })
    .await;
    assert_ne!(nodes.kube_proxy_node(), proxy_node, "it runs as another node");

    // The member's Service, deleted: the operator creates it again, with a new ClusterIP.
    let services: Api<Service> = Api::namespaced(env.cp.client(), &env.ns);
    let name = format!("{NAME}-{slot}");
    let cluster_ip = |s: Service| s.spec.and_then(|s| s.cluster_ip);
    let old_ip = cluster_ip(services.get(&name).await.unwrap()).unwrap();
    services.delete(&name, &DeleteParams::default()).await.unwrap();
    let new_ip: IpAddr = wait_for(
        "the member's Service again, at a new ClusterIP",
        Duration::from_secs(60),
        async || {
            let ip = services.get_opt(&name).await?.and_then(cluster_ip);
            Ok(ip.filter(|ip| *ip != old_ip))
        },
    )
    .await
    .parse()
    .unwrap();
    let started = Instant::now();
    let locked = wait_for(
        "a lock through the new ClusterIP",
        Duration::from_secs(60),
        async || {
            Ok(lock(new_ip, &login, "orders", "app-1", Duration::from_secs(10))
                .await
                .ok())
        },
    )
    .await;
    assert!(locked, "slot {slot} locks through {new_ip}");
    println!(
        "kube-proxy started again as {} after {proxy_node} was deleted; {name} re-created at {new_ip} (was {old_ip}), locked through it after {:?}",
        nodes.kube_proxy_node(),
        started.elapsed()
    );
}

/// The README's install steps on real nodes: the operator runs as two pods from its image
/// (tests/nodes/images.sh builds it from the Dockerfile's recipe), talks to the API server
/// in-cluster (the `kubernetes` Service through kube-proxy, its projected ServiceAccount
/// token, the chart's RBAC), one leads, the example cluster becomes Available, and an app locks
/// on all five members through their Services' ClusterIPs. A kill -9 is then held and
/// released under the chart's permissions.
///
/// One deviation from the README: Debian carries no redis 7.4, so the example's
/// `image: redis:7.4` is replaced by `redis:7.0` in a copy the step applies.
async fn readme_install_runs_the_operator_image_in_cluster() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use kube::api::LogParams;
    use redlock_operator::crd::RedlockCluster;

    let cp = redlock_testenv::ControlPlane::start(ControlPlaneConfig {
        nodes: 5,
        real_nodes: true,
        node_images: NodeImages::Also(vec!["redlock-operator:dev".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
    // The chart names the image by its appVersion; the image is built as redlock-operator:dev.
    let chart = std::fs::read_to_string("charts/redlock-operator/Chart.yaml").unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_owned();
    cp.real_nodes()
        .tag_image(
            "docker.io/library/redlock-operator:dev",
            &format!("ghcr.io/redlock-dev/redlock-operator:{app_version}"),
        )
        .unwrap();
    let example = cp.dir().join("redlockcluster.yaml");
    let text = std::fs::read_to_string("examples/redlockcluster.yaml").unwrap();
    assert!(text.contains("image: redis:7.4"), "the example names its image");
    std::fs::write(&example, text.replace("image: redis:7.4", "image: redis:7.0")).unwrap();

    let mut last = String::new();
    for step in install_steps() {
        let line = step.replace("examples/redlockcluster.yaml", &example.display().to_string());
        let out = readme_step(&cp, &line).await;
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "README step failed: {line}\n{last}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!("$ {line}\n{last}");
    }

    let clusters: Api<RedlockCluster> = Api::namespaced(cp.client(), "team");
    wait_for(
        "all five members of team/locks serve",
        Duration::from_secs(120),
        async || {
            let s = clusters.get("locks").await?.status.unwrap_or_default();
            Ok((s.ready_instances == Some(5)).then_some(()))
        },
    )
    .await;
    let urls: Vec<&str> = last.lines().collect();
    assert_eq!(urls.len(), 5, "{urls:?}");
    let services: Api<Service> = Api::namespaced(cp.client(), "team");
    for url in &urls {
        let (login, hostport) = parse_url(url);
        // `locks-<i>.team.svc:6379`: there is no cluster DNS here; the Service's ClusterIP is
        // what the name resolves to, and kube-proxy forwards it to the member's pod.
        let service = hostport.split('.').next().unwrap();
        let ip: IpAddr = services
            .get(service)
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap()
            .parse()
            .unwrap();
        let locked = wait_for(
            "a lock through the ClusterIP",
            Duration::from_secs(20),
            async || {
                Ok(lock(ip, &login, "app-lock", "app-1", Duration::from_secs(10))
                    .await
                    .ok())
            },
        )
        .await;
        assert!(locked, "{url}: the app locks through {ip}");
    }

    // Two operator pods from the image, under the chart's ServiceAccount; one leads.
    let op_pods: Api<Pod> = Api::namespaced(cp.client(), "redlock-system");
    let pods = op_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=redlock-operator"))
        .await
        .unwrap()
        .items;
    assert_eq!(pods.len(), 2, "two replicas");
    let mut logs = String::new();
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("redlock-operator"));
        let image = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
            .image
            .clone();
        assert!(image.contains("redlock-operator"), "{image}");
        logs.push_str(&op_pods.logs(&name, &LogParams::default()).await.unwrap());
    }
    let holder = Api::<Lease>::namespaced(cp.client(), "redlock-system")
        .get("redlock-operator")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    assert!(
        pods.iter()
            .any(|p| p.metadata.name.as_deref() == Some(holder.as_str()))
    );
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "an RBAC refusal:\n{logs}"
    );
    assert!(
        logs.contains("acquired the leader lease"),
        "one pod leads:\n{logs}"
    );

    // kill -9 of a member under the in-cluster operator: held, then released on time.
    let before = clusters.get("locks").await.unwrap().status.unwrap();
    let old_run = before
        .members
        .iter()
        .find(|m| m.slot == 1)
        .unwrap()
        .run_id
        .clone()
        .unwrap();
    let (login, _) = parse_url(urls[1]);
    let ip: IpAddr = Api::<Pod>::namespaced(cp.client(), "team")
        .get("locks-1")
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap()
        .parse()
        .unwrap();
    cp.real_nodes()
        .signal_pod("team", "locks-1", Signal::SIGKILL)
        .await
        .unwrap();
    let held = wait_for("locks-1 held", Duration::from_secs(30), async || {
        let s = clusters.get("locks").await?.status.unwrap_or_default();
        Ok(s.members.into_iter().find(|m| {
            m.slot == 1 && m.state == MemberState::Held && m.run_id.as_deref() != Some(old_run.as_str())
        }))
    })
    .await;
    let until = held.held_until.unwrap().0;
    // The example's hold is 31.3 s.
    let served = first_client_write(ip, &login, Duration::from_secs(60))
        .await
        .unwrap();
    let late = served.duration_since(until);
    println!("operator in-cluster from its image: released {late:?} after heldUntil");
    assert!(
        late >= SignedDuration::ZERO,
        "served at {served}, before heldUntil {until}"
    );
    assert!(
        late <= SignedDuration::from_millis(1500),
        "served {late:?} after heldUntil"
    );
    cp.shutdown().await;
}

/// Sets the run namespace's `ip_forward` for as long as it lives, then puts the old value back.
struct IpForward(String);

impl IpForward {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";

    fn on() -> Self {
        let before = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, "1").unwrap();
        Self(before)
    }
}

impl Drop for IpForward {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim());
    }
}

/// Two control planes' node networks in one run (as when `make test` runs two tests at once):
/// each one's nodes and pods reach their own API server, and nothing else in the run's
/// namespace: not the other's API server (which listens on every address there, so also on
/// this control plane's link), not another port, and not, forwarded through the run's
/// namespace, the other's nodes, even with `ip_forward` on there (as a namespace inherits it
/// from a machine that runs Docker). The run's namespace itself still reaches both.
async fn a_control_planes_nodes_reach_its_api_server_and_nothing_else_of_the_run() {
    use redlock_testenv::controlplane::IpBlock;
    use redlock_testenv::nodes::layout::Layout;
    use redlock_testenv::nodes::node_network::NodeNetwork;
    use std::net::{SocketAddr, TcpListener};
    redlock_testenv::nodes::namespace::prepare().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (block_a, block_b) = (IpBlock::acquire().unwrap(), IpBlock::acquire().unwrap());
    let (a, b) = (
        Layout::new(block_a.octet, dir.path()),
        Layout::new(block_b.octet, dir.path()),
    );
    // Stand-ins for the two API servers: bound to every address, as kube-apiserver is.
    let api_a = TcpListener::bind("0.0.0.0:0").unwrap();
    let api_b = TcpListener::bind("0.0.0.0:0").unwrap();
    let other = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    let net_a = NodeNetwork::create(&a, port(&api_a)).unwrap();
    let net_b = NodeNetwork::create(&b, port(&api_b)).unwrap();
    // Something on B's side: a listener in B's namespace at its end of B's link.
    let on_b = net_b
        .netns()
        .listen(SocketAddr::new(b.node_network_gateway().into(), 0))
        .unwrap();
    let on_b = on_b.local_addr().unwrap();
    let _forwarding = IpForward::on();
    let timeout = Duration::from_secs(2);
    let at = |ip: std::net::Ipv4Addr, l: &TcpListener| SocketAddr::new(ip.into(), port(l));

    // The run's namespace reaches all of it (what the tests and the operator need).
    for addr in [at(a.api_ip(), &api_a), at(a.api_ip(), &other), on_b] {
        std::net::TcpStream::connect_timeout(&addr, timeout)
            .unwrap_or_else(|e| panic!("from the run's namespace to {addr}: {e}"));
    }
    // A's nodes: their API server, nothing else.
    net_a
        .netns()
        .connect(at(a.api_ip(), &api_a), timeout)
        .expect("A's nodes reach A's API server");
    for (what, addr) in [
        ("another port of the run's namespace", at(a.api_ip(), &other)),
        ("B's API server on A's link", at(a.api_ip(), &api_b)),
        ("B's API server at B's address", at(b.api_ip(), &api_b)),
        ("B's nodes through the run's namespace", on_b),
    ] {
        // Refused at once by A's own rules, not timed out (which B's rules alone could cause
        // for the forwarded case, by dropping B's answer).
        match net_a.netns().connect(addr, timeout) {
            Ok(_) => panic!("A's nodes reached {what} ({addr})"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{what}: {e}"),
        }
    }
    // And the other way round.
    net_b
        .netns()
        .connect(at(b.api_ip(), &api_b), timeout)
        .expect("B's nodes reach B's API server");
    for addr in [at(b.api_ip(), &api_a), at(a.api_ip(), &api_a)] {
        let e = net_b.netns().connect(addr, timeout).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{addr}: {e}");
    }
    // No IPv6 on the links (the rules are IPv4's): the run's end has no link-local address
    // for the nodes to reach its listeners at.
    for layout in [&a, &b] {
        let (link, _) = layout.api_veth();
        let out = std::process::Command::new("ip")
            .args(["-6", "addr", "show", "dev", &link])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("inet6"),
            "{link}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
