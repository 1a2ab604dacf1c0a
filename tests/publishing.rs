//! What users and their Redlock clients see (issue #5), on the real control plane: the
//! endpoints ConfigMap, client Secret and Services listing all N members (also while some are
//! held), `kubectl get/wait/describe`, per-cluster metrics, the TTL audit, specs the operator
//! refuses, and zero API writes in steady state.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use nix::sys::signal::Signal;
use redlock_test_support::*;
use redlock_testenv::resolver::{Resolver, Source};
use serde_json::json;

const NAME: &str = "locks";

/// `kubectl get rlc` columns after NAME: INSTANCES READY HELD QUORUM AVAILABLE (AGE dropped).
async fn get_columns(env: &Env) -> Vec<String> {
    let out = env.kubectl(&["get", "rlc", NAME, "--no-headers"]).await;
    let cols: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
    assert_eq!(cols.len(), 7, "{out}");
    assert_eq!(cols[0], NAME);
    cols[1..6].to_vec()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

async fn condition(env: &Env, type_: &str) -> Option<(String, String, String)> {
    env.cluster(NAME)
        .await
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

#[tokio::test]
async fn clients_get_all_members_while_some_are_held_and_kubectl_tells_the_truth() {
    let env = Env::start(3).await;
    let ns = env.ns.clone();
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "6s", "holdMargin": "0s"}),
    )
    .await;

    // `kubectl wait` is how users block on a cluster.
    env.kubectl(&[
        "wait",
        "--for=condition=Available",
        &format!("rlc/{NAME}"),
        "--timeout=60s",
    ])
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    assert_eq!(get_columns(&env).await, ["3", "3", "0", "2", "True"]);

    let servers: Vec<String> = (0..3).map(|i| format!("{NAME}-{i}.{ns}.svc:6379")).collect();
    let endpoints = format!("{NAME}-endpoints");
    assert_eq!(lines(&env.config_map(&endpoints, "servers").await), servers);
    assert_eq!(env.config_map(&endpoints, "quorum").await, "2");
    assert_eq!(env.config_map(&endpoints, "maxLockTTL").await, "6s");
    assert_eq!(env.config_map(&endpoints, "maxLockTTLMillis").await, "6000");
    wait_for("ready list complete", Duration::from_secs(10), async || {
        Ok((lines(&env.config_map(&endpoints, "ready").await) == servers).then_some(()))
    })
    .await;

    let login = env.client_login(NAME).await;
    let urls = env.secret(&format!("{NAME}-client"), "urls").await;
    let expected_urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://{}:{}@{s}", login.user, login.password))
        .collect();
    assert_eq!(lines(&urls), expected_urls);
    // The same list for clients that take one string or a JSON array.
    let csv = env.secret(&format!("{NAME}-client"), "urls.csv").await;
    assert_eq!(csv, expected_urls.join(","));
    let json = env.secret(&format!("{NAME}-client"), "urls.json").await;
    assert_eq!(serde_json::from_str::<Vec<String>>(&json).unwrap(), expected_urls);

    // Every published address leads, through the Service, to its own slot's pod. On real
    // nodes that is the endpointslice controller's EndpointSlice, which follows pod readiness
    // a moment later than the operator's status: waited for, then checked.
    let resolver = Resolver::for_control_plane(&env.cp);
    for (slot, server) in servers.iter().enumerate() {
        let ip = env.pod_ip(NAME, slot as i32).await;
        let addrs = resolves_to(&resolver, server, &[ip]).await;
        assert_eq!(addrs.len(), 1, "{server}: {addrs:?}");
        assert_eq!(addrs[0].ip(), ip);
        assert!(
            lock(addrs[0].ip(), &login, "k", "v", Duration::from_secs(1))
                .await
                .unwrap()
        );
    }
    let services: Api<Service> = Api::namespaced(env.cp.client(), &ns);
    let headless = services.get(&format!("{NAME}-headless")).await.unwrap();
    assert_eq!(headless.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let mut all = Vec::new();
    for slot in 0..3 {
        all.push(env.pod_ip(NAME, slot).await);
    }
    all.sort();
    resolves_to(&resolver, &format!("{NAME}-headless.{ns}.svc:6379"), &all).await;

    // Crash slot 1: it is held. Clients still get all three addresses; only `ready` shrinks,
    // and the held member's address leads nowhere.
    let run = env.member(NAME, 1).await.unwrap().run_id.unwrap();
    env.cp
        .nodes()
        .signal_pod(&ns, &format!("{NAME}-1"), Signal::SIGKILL)
        .await
        .unwrap();
    let (_, until) = wait_held(&env, NAME, 1, &run).await;
    wait_for(
        "kubectl get during the hold",
        Duration::from_secs(5),
        async || Ok((get_columns(&env).await == ["3", "2", "1", "2", "True"]).then_some(())),
    )
    .await;
    assert_eq!(lines(&env.config_map(&endpoints, "servers").await), servers);
    assert_eq!(
        lines(&env.secret(&format!("{NAME}-client"), "urls").await),
        expected_urls
    );
    wait_for(
        "ready list without the held member",
        Duration::from_secs(5),
        async || {
            let ready = env.config_map(&endpoints, "ready").await;
            Ok((lines(&ready) == [servers[0].as_str(), servers[2].as_str()]).then_some(()))
        },
    )
    .await;
    let (status, reason, message) = condition(&env, "Degraded").await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "InstancesNotServing")
    );
    // Held (its new process runs fenced) or Lost (not yet restarted: a real kubelet restarts
    // a container later than the process kubelet): either way the hold and its end are named.
    assert!(
        ["Held", "Lost"]
            .iter()
            .any(|state| message.contains(&format!("{NAME}-1 {state} until"))),
        "{message}"
    );
    let member = env.member(NAME, 1).await.unwrap();
    assert_eq!(member.endpoint.as_deref(), Some(servers[1].as_str()));
    assert!(
        until
            .duration_since(k8s_openapi::jiff::Timestamp::now())
            .as_secs_f64()
            > 1.0
    );
    // The held member's name leads nowhere (its pod is not Ready) for the rest of its hold.
    held_name_leads_nowhere(&resolver, &servers[1], until).await;

    // After the hold: all ready again, everywhere.
    env.wait_ready(NAME, 3, Duration::from_secs(20)).await;
    wait_for("kubectl get after the hold", Duration::from_secs(5), async || {
        Ok((get_columns(&env).await == ["3", "3", "0", "2", "True"]).then_some(()))
    })
    .await;
    wait_for("ready list after the hold", Duration::from_secs(5), async || {
        Ok((lines(&env.config_map(&endpoints, "ready").await) == servers).then_some(()))
    })
    .await;
    assert_eq!(condition(&env, "Degraded").await.unwrap().0, "False");

    // `kubectl describe` shows the story as events.
    let describe = env.kubectl(&["describe", "rlc", NAME]).await;
    for reason in [
        "InstanceCreated",
        "InstanceLost",
        "HoldStarted",
        "InstanceReleased",
    ] {
        assert!(describe.contains(reason), "{reason} missing from\n{describe}");
    }

    // Per-cluster metrics.
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let labels = format!("namespace=\"{ns}\",cluster=\"{NAME}\"");
    for line in [
        format!("redlock_members{{{labels},state=\"ready\"}} 3"),
        format!("redlock_members{{{labels},state=\"held\"}} 0"),
        format!("redlock_instance_losses_total{{{labels}}} 1"),
        format!("redlock_instance_releases_total{{{labels}}} 4"),
        // Three first-process holds and the kill's.
        format!("redlock_hold_length_seconds_count{{{labels}}} 4"),
        format!("redlock_hold_remaining_seconds{{{labels},member=\"{NAME}-1\"}} 0.0"),
    ] {
        assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    }
}

/// A 3-instance cluster, Ready, whose first TTL audit (every `period_ms`) has reported.
async fn audited_cluster(period_ms: u64, max_lock_ttl: &str) -> Env {
    let env = Env::start_with(3, &[&format!("--ttl-audit-period-ms={period_ms}")]).await;
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": max_lock_ttl}))
        .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    wait_for("first TTL audit", Duration::from_secs(10), async || {
        Ok(condition(&env, "TTLPolicy").await.filter(|c| c.0 == "True"))
    })
    .await;
    env
}

#[tokio::test]
async fn ttl_audit_flags_keys_that_outlive_max_lock_ttl_and_clears() {
    let env = audited_cluster(500, "5s").await;

    let login = env.client_login(NAME).await;
    let ip = env.pod_ip(NAME, 2).await;
    let mut c = connect(ip, &login).await.unwrap();
    // In one transaction: the audit runs every 500 ms, and keys written one by one could be
    // seen by it half written (it once reported "too-long" alone and the test failed).
    let (): () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("too-long")
        .arg("x")
        .arg("PX")
        .arg(60_000)
        .ignore()
        .cmd("SET")
        .arg("forever")
        .arg("x")
        .ignore()
        .cmd("SET")
        .arg("fine")
        .arg("x")
        .arg("PX")
        .arg(4_000)
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap();
    let flagged_at = std::time::Instant::now();

    let (_, reason, message) = wait_for("TTLPolicy False", Duration::from_secs(5), async || {
        Ok(condition(&env, "TTLPolicy").await.filter(|c| c.0 == "False"))
    })
    .await;
    println!("flagged after {:?}", flagged_at.elapsed());
    assert_eq!(reason, "KeysExceedMaxLockTTL");
    assert!(
        message.starts_with(&format!("2 key(s) on 1 member(s) have no expiry or a TTL above maxLockTTL 5s, e.g. \"forever\" on {NAME}-2 (no expiry)")),
        "{message}"
    );
    let describe = env.kubectl(&["describe", "rlc", NAME]).await;
    assert!(describe.contains("TTLPolicyViolated"), "{describe}");
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let line = format!(
        "redlock_ttl_policy_violations{{namespace=\"{}\",cluster=\"{NAME}\"}} 2",
        env.ns
    );
    assert!(metrics.contains(&line), "missing {line} in\n{metrics}");

    let (): () = redis::cmd("DEL")
        .arg("too-long")
        .arg("forever")
        .query_async(&mut c)
        .await
        .unwrap();
    wait_for("TTLPolicy True again", Duration::from_secs(5), async || {
        Ok(condition(&env, "TTLPolicy").await.filter(|c| c.0 == "True"))
    })
    .await;
}

#[tokio::test]
async fn a_spec_the_schema_cannot_refuse_is_reported_and_nothing_running_is_touched() {
    let env = Env::start(5).await;
    // Short TTL: every first process is held once before the cluster is Available.
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": "3s"}))
        .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let uids = pod_uids(&env).await;

    // Valid to the schema, impossible for Kubernetes: the request exceeds the limit. Also ask
    // for more instances in the same edit: they must not be created from this spec.
    env.patch_spec(
        NAME,
        json!({"instances": 5, "resources": {
                "requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
    )
    .await;
    let (_, reason, message) = wait_for("SpecAccepted False", Duration::from_secs(10), async || {
        Ok(condition(&env, "SpecAccepted").await.filter(|c| c.0 == "False"))
    })
    .await;
    assert_eq!(reason, "SpecRejected");
    assert!(
        message.starts_with("spec.resources.requests.memory: the request 1Gi exceeds the limit 512Mi"),
        "{message}"
    );
    let describe = env.kubectl(&["describe", "rlc", NAME]).await;
    assert!(describe.contains("SpecRejected"), "{describe}");

    // A few probe periods later: the same three pods run, nothing was added, still Available.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pod_uids(&env).await, uids);
    assert_eq!(condition(&env, "Available").await.unwrap().0, "True");
    assert_eq!(
        lines(&env.config_map(&format!("{NAME}-endpoints"), "servers").await).len(),
        3
    );

    // Fixed: accepted again, and the two new slots are created (and serve once the new list is
    // confirmed).
    env.patch_spec(NAME, json!({"resources": null})).await;
    env.confirm_resize(NAME).await;
    env.wait_ready(NAME, 5, Duration::from_secs(30)).await;
    assert_eq!(condition(&env, "SpecAccepted").await.unwrap().0, "True");
    assert_eq!(
        lines(&env.config_map(&format!("{NAME}-endpoints"), "servers").await).len(),
        5
    );
}

async fn pod_uids(env: &Env) -> BTreeMap<String, String> {
    env.pods()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
        .collect()
}

/// Write requests the API server counted for the objects an operator could write, by
/// (verb, resource, subresource). From `apiserver_request_total`, so even a write that changes
/// nothing (a no-op apply) is counted.
async fn api_writes(env: &Env) -> BTreeMap<String, f64> {
    let verbs = ["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = env.cp.client().request_text(req).await.unwrap();
    let resources = [
        "redlockclusters",
        "pods",
        "services",
        "configmaps",
        "secrets",
        "events",
        "poddisruptionbudgets",
    ];
    let mut writes = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            line[start..].split('"').next()
        };
        let verb = label("verb").unwrap_or_default();
        let resource = label("resource").unwrap_or_default();
        if !verbs.contains(&verb) || !resources.contains(&resource) {
            continue;
        }
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        let key = format!("{verb} {resource}/{}", label("subresource").unwrap_or_default());
        *writes.entry(key).or_insert(0.0) += value;
    }
    writes
}

/// GETs of RedlockClusters the API server audited between `from` and `to`, counted by user
/// agent (the operator's, the controller manager's garbage collector checking owners, ...).
fn cluster_reads(env: &Env, from: Timestamp, to: Timestamp) -> BTreeMap<String, usize> {
    let mut reads = BTreeMap::new();
    for e in audit_entries(&env.cp, from, to) {
        if e["verb"] == "get" && e["objectRef"]["resource"] == "redlockclusters" {
            let agent = e["userAgent"].as_str().unwrap_or_default().to_owned();
            *reads.entry(agent).or_default() += 1;
        }
    }
    reads
}

/// `resourceVersion` of every object in the namespace the operator touches.
async fn resource_versions(env: &Env) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for kind in [
        "redlockclusters",
        "pods",
        "services",
        "configmaps",
        "secrets",
        "events",
    ] {
        let json = env.kubectl(&["get", kind, "-o", "json"]).await;
        let list: serde_json::Value = serde_json::from_str(&json).unwrap();
        for item in list["items"].as_array().unwrap() {
            let name = item["metadata"]["name"].as_str().unwrap();
            let rv = item["metadata"]["resourceVersion"].as_str().unwrap();
            out.insert(format!("{kind}/{name}"), rv.to_owned());
        }
    }
    out
}

fn reconciles(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("redlock_reconciles_total "))
        .unwrap()
        .parse()
        .unwrap()
}

/// Issue #5: with nothing changing, the operator writes nothing, while it keeps probing every
/// member each second and running the TTL audit each second (both read-only, counted at the
/// members). Issue 17: nor does it read its cluster from the API server (it plans from the
/// watch cache, and a cluster at rest is not even reconciled): no GET of redlockclusters
/// (only the operator reads them here) in the window.
#[tokio::test]
async fn steady_state_costs_zero_api_writes() {
    let window = Duration::from_secs(
        std::env::var("STEADY_STATE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let env = audited_cluster(1000, "10s").await;
    // Let the pods' readiness and the endpoints settle.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let writes_before = api_writes(&env).await;
    let window_start = Timestamp::now();
    // The counter sees the operator's writes (else this test could not fail).
    assert!(
        writes_before.contains_key("APPLY redlockclusters/status"),
        "{writes_before:?}"
    );
    let versions_before = resource_versions(&env).await;
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let reconciles_before = reconciles(&metrics);
    let mut connections_before = vec![];
    let mut calls_before = vec![];
    for slot in 0..3 {
        connections_before.push(connections_received(&env, slot).await);
        calls_before.push((calls(&env, slot, "time").await, calls(&env, slot, "scan").await));
    }

    tokio::time::sleep(window).await;

    let writes_after = api_writes(&env).await;
    let window_end = Timestamp::now();
    let versions_after = resource_versions(&env).await;
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let reconciled = reconciles(&metrics) - reconciles_before;
    println!("{reconciled} reconciles in {window:?}; writes before {writes_before:?}");
    // The operator was busy, not idle: it probed and audited every member every second
    // (whether a reconcile or the rest watch did), as the members count.
    for (slot, (probes_before, scans_before)) in calls_before.iter().enumerate() {
        let probed = calls(&env, slot as i32, "time").await - probes_before;
        let scanned = calls(&env, slot as i32, "scan").await - scans_before;
        println!("slot {slot}: {probed} probes and {scanned} TTL audit SCANs in {window:?}");
        assert!(
            probed as f64 >= window.as_secs_f64() * 0.5 && scanned as f64 >= window.as_secs_f64() * 0.5,
            "slot {slot}: only {probed} probes and {scanned} audit SCANs in {window:?}"
        );
    }
    let changed: Vec<_> = writes_after
        .iter()
        .filter(|(k, v)| writes_before.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {} -> {v}", writes_before.get(k).copied().unwrap_or(0.0)))
        .collect();
    assert!(changed.is_empty(), "API writes during steady state: {changed:?}");
    // Reads of the cluster in the window, by who sent them (the API server's audit log).
    let reads = cluster_reads(&env, window_start, window_end);
    // The audit sees reads (the test's own, while it waited for the cluster): this check can fail.
    let all = cluster_reads(&env, Timestamp::MIN, Timestamp::MAX);
    assert!(
        !all.is_empty(),
        "the audit log records no read of the cluster at all"
    );
    println!("reads of redlockclusters in the window, by user agent: {reads:?}");
    let by_operator: Vec<_> = reads
        .iter()
        .filter(|(agent, _)| !agent.starts_with("kube-controller-manager"))
        .collect();
    assert!(
        by_operator.is_empty(),
        "the operator read its cluster from the API server during steady state: {by_operator:?}"
    );
    assert_eq!(
        versions_after, versions_before,
        "objects changed during steady state"
    );
    // Probes reuse one admin connection per member (src/probe_connections.rs): each member has
    // an admin connection as old as the window, and accepted few connections in it (the TTL
    // audit's, the test's own), not one per probe.
    let admin = env.admin_login(NAME).await;
    for slot in 0..3 {
        let ip = env.pod_ip(NAME, slot).await;
        let mut c = connect(ip, &admin).await.unwrap();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut c)
            .await
            .unwrap();
        let user = format!("user={}", admin.user);
        let oldest = list
            .lines()
            .filter(|l| l.split(' ').any(|f| f == user))
            .filter_map(|l| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix("age="))?
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        assert!(
            oldest + 5 >= window.as_secs(),
            "slot {slot}: no probe connection kept through the {window:?} window (oldest admin connection {oldest} s):\n{list}"
        );
    }
    for (slot, before) in connections_before.iter().enumerate() {
        let after = connections_received(&env, slot as i32).await;
        println!(
            "slot {slot}: {} connections accepted in {window:?} with {reconciled} reconciles",
            after - before
        );
    }
}

/// Issue 17: a cluster with nothing to do rests. It is not reconciled every probe period, nor
/// every TTL audit period (2 s here), yet every member is still probed every period on its
/// kept connection and audited every audit period, and what only a probe or the audit can see
/// wakes a reconcile at once: a key that outlives maxLockTTL is reported (and, reported, wakes
/// nothing more), a password added to a member's client user behind the operator's back is
/// removed, and a member fenced behind its back is found within seconds, not at the resync,
/// and held in full before it is released again (safety review 3, N1: an admin's hand fence
/// is not undone with no hold behind it). So is a member's node moving to another zone (status.failureDomains).
#[tokio::test]
async fn an_idle_cluster_rests_but_its_probes_still_wake_it() {
    // A TTL audit every 2 s: at rest its periods run in the rest watch, not in reconciles.
    let env = Env::start_with(3, &["--ttl-audit-period-ms=2000"]).await;
    env.create_cluster(NAME, json!({"instances": 3, "maxLockTTL": "5s"}))
        .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    // Let the last status write's own reconcile come and go.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let window = Duration::from_secs(20);
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let reconciles_before = reconciles(&metrics);
    let mut calls_before = vec![];
    for slot in 0..3 {
        calls_before.push((calls(&env, slot, "time").await, calls(&env, slot, "scan").await));
    }
    tokio::time::sleep(window).await;
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let reconciled = reconciles(&metrics) - reconciles_before;
    for (slot, (probes_before, scans_before)) in calls_before.iter().enumerate() {
        let probed = calls(&env, slot as i32, "time").await - probes_before;
        let scanned = calls(&env, slot as i32, "scan").await - scans_before;
        println!("slot {slot}: {probed} probes and {scanned} TTL audit SCANs in {window:?}");
        assert!(
            probed as f64 >= window.as_secs_f64() * 0.5,
            "slot {slot}: only {probed} probes in {window:?}"
        );
        assert!(
            scanned as f64 >= window.as_secs_f64() / 2.0 * 0.5,
            "slot {slot}: only {scanned} audit SCANs in {window:?}"
        );
    }
    println!("{reconciled} reconciles in {window:?}");
    assert!(
        reconciled <= window.as_secs_f64() / 4.0,
        "{reconciled} reconciles in {window:?}: the idle cluster did not rest"
    );

    // A key that outlives maxLockTTL, written by a client of the resting cluster: the rest
    // watch's audit period finds it and wakes the reconcile that reports it. Reported, it
    // wakes nothing more, although its remaining TTL shrinks from sweep to sweep. Gone, it is
    // reported gone.
    let client = env.client_login(NAME).await;
    let mut c = connect(env.pod_ip(NAME, 0).await, &client).await.unwrap();
    let () = redis::cmd("SET")
        .arg("too-long")
        .arg("x")
        .arg("PX")
        .arg(120_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let (_, _, message) = wait_for(
        "TTLPolicy False (found at rest)",
        Duration::from_secs(10),
        async || Ok(condition(&env, "TTLPolicy").await.filter(|c| c.0 == "False")),
    )
    .await;
    assert!(
        message.contains(&format!("e.g. \"too-long\" on {NAME}-0 (TTL above maxLockTTL)")),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let before = reconciles(&metrics);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let woken = reconciles(&metrics) - before;
    println!("{woken} reconciles in 8 s (4 audit periods) with a violation on record");
    assert!(
        woken <= 1.0,
        "{woken} reconciles: a reported violation keeps waking the cluster"
    );
    let () = redis::cmd("DEL")
        .arg("too-long")
        .query_async(&mut c)
        .await
        .unwrap();
    wait_for("TTLPolicy True again", Duration::from_secs(10), async || {
        Ok(condition(&env, "TTLPolicy").await.filter(|c| c.0 == "True"))
    })
    .await;

    // A member's node moved to another zone: the status's failure domains follow at once
    // (a zone change wakes the clusters; node heartbeats do not).
    let node = env.node_of(NAME, 2).await;
    env.kubectl(&[
        "label",
        "node",
        &node,
        "topology.kubernetes.io/zone=moved",
        "--overwrite",
    ])
    .await;
    wait_for(
        "the new zone in status.failureDomains (long before the next audit)",
        Duration::from_secs(15),
        async || {
            let zones = env
                .cluster(NAME)
                .await
                .status
                .and_then(|s| s.failure_domains)
                .map(|d| d.zones)
                .unwrap_or_default();
            Ok(zones.contains_key("moved").then_some(()))
        },
    )
    .await;

    // A password added to the client user behind the operator's back: no API object changes,
    // and the pod stays Ready (its readiness gate stays open). Only the operator's probe
    // sees it, and the reconcile it wakes sets the passwords on record again.
    let ip = env.pod_ip(NAME, 1).await;
    let admin = env.admin_login(NAME).await;
    let intruder = Login {
        user: client.user.clone(),
        password: "intruder".into(),
    };
    let mut a = connect(ip, &admin).await.unwrap();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&client.user)
        .arg(">intruder")
        .query_async(&mut a)
        .await
        .unwrap();
    assert!(connect(ip, &intruder).await.is_ok(), "the added password works");
    wait_for(
        "the added password removed (found by the rest watch's probe)",
        Duration::from_secs(15),
        async || Ok(connect(ip, &intruder).await.is_err().then_some(())),
    )
    .await;
    assert!(connect(ip, &client).await.is_ok(), "the password on record works");

    // Fenced behind the operator's back: the operator's next probe finds it, holds it in full
    // from then (the admin may flush it behind the fence), and releases it after the hold.
    let fenced_run = env.member(NAME, 1).await.unwrap().run_id;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&client.user)
        .arg("off")
        .query_async(&mut a)
        .await
        .unwrap();
    let fenced_at = k8s_openapi::jiff::Timestamp::now();
    assert!(connect(ip, &client).await.is_err(), "fenced by hand");
    let held = env
        .wait_member(
            NAME,
            1,
            "the hand fence found and held (by the rest watch's probe)",
            Duration::from_secs(15),
            |m| m.state == redlock_operator::crd::MemberState::Held && m.run_id == fenced_run,
        )
        .await;
    let until = held.held_until.expect("a held member has heldUntil").0;
    assert!(
        until
            >= fenced_at
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(5))
                .unwrap(),
        "held in full from when it was found: until {until}, fenced at {fenced_at}"
    );
    assert!(
        connect(ip, &client).await.is_err(),
        "not released inside the hold"
    );
    wait_for(
        "the member released after its hold",
        Duration::from_secs(30),
        async || Ok(connect(ip, &client).await.ok().map(|_| ())),
    )
    .await;
    assert!(
        k8s_openapi::jiff::Timestamp::now() >= until,
        "released at or after heldUntil {until}"
    );
}

/// How many `TIME` commands a member has answered: every operator probe sends one, and
/// nothing else in these tests does.
async fn calls(env: &Env, slot: i32, command: &str) -> u64 {
    let admin = env.admin_login(NAME).await;
    let mut c = connect(env.pod_ip(NAME, slot).await, &admin).await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// `total_connections_received` of a member (INFO stats).
async fn connections_received(env: &Env, slot: i32) -> u64 {
    let admin = env.admin_login(NAME).await;
    let mut c = connect(env.pod_ip(NAME, slot).await, &admin).await.unwrap();
    let info: String = redis::cmd("INFO").arg("stats").query_async(&mut c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_connections_received")
}

/// `server`, the name of a held member, resolves to nothing from now until 200 ms before `until`
/// (its hold's end). Where the resolver applies the endpointslice controller's rules, at once;
/// on real nodes once the controller's EndpointSlice has followed the pod's readiness, which
/// must happen within the hold.
async fn held_name_leads_nowhere(resolver: &Resolver, server: &str, until: Timestamp) {
    let left = std::time::Duration::try_from(until.duration_since(Timestamp::now())).unwrap_or_default();
    let end = std::time::Instant::now() + left.saturating_sub(Duration::from_millis(200));
    if resolver.source() == Source::PodRules {
        let found = resolver.resolve(server).await.unwrap();
        assert!(
            found.is_empty(),
            "{server} of a held member resolves to {found:?}"
        );
    } else {
        loop {
            let found = resolver.resolve(server).await.unwrap();
            if found.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "{server} of a held member still resolved to {found:?} at the end of its hold"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // And stays so: nothing publishes it again while it is held.
    let mut checks = 0;
    while std::time::Instant::now() < end {
        let found = resolver.resolve(server).await.unwrap();
        assert!(
            found.is_empty(),
            "{server} of a held member resolves to {found:?} again"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{server} led nowhere through its hold ({checks} checks after the first)");
}

/// Safety review 3, N7: a released member whose process hangs (SIGSTOP) passes the kubelet's
/// TCP readiness dial (the kernel completes the handshake), so only the operator can take it
/// out of its Services: after `silences::HUNG_AFTER` without an answer its readiness gate
/// closes and the pod is not Ready; the record stays `Ready` (no hold: its keys are intact).
/// Its first answer puts it back.
#[tokio::test]
async fn a_hung_member_leaves_its_services_until_it_answers_again() {
    let env = Env::start(4).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let before = env.member(NAME, 1).await.unwrap();
    let pod = format!("{NAME}-1");
    let ready = async |env: &Env| -> Option<bool> {
        let p = env.pods().get(&pod).await.ok()?;
        let conditions = p.status?.conditions?;
        let c = conditions.iter().find(|c| c.type_ == "Ready")?;
        Some(c.status == "True")
    };
    assert_eq!(ready(&env).await, Some(true));
    env.cp
        .nodes()
        .signal_pod(&env.ns, &pod, Signal::SIGSTOP)
        .await
        .unwrap();
    let stopped = std::time::Instant::now();
    wait_for("the hung member not Ready", Duration::from_secs(40), async || {
        Ok((ready(&env).await == Some(false)).then_some(()))
    })
    .await;
    println!("hung member out of its Services after {:?}", stopped.elapsed());
    assert!(
        stopped.elapsed() >= redlock_operator::decide::silences::HUNG_AFTER,
        "not before a bounded silence"
    );
    let m = env.member(NAME, 1).await.unwrap();
    assert_eq!(
        m.state,
        redlock_operator::crd::MemberState::Ready,
        "no hold: {m:?}"
    );
    assert_eq!(m.run_id, before.run_id);
    env.cp
        .nodes()
        .signal_pod(&env.ns, &pod, Signal::SIGCONT)
        .await
        .unwrap();
    wait_for("the member Ready again", Duration::from_secs(30), async || {
        Ok((ready(&env).await == Some(true)).then_some(()))
    })
    .await;
    let m = env.member(NAME, 1).await.unwrap();
    assert_eq!(
        (m.state, m.run_id),
        (redlock_operator::crd::MemberState::Ready, before.run_id)
    );
}

/// Safety review 3, N1: a `FLUSHALL` on a serving member drops the locks it granted without a
/// restart. Neither a lock client nor the operator's own user may send one, so an insider
/// widens the operator's user first. The probe reads the command's calls: the member is fenced
/// before a second client can take a majority with it, and its pod is replaced.
#[tokio::test]
async fn a_member_flushed_while_it_serves_is_fenced_before_a_second_client_takes_a_majority() {
    let env = Env::start(4).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "10s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let before = env.member(NAME, 1).await.unwrap();
    let client = env.client_login(NAME).await;
    let mut ips = Vec::new();
    for slot in 0..3 {
        ips.push(env.pod_ip(NAME, slot).await);
    }
    // Client A holds L on a bare majority: members 0 and 1.
    let ttl = Duration::from_secs(10);
    assert!(lock(ips[0], &client, "L", "A", ttl).await.unwrap());
    assert!(lock(ips[1], &client, "L", "A", ttl).await.unwrap());
    let ip = ips[1];
    let admin = env.admin_login(NAME).await;
    let mut a = connect(ip, &admin).await.unwrap();
    let refused: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut a).await;
    assert!(refused.is_err(), "the operator's user may not FLUSHALL");
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&admin.user)
        .arg("+flushall")
        .query_async(&mut a)
        .await
        .unwrap();
    let () = redis::cmd("FLUSHALL").query_async(&mut a).await.unwrap();
    let flushed = std::time::Instant::now();
    wait_for("the flushed process fenced", Duration::from_secs(8), async || {
        Ok(connect(ip, &client).await.is_err().then_some(()))
    })
    .await;
    println!("fenced {:?} after the flush", flushed.elapsed());
    // Client B tries every member while A's lock is valid: member 0 has A's key, member 1 is
    // fenced, so B gets member 2 alone.
    let mut granted = Vec::new();
    for (slot, ip) in ips.iter().enumerate() {
        // A refused login (the fenced member) is no grant.
        if lock(*ip, &client, "L", "B", ttl).await.unwrap_or(false) {
            granted.push(slot);
        }
    }
    let mut c0 = connect(ips[0], &client).await.unwrap();
    let left: i64 = redis::cmd("PTTL").arg("L").query_async(&mut c0).await.unwrap();
    assert!(
        left > 0,
        "A's lock expired before B tried: the test proves nothing"
    );
    assert_eq!(
        granted,
        [2],
        "B must not get a majority while A holds L ({left} ms left)"
    );
    env.wait_event("ProcessTampered").await;
    let events: kube::api::ObjectList<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.cp.client(), &env.ns)
            .list(&Default::default())
            .await
            .unwrap();
    let notes: Vec<&str> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ProcessTampered"))
        .filter_map(|e| e.note.as_deref())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("flushall ran 1 times")),
        "the event names the flush: {notes:?}"
    );
    env.wait_member(NAME, 1, "replaced and released", Duration::from_secs(90), |m| {
        m.state == redlock_operator::crd::MemberState::Ready && m.run_id != before.run_id
    })
    .await;
}

/// Safety review 3, N1: a member whose settings are changed while it runs (here eviction
/// switched on, by an insider who first widened the operator's own ACL user, which may not run
/// `CONFIG SET` itself) can drop lock keys without a restart. The probe sees it: the process is
/// fenced at once and its pod replaced; the new process starts from the enforced settings and
/// serves only after a full hold.
#[tokio::test]
async fn a_member_whose_settings_change_while_it_runs_is_fenced_and_replaced() {
    let env = Env::start(4).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let before = env.member(NAME, 1).await.unwrap();
    let ip = env.pod_ip(NAME, 1).await;
    let admin = env.admin_login(NAME).await;
    let client = env.client_login(NAME).await;
    let mut a = connect(ip, &admin).await.unwrap();
    let refused: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut a)
        .await;
    assert!(refused.is_err(), "the operator's user may not CONFIG SET");
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&admin.user)
        .arg("+config|set")
        .query_async(&mut a)
        .await
        .unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut a)
        .await
        .unwrap();
    let changed = std::time::Instant::now();
    wait_for(
        "the changed process fenced",
        Duration::from_secs(10),
        async || Ok(connect(ip, &client).await.is_err().then_some(())),
    )
    .await;
    println!("fenced {:?} after the change", changed.elapsed());
    env.wait_event("ProcessTampered").await;
    let m = env
        .wait_member(NAME, 1, "replaced and released", Duration::from_secs(90), |m| {
            m.state == redlock_operator::crd::MemberState::Ready && m.run_id != before.run_id
        })
        .await;
    let mut fresh = connect(env.pod_ip(NAME, 1).await, &admin).await.unwrap();
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut fresh)
        .await
        .unwrap();
    assert_eq!(
        policy[1], "noeviction",
        "the new process {m:?} starts from the enforced settings"
    );
}
