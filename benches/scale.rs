//! `make bench-scale`: K clusters × 3 members on one control plane (process kubelet), for each
//! K of `BENCH_CLUSTERS` (default 10,50,200), growing the same environment:
//!
//! - time until all K clusters are Available;
//! - over a steady-state window (`BENCH_WINDOW_SECS`, 60): the operator's RSS and CPU, and
//!   the API requests it sent by verb and resource (the API server's audit log records every
//!   request of the operator's own user, `redlock-operator`);
//! - with all K running, over `BENCH_KILLS` (20) kills: detection latency (kill -9 → out of
//!   service in status: `Lost` on the refusal of its address, or already held), the
//!   replacement's hold (kill -9 → the kubelet restarts it → `Held` in status), and release
//!   lateness (heldUntil → first client SET, and the operator's own histogram); detection also
//!   as the API server saw it (kill → the operator's first status write after it, audit log),
//!   apart from the benchmark's own reads.
//!
//! `BENCH_OPERATOR_ARGS` adds `redlock-operator run` flags (e.g. `--probe-period-ms=5000`).
//! `BENCH_REDIS_CONFIG` (e.g. `hz=1`) sets the clusters' `spec.redisConfig` (comma-separated
//! `key=value`): what a setting of the members' servers costs the machine they share.
//! `BENCH_POD_NICE` (default 0) starts the pods' processes (redis-servers, exec probes) at
//! that niceness: on a real cluster they run on other machines than the API server and the
//! operator, here hundreds of them share 2 cores with both (measured: at 10 it halved the p50
//! of a kill's status write at K=200, not its p99). The steady-state window prints where the
//! machine's CPU went, by process group.
//!
//! Release build (cargo bench). Prints numbers; asserts nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use nix::sys::signal::Signal;
use redlock_operator::crd::MemberState;
use redlock_test_support::*;
use redlock_testenv::controlplane::OPERATOR_USER;
use redlock_testenv::operator::OperatorProcess;
use redlock_testenv::{ControlPlane, ControlPlaneConfig};
use serde_json::json;

#[path = "scale_support/machine_cpu.rs"]
mod machine_cpu;

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `BENCH_REDIS_CONFIG` (`hz=1,loglevel=warning`) as a `spec.redisConfig` object; a pair
/// without `=` stops the benchmark rather than run with a setting it was not asked for.
fn redis_config_from_env() -> serde_json::Value {
    let raw = std::env::var("BENCH_REDIS_CONFIG").unwrap_or_default();
    let mut config = serde_json::Map::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .unwrap_or_else(|| panic!("BENCH_REDIS_CONFIG: {pair:?} is not key=value"));
        config.insert(key.trim().into(), value.trim().into());
    }
    serde_json::Value::Object(config)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `K=k: what p50 .. ms, p99 .. ms (n=..)`, when there is anything to print.
fn print_percentiles(k: usize, what: &str, ms: &mut [f64]) {
    if !ms.is_empty() {
        println!(
            "K={k}: {what} p50 {:.0} ms, p99 {:.0} ms (n={})",
            percentile(ms, 0.5),
            percentile(ms, 0.99),
            ms.len()
        );
    }
}

/// What /proc tells of a process: CPU seconds (user + system) and memory in MiB.
struct Usage {
    cpu: f64,
    rss: f64,
    peak: f64,
    /// The part of `rss` that is anonymous memory (heap, stacks): what the operator's data costs.
    anon: f64,
    /// The part of `rss` that is mapped files (the binary's and libraries' pages in use).
    file: f64,
}

fn usage(pid: u32) -> Usage {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may contain spaces) start at ") ".
    let fields: Vec<&str> = stat[stat.rfind(") ").unwrap() + 2..].split(' ').collect();
    let ticks = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64;
    let cpu = (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Usage {
        cpu,
        rss: kib("VmRSS:") / 1024.0,
        peak: kib("VmHWM:") / 1024.0,
        anon: kib("RssAnon:") / 1024.0,
        file: kib("RssFile:") / 1024.0,
    }
}

/// The operator's requests in [from, to], by "verb resource[/subresource]", marked "(clusters'
/// namespace)" when they name an object in `ns`, where every cluster and its children live.
fn requests_by_kind(cp: &ControlPlane, ns: &str, from: Timestamp, to: Timestamp) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in operator_audit(cp, from, to) {
        let resource = match (
            e["objectRef"]["resource"].as_str(),
            e["objectRef"]["subresource"].as_str(),
        ) {
            (Some(r), Some(s)) => format!("{r}/{s}"),
            (Some(r), None) => r.to_owned(),
            _ => e["requestURI"].as_str().unwrap_or("?").to_owned(),
        };
        let scope = if e["objectRef"]["namespace"] == ns {
            " (clusters' namespace)"
        } else {
            ""
        };
        *out.entry(format!("{} {resource}{scope}", e["verb"].as_str().unwrap_or("?")))
            .or_default() += 1;
    }
    out
}

/// For each (cluster in `ns`, kill time): the operator's first successful (2xx) status write for
/// that cluster received after the kill, from the audit log, as (kill -> write complete,
/// received -> complete) in ms. A refused or failed write (409, 5xx, timeout) put nothing in
/// status and does not count. A kill with no such write in the log is left out of both.
fn status_writes_after(cp: &ControlPlane, ns: &str, kills: &[(String, Timestamp)]) -> (Vec<f64>, Vec<f64>) {
    let Some(from) = kills.iter().map(|(_, at)| *at).min() else {
        return (vec![], vec![]);
    };
    let stamp = |e: &serde_json::Value, key: &str| e[key].as_str().and_then(|t| t.parse::<Timestamp>().ok());
    let mut writes: Vec<(String, Timestamp, Timestamp)> = operator_audit(cp, from, Timestamp::now())
        .into_iter()
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["resource"] == "redlockclusters"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["namespace"] == ns
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c))
        })
        .filter_map(|e| {
            let name = e["objectRef"]["name"].as_str()?.to_owned();
            Some((
                name,
                stamp(&e, "requestReceivedTimestamp")?,
                stamp(&e, "stageTimestamp")?,
            ))
        })
        .collect();
    writes.sort_by_key(|(_, received, _)| *received);
    let ms = |from: Timestamp, to: Timestamp| to.duration_since(from).as_secs_f64() * 1000.0;
    kills
        .iter()
        .filter_map(|(name, at)| {
            let (_, received, complete) = writes
                .iter()
                .find(|(n, received, _)| n == name && received >= at)?;
            Some((ms(*at, *complete), ms(*received, *complete)))
        })
        .unzip()
}

/// The operator binary, or with `BENCH_OPERATOR_WRAPPER` (e.g. `heaptrack -o /tmp/op`) a
/// script at `script` that runs it under that command, for profiling a run.
fn wrapped_operator(script: &std::path::Path) -> std::path::PathBuf {
    let Some(wrapper) = std::env::var("BENCH_OPERATOR_WRAPPER")
        .ok()
        .filter(|w| !w.trim().is_empty())
    else {
        return operator_bin();
    };
    let text = format!("#!/bin/sh\nexec {wrapper} {} \"$@\"\n", operator_bin().display());
    std::fs::write(script, text).unwrap();
    std::fs::set_permissions(script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    println!("operator run under: {wrapper}");
    script.to_owned()
}

/// The process running the operator binary itself (`redlock-operator run`), found by its
/// command line: under a wrapper it is not the process the benchmark started.
fn operator_process() -> Option<u32> {
    let binary = operator_bin();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        let first = args.next()?;
        (first == binary.as_os_str().as_encoded_bytes() && args.next() == Some(b"run".as_slice()))
            .then_some(pid)
    })
}

/// The operator's reconciles so far (its `redlock_reconciles_total`).
async fn reconciles(env: &Env) -> f64 {
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("redlock_reconciles_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The operator's own `redlock_release_lateness_seconds` histogram, summed over clusters:
/// (bucket bound, cumulative count), by bound. It times each release against its hold's end
/// where it happens, which the benchmark's own client cannot on a saturated machine (its
/// runtime also drives the process kubelet, and its writes time out there).
async fn release_lateness_buckets(env: &Env) -> Vec<(f64, f64)> {
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("redlock_release_lateness_seconds_bucket{"))
    {
        let Some(le) = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *sums.entry(le.to_owned()).or_default() += count;
    }
    let mut buckets: Vec<(f64, f64)> = sums
        .into_iter()
        .map(|(le, n)| {
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                },
                n,
            )
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The bucket bound at or below which `q` of the releases between two readings fell, and how
/// many releases there were.
fn lateness_bound(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<(f64, f64)> {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let was = before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, c)| *c);
            (*le, n - was)
        })
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    diff.iter()
        .find(|(_, n)| *n >= q * total)
        .map(|(le, _)| (*le, total))
}

/// Whether cluster `name` is back to 3 Ready members within `timeout`. On a saturated machine
/// a restarted member's pod can take longer than that to read Ready (the process kubelet's
/// readiness exec): the benchmark says so and goes on with the next kill, rather than ending
/// without the numbers it has.
async fn ready_again(env: &Env, name: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(c) = env.clusters().get(name).await
            && c.status.as_ref().is_some_and(|s| {
                s.ready_instances == Some(3)
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
            })
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

async fn available(env: &Env) -> usize {
    let list = env.clusters().list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
                    && s.ready_instances == Some(3)
            })
        })
        .count()
}

#[tokio::main]
async fn main() {
    let ks = env_list("BENCH_CLUSTERS", "10,50,200");
    let window = Duration::from_secs(env_num("BENCH_WINDOW_SECS", 60));
    let kills = env_num("BENCH_KILLS", 20) as usize;
    let largest = ks.iter().copied().max().unwrap_or(10);
    // The process kubelet takes 110 pods per node; `spread: host` puts one member per node.
    let nodes = (largest * 3).div_ceil(90).max(3);
    let pod_nice = env_num("BENCH_POD_NICE", 0) as i32;
    let redis_config = redis_config_from_env();
    println!(
        "bench-scale: K = {ks:?} clusters x 3 members, {nodes} process-kubelet nodes, {} cores, window {window:?}, {kills} kills per K, pods at nice {pod_nice}, redisConfig {redis_config}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // Kubernetes' own node timeouts (40 s grace, 300 s eviction toleration), not the tests'
    // short ones (8 s, 10 s, for node-loss tests): with hundreds of members on 2 cores the
    // process kubelet's heartbeats run late, and the short timeouts had the taint eviction
    // controller delete healthy pods by the hundred (each a hold and a new pod).
    let cp = ControlPlane::start(ControlPlaneConfig {
        nodes,
        node_monitor_grace_period: Duration::from_secs(40),
        eviction_toleration: Duration::from_secs(300),
        // Hundreds of members on 2 cores: only the process kubelet's pods are cheap enough.
        real_nodes: false,
        pod_nice,
        ..Default::default()
    })
    .await
    .expect("control plane starts");
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let ns = cp.new_namespace("scale").await.unwrap();
    // Its own user, so the audit log attributes every request it sends.
    let kubeconfig = cp
        .kubeconfig_for_user(OPERATOR_USER, Some("system:masters"))
        .unwrap();
    // Extra `redlock-operator run` flags, e.g. a longer `--probe-period-ms`, to measure what a
    // setting costs.
    let operator_args = std::env::var("BENCH_OPERATOR_ARGS").unwrap_or_default();
    let operator_args: Vec<&str> = operator_args.split_whitespace().collect();
    let binary = wrapped_operator(&cp.dir().join("operator-wrapped.sh"));
    let mut operator = OperatorProcess::start(
        &binary,
        &kubeconfig,
        &cp.dir().join("operator.log"),
        &operator_args,
    )
    .unwrap();
    operator.wait_ready(Duration::from_secs(60)).await.unwrap();
    let mut env = Env { operator, ns, cp };
    // Under a wrapper, the operator is the wrapper's descendant: its usage is read from it.
    let pid = if binary == operator_bin() {
        env.operator.pid()
    } else {
        operator_process().expect("the wrapped operator runs")
    };

    let mut created = 0;
    for &k in &ks {
        // The clusters this step adds are the ones its kills hit: a member killed by an
        // earlier step is still in its container's restart backoff (10 s, doubling), and
        // killing it again would time that backoff, not the operator.
        let first_new = created;
        let started = Instant::now();
        for i in created..k {
            env.create_cluster(
                &format!("c{i}"),
                json!({"instances": 3, "maxLockTTL": "1s", "holdMargin": "0s", "redisConfig": redis_config}),
            )
            .await;
        }
        created = created.max(k);
        loop {
            let n = available(&env).await;
            if n >= k {
                break;
            }
            // E.g. its Lease not renewed in time on a saturated machine: it exits by design
            // (a pod would restart), and nothing would become Available any more.
            if let Some(status) = env.operator.exited() {
                let log = env.operator.log();
                let last = log
                    .lines()
                    .rev()
                    .find(|l| l.contains("ERROR"))
                    .unwrap_or_default();
                println!("K={k}: the operator exited ({status}) with {n} of {k} Available; stopping. {last}");
                return;
            }
            if started.elapsed() > Duration::from_secs(1800) {
                println!("K={k}: only {n} of {k} Available after 30 min; stopping");
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!(
            "K={k}: all {k} clusters Available {:.1} s after the first create of this step",
            started.elapsed().as_secs_f64()
        );

        tokio::time::sleep(Duration::from_secs(10)).await;
        let cpu0 = usage(pid).cpu;
        let machine0 = machine_cpu::snapshot(pid);
        let reconciles0 = reconciles(&env).await;
        let from = Timestamp::now();
        tokio::time::sleep(window).await;
        let to = Timestamp::now();
        let Usage {
            cpu: cpu1,
            rss,
            peak,
            anon,
            file,
        } = usage(pid);
        let machine1 = machine_cpu::snapshot(pid);
        let reconciles1 = reconciles(&env).await;
        let minutes = window.as_secs_f64() / 60.0;
        // Per cluster and second as well: clusters at rest are probed every period but
        // reconciled only at their TTL audit, so CPU per reconcile says little by itself.
        let rate = (reconciles1 - reconciles0) / window.as_secs_f64();
        println!(
            "K={k}: steady state: {rate:.1} reconciles/s ({:.2} per cluster), {:.0} µs CPU per cluster per second",
            rate / k as f64,
            (cpu1 - cpu0) / window.as_secs_f64() / k as f64 * 1e6
        );
        println!(
            "K={k}: steady state: operator RSS {rss:.1} MiB ({anon:.1} anonymous, {file:.1} file-backed; peak {peak:.1} MiB), CPU {:.1}% of a core; machine load average {}",
            (cpu1 - cpu0) / window.as_secs_f64() * 100.0,
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split(' ')
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!(
            "K={k}: steady state: where the machine's CPU went\n    {}",
            machine_cpu::report(&machine0, &machine1)
        );
        let requests = requests_by_kind(&env.cp, &env.ns, from, to);
        let total: usize = requests.values().sum();
        let leases: usize = requests
            .iter()
            .filter(|(k, _)| k.ends_with(" leases"))
            .map(|(_, v)| v)
            .sum();
        let in_clusters_namespace: usize = requests
            .iter()
            .filter(|(k, _)| k.ends_with("(clusters' namespace)"))
            .map(|(_, v)| v)
            .sum();
        println!(
            "K={k}: API requests per minute from the operator: {:.1} in all, {:.1} beyond its Lease, {:.1} naming an object in the clusters' namespace ({:.2} per cluster)",
            total as f64 / minutes,
            (total - leases) as f64 / minutes,
            in_clusters_namespace as f64 / minutes,
            in_clusters_namespace as f64 / minutes / k as f64
        );
        for (what, n) in &requests {
            println!("    {what}: {:.1}/min", *n as f64 / minutes);
        }

        let client = env.client_login("c0").await;
        // Kill -> status shows the member out of service / its replacement held.
        let mut out_of_service = vec![];
        let mut detection = vec![];
        // Kill -> the `since` of the first state that shows it out of service: when the
        // operator's reconcile decided it, on the same machine's clock, whatever the
        // benchmark's own reads cost.
        let mut decided = vec![];
        let mut lateness = vec![];
        // Each kill's cluster and wall-clock time, for the operator's status writes in the
        // audit log after the loop (`status_writes_after`).
        let mut killed_at = vec![];
        // How long each of the benchmark's own status reads took while it waited: what its
        // detection numbers carry besides the operator's and the API server's part.
        let mut reads = vec![];
        let operator_lateness_before = release_lateness_buckets(&env).await;
        // Kills whose hold was over before the benchmark read it (no lateness measured).
        let mut missed_holds = 0;
        for j in 0..kills {
            let (base, span) = if k > first_new {
                (first_new, k - first_new)
            } else {
                (0, k)
            };
            let name = format!("c{}", base + (j * 7) % span);
            let slot = (j % 3) as i32;
            let client = if name == "c0" {
                client.clone()
            } else {
                env.client_login(&name).await
            };
            let before = env.member(&name, slot).await.unwrap();
            let ip = env.pod_ip(&name, slot).await;
            let killed = Instant::now();
            let killed_wall = Timestamp::now();
            killed_at.push((name.clone(), killed_wall));
            env.cp
                .kubelet()
                .signal_pod(&env.ns, &format!("{name}-{slot}"), Signal::SIGKILL)
                .unwrap();
            // Out of service once status no longer shows it serving: `Lost` on the refusal of
            // its address (the crashed process's record), or already held or replaced.
            let mut out = false;
            // Held once status shows the loss with the replacement's hold: held or lost with
            // a hold, or (when the benchmark's own reads are slower than a short hold) already
            // released with a new run id.
            let until = loop {
                let read = Instant::now();
                let m = env.member(&name, slot).await.unwrap();
                reads.push(read.elapsed().as_secs_f64() * 1000.0);
                let holding = matches!(m.state, MemberState::Held | MemberState::Lost);
                if !out && (m.state != MemberState::Ready || m.run_id != before.run_id) {
                    out = true;
                    let ms = killed.elapsed().as_secs_f64() * 1000.0;
                    out_of_service.push(ms);
                    // Each as it comes: at K=200 one kill can take minutes to settle.
                    println!(
                        "K={k}: kill {j} of {name}-{slot}: out of service in status after {ms:.0} ms ({:?})",
                        m.state
                    );
                    if let Some(since) = m.since.as_ref().filter(|_| holding) {
                        let ms = since.0.duration_since(killed_wall).as_secs_f64() * 1000.0;
                        decided.push(ms.max(0.0));
                    }
                }
                if m.run_id != before.run_id && (holding || m.run_id.is_some()) {
                    detection.push(killed.elapsed().as_secs_f64() * 1000.0);
                    break m.held_until.map(|u| u.0).filter(|_| holding);
                }
                if killed.elapsed() > Duration::from_secs(60) {
                    println!("K={k}: kill {j} of {name}-{slot} not in status after 60 s");
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let Some(until) = until else {
                missed_holds += 1;
                if !ready_again(&env, &name, Duration::from_secs(60)).await {
                    println!("K={k}: {name} not back to 3 Ready within 60 s after kill {j}");
                }
                continue;
            };
            match first_client_write(ip, &client, Duration::from_secs(30)).await {
                Ok(served) => lateness.push(served.duration_since(until).as_secs_f64().max(0.0) * 1000.0),
                Err(e) => println!("K={k}: {name}-{slot}: {e}"),
            }
            if !ready_again(&env, &name, Duration::from_secs(60)).await {
                println!("K={k}: {name} not back to 3 Ready within 60 s after kill {j}");
            }
        }
        if missed_holds > 0 {
            println!(
                "K={k}: {missed_holds} of {kills} holds were over before the benchmark read them (detection counted, lateness not)"
            );
        }
        print_percentiles(
            k,
            "detection (kill -9 -> out of service in status: Lost on the refusal, or held)",
            &mut out_of_service,
        );
        print_percentiles(
            k,
            "replacement held (kill -9 -> the kubelet's restart -> Held in status)",
            &mut detection,
        );
        print_percentiles(
            k,
            "detection by the operator (kill -9 -> the reconcile that put it out of service, its `since`)",
            &mut decided,
        );
        // The same detection as the API server saw it, apart from the benchmark's own reads:
        // kill -> the operator's first status write for that cluster complete (audit log), and
        // that write's own time at the API server.
        let (mut written, mut write_took) = status_writes_after(&env.cp, &env.ns, &killed_at);
        print_percentiles(
            k,
            "detection written (kill -9 -> the operator's first status write after it complete, audit log)",
            &mut written,
        );
        print_percentiles(
            k,
            "status write at the API server (received -> complete, those writes)",
            &mut write_took,
        );
        print_percentiles(
            k,
            "the benchmark's own status reads while it waited (one GET each)",
            &mut reads,
        );
        print_percentiles(
            k,
            "release lateness (heldUntil -> first client SET)",
            &mut lateness,
        );
        let operator_lateness = release_lateness_buckets(&env).await;
        if let (Some((p50, n)), Some((p99, _))) = (
            lateness_bound(&operator_lateness_before, &operator_lateness, 0.5),
            lateness_bound(&operator_lateness_before, &operator_lateness, 0.99),
        ) {
            println!(
                "K={k}: release lateness as the operator timed it (release - heldUntil, its histogram): p50 <= {:.0} ms, p99 <= {:.0} ms (n={n})",
                p50 * 1000.0,
                p99 * 1000.0
            );
        }
    }
}
