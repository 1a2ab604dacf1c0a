//! Container probes: the pure bookkeeping of results against thresholds, and running one
//! probe (exec in the container's mount namespace, TCP connect, or HTTP GET).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::proc_table::{ProcId, ProcTable};
use super::runtime::exec_probe_command;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

/// Timing and thresholds of a probe, with the API's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTiming {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeTiming {
    pub fn of(p: &Probe) -> Self {
        let secs = |v: Option<i32>, default: i32| Duration::from_secs(v.unwrap_or(default).max(0) as u64);
        Self {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// The state of one probe of one container run.
///
/// `passing` starts as the kubelet assumes: a container is live until proven otherwise,
/// but neither started nor ready. It flips only after `success_threshold` consecutive
/// successes or `failure_threshold` consecutive failures.
#[derive(Debug, Clone)]
pub struct ProbeTracker {
    pub kind: ProbeKind,
    pub timing: ProbeTiming,
    next_due: Instant,
    in_flight: bool,
    successes: u32,
    failures: u32,
    passing: bool,
}

impl ProbeTracker {
    pub fn new(kind: ProbeKind, probe: &Probe, container_started: Instant) -> Self {
        let timing = ProbeTiming::of(probe);
        Self {
            kind,
            next_due: container_started + timing.initial_delay,
            timing,
            in_flight: false,
            successes: 0,
            failures: 0,
            passing: kind == ProbeKind::Liveness,
        }
    }

    pub fn passing(&self) -> bool {
        self.passing
    }

    /// Whether the failure threshold has been reached (startup and liveness then kill).
    pub fn failed(&self) -> bool {
        self.failures >= self.timing.failure_threshold
    }

    pub fn due(&self, now: Instant) -> bool {
        !self.in_flight && now >= self.next_due
    }

    /// Starts no earlier than `at` (liveness and readiness wait for the startup probe).
    pub fn not_before(&mut self, at: Instant) {
        self.next_due = self.next_due.max(at);
    }

    /// Marks a probe run as started at `now`; the next one is one period later.
    pub fn launched(&mut self, now: Instant) {
        self.in_flight = true;
        self.next_due = now + self.timing.period;
    }

    /// Records a result; returns whether `passing` changed.
    pub fn record(&mut self, ok: bool) -> bool {
        self.in_flight = false;
        let before = self.passing;
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= self.timing.success_threshold {
                self.passing = true;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= self.timing.failure_threshold {
                self.passing = false;
            }
        }
        before != self.passing
    }
}

/// What to do for one probe run, resolved from the probe and the container.
#[derive(Debug, Clone)]
pub enum ProbeAction {
    Exec {
        pid: u32,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
    Tcp(SocketAddr),
    Http {
        addr: SocketAddr,
        host_header: String,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A probe this kubelet cannot run (grpc, https, a non-loopback host); always fails.
    Unsupported(String),
}

fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("bad port {p}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}

/// Only loopback addresses may be probed: nothing here may reach another network.
fn probe_host(host: Option<&String>, pod_ip: Ipv4Addr) -> Result<IpAddr, String> {
    match host.filter(|h| !h.is_empty()) {
        None => Ok(IpAddr::V4(pod_ip)),
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) if ip.is_loopback() => Ok(ip),
            _ => Err(format!("probe host {h:?} is not a loopback address")),
        },
    }
}

/// Resolves a probe of `container` (running as `pid` with `env`) to an action.
pub fn action_for(
    probe: &Probe,
    container: &Container,
    pod_ip: Ipv4Addr,
    pid: u32,
    env: &super::env::Env,
) -> ProbeAction {
    let resolve = || -> Result<ProbeAction, String> {
        if let Some(exec) = &probe.exec {
            // The kubelet expands `$(VAR)` in exec probe commands too.
            let argv: Vec<String> = exec.command.iter().flatten().map(|a| env.expand(a)).collect();
            if argv.is_empty() {
                return Err("exec probe without command".into());
            }
            return Ok(ProbeAction::Exec {
                pid,
                argv,
                env: env.vars().to_vec(),
            });
        }
        if let Some(tcp) = &probe.tcp_socket {
            let ip = probe_host(tcp.host.as_ref(), pod_ip)?;
            return Ok(ProbeAction::Tcp(SocketAddr::new(
                ip,
                resolve_port(&tcp.port, container)?,
            )));
        }
        if let Some(http) = &probe.http_get {
            if http
                .scheme
                .as_deref()
                .is_some_and(|s| !s.eq_ignore_ascii_case("HTTP"))
            {
                return Err("only HTTP probes are supported".into());
            }
            let ip = probe_host(http.host.as_ref(), pod_ip)?;
            let port = resolve_port(&http.port, container)?;
            let path = http
                .path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/".into());
            let path = if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            };
            let headers: Vec<(String, String)> = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            let host_header = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("host"))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| format!("{ip}:{port}"));
            return Ok(ProbeAction::Http {
                addr: SocketAddr::new(ip, port),
                host_header,
                path,
                headers: headers
                    .into_iter()
                    .filter(|(n, _)| !n.eq_ignore_ascii_case("host"))
                    .collect(),
            });
        }
        Err("probe type not supported by the process kubelet".into())
    };
    resolve().unwrap_or_else(ProbeAction::Unsupported)
}

/// Kills an exec probe's process when the probe is dropped (timeout, container restart,
/// node loss), so no probe outlives its purpose.
struct ProbeProcess<'a> {
    table: &'a ProcTable,
    id: ProcId,
}

impl Drop for ProbeProcess<'_> {
    fn drop(&mut self) {
        self.table.kill(self.id);
    }
}

/// Runs one probe; `true` on success. Never takes much longer than `timeout`.
pub async fn run_probe(
    action: ProbeAction,
    timeout: Duration,
    procs: Arc<ProcTable>,
    owner: String,
    log: PathBuf,
) -> bool {
    match action {
        ProbeAction::Exec { pid, argv, env } => {
            let mount_ns = match procs.mount_namespace(pid) {
                Ok(ns) => ns,
                Err(e) => {
                    append_log(&log, &format!("probe cannot run: {e}"));
                    return false;
                }
            };
            let cmd = exec_probe_command(mount_ns, &argv, &env);
            let id = match procs.spawn(&owner, "exec-probe", cmd, &log) {
                Ok((id, _)) => id,
                Err(e) => {
                    append_log(&log, &format!("probe did not start: {e:#}"));
                    return false;
                }
            };
            let guard = ProbeProcess { table: &procs, id };
            let deadline = Instant::now() + timeout;
            loop {
                if let Some(status) = procs.exited(guard.id) {
                    return status.success();
                }
                if Instant::now() >= deadline {
                    append_log(&log, "probe timed out");
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        ProbeAction::Tcp(addr) => matches!(
            tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await,
            Ok(Ok(_))
        ),
        ProbeAction::Http {
            addr,
            host_header,
            path,
            headers,
        } => tokio::time::timeout(timeout, http_get(addr, &host_header, &path, &headers))
            .await
            .ok()
            .flatten()
            .is_some_and(|code| (200..400).contains(&code)),
        ProbeAction::Unsupported(reason) => {
            append_log(&log, &format!("probe cannot run: {reason}"));
            false
        }
    }
}

fn append_log(log: &std::path::Path, line: &str) {
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
}

/// A plain HTTP/1.1 GET; returns the status code.
async fn http_get(addr: SocketAddr, host: &str, path: &str, headers: &[(String, String)]) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    parse_status_line(&String::from_utf8_lossy(&head))
}

fn parse_status_line(head: &str) -> Option<u16> {
    let line = head.lines().next()?;
    let mut parts = line.split_whitespace();
    let version = parts.next()?;
    if !version.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, TCPSocketAction};

    fn probe(success: i32, failure: i32) -> Probe {
        Probe {
            initial_delay_seconds: Some(5),
            period_seconds: Some(2),
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            ..Default::default()
        }
    }

    #[test]
    fn readiness_flips_only_at_thresholds() {
        let t0 = Instant::now();
        let mut r = ProbeTracker::new(ProbeKind::Readiness, &probe(2, 3), t0);
        assert!(!r.passing());
        assert!(!r.due(t0), "initial delay");
        assert!(r.due(t0 + Duration::from_secs(5)));
        r.launched(t0 + Duration::from_secs(5));
        assert!(!r.due(t0 + Duration::from_secs(6)), "in flight");
        assert!(!r.record(true));
        assert!(!r.due(t0 + Duration::from_secs(6)), "one period");
        assert!(r.due(t0 + Duration::from_secs(7)));
        assert!(r.record(true), "second success makes it ready");
        assert!(!r.record(false) && !r.record(false));
        assert!(r.passing());
        assert!(r.record(false), "third failure");
        assert!(!r.passing() && r.failed());
    }

    #[test]
    fn liveness_starts_passing_and_startup_not() {
        let t0 = Instant::now();
        let mut l = ProbeTracker::new(ProbeKind::Liveness, &probe(1, 2), t0);
        assert!(l.passing());
        l.record(false);
        assert!(l.passing() && !l.failed());
        l.record(true);
        l.record(false);
        assert!(l.passing(), "failures must be consecutive");
        l.record(false);
        assert!(!l.passing() && l.failed());
        let s = ProbeTracker::new(ProbeKind::Startup, &probe(1, 2), t0);
        assert!(!s.passing());
    }

    #[test]
    fn defaults_and_minimums() {
        let t = ProbeTiming::of(&Probe::default());
        assert_eq!(
            t,
            ProbeTiming {
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
    }

    #[test]
    fn actions_resolve_named_ports_and_refuse_non_loopback_hosts() {
        let c = Container {
            ports: Some(vec![ContainerPort {
                name: Some("redis".into()),
                container_port: 6380,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let ip = Ipv4Addr::new(127, 2, 1, 1);
        let env = super::super::env::Env::default();
        let tcp = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("redis".into()),
                host: None,
            }),
            ..Default::default()
        };
        match action_for(&tcp, &c, ip, 1, &env) {
            ProbeAction::Tcp(addr) => assert_eq!(addr, "127.2.1.1:6380".parse().unwrap()),
            other => panic!("{other:?}"),
        }
        let remote = Probe {
            http_get: Some(HTTPGetAction {
                host: Some("10.0.0.1".into()),
                port: IntOrString::Int(80),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            action_for(&remote, &c, ip, 1, &env),
            ProbeAction::Unsupported(_)
        ));
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line("HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(parse_status_line("garbage"), None);
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let code = if req.starts_with("GET /ok ") { 200 } else { 500 };
                let _ = s.write_all(format!("HTTP/1.1 {code} X\r\n\r\n").as_bytes()).await;
            }
        });
        let procs = Arc::new(ProcTable::default());
        let log = PathBuf::from("/dev/null");
        let t = Duration::from_secs(1);
        assert!(run_probe(ProbeAction::Tcp(addr), t, procs.clone(), "o".into(), log.clone()).await);
        let http = |path: &str| ProbeAction::Http {
            addr,
            host_header: "x".into(),
            path: path.into(),
            headers: vec![],
        };
        assert!(run_probe(http("/ok"), t, procs.clone(), "o".into(), log.clone()).await);
        assert!(!run_probe(http("/bad"), t, procs.clone(), "o".into(), log.clone()).await);
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(!run_probe(ProbeAction::Tcp(closed), t, procs, "o".into(), log).await);
    }
}
