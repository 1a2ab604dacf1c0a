//! The safety suite's harness (issue «Safety proof»): real Redlock clients (rslock, go-redsync,
//! node-redlock) against a RedlockCluster on the local control plane under a seeded fault
//! schedule, then the same schedule against a naive, unfenced server set (the control). The
//! pure parts (protocol, history, checker, schedule, report) live in the `safety` crate.
//!
//! Used by `tests/safety.rs` (a short run in `make test`, on real nodes there) and
//! `benches/safety_full.rs` (`make safety`, ≥ 200 faults; `make safety-real-nodes`).

mod clock_jump;
mod cluster_faults;
mod evidence;
mod forwarder;
mod host;
mod mounts;
mod naive;
mod workers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use redlock_safety::checker::{counter_mismatches, overlaps};
use redlock_safety::clock::mono_ns;
use redlock_safety::clock_jumps::{self, ClockJumpSighting};
use redlock_safety::history::Op;
use redlock_safety::host::{HostClockRecord, LoadRecord};
use redlock_safety::report::{EvidenceFile, FaultRecord, PhaseReport, Report};
use redlock_safety::rng::Rng;
use redlock_safety::schedule::{Fault, FaultKind, ScheduleConfig, schedule};
use redlock_safety::timeline::{self, Phase};
use redlock_safety::violation::WallClock;
use redlock_testenv::procs::{ManagedChild, free_port};
use serde_json::json;

use crate::Env;
use cluster_faults::{ClusterTarget, ListClients};
use naive::NaiveSet;
use workers::{ClientKind, OpShape, Workload};

const NAME: &str = "locks";
const MEMBERS: usize = 5;

/// What a run does; `from_env` reads `SAFETY_FAULTS`, `SAFETY_SEED`, `SAFETY_WORKERS`,
/// `SAFETY_KINDS`, `SAFETY_OUT`, `SAFETY_LOAD`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub seed: u64,
    pub faults: usize,
    /// The fault kinds dealt, each once per round: all of them, or those `SAFETY_KINDS` names
    /// (comma-separated, e.g. `member-clock-jump,kill-one`).
    pub kinds: Vec<FaultKind>,
    pub workers_per_client: usize,
    pub keys: usize,
    /// `maxLockTTL` of the RedlockCluster; every operator-run lock uses this TTL.
    pub max_lock_ttl_ms: u64,
    /// Critical sections are a large part of the TTL (and well inside the validity): a
    /// member restarted empty and unfenced would let a second client in while the first
    /// still works.
    pub hold_ms: (u64, u64),
    /// The control's TTL and critical sections are long, so that a majority restarting
    /// empty almost surely finds a holder in the middle of its critical section.
    pub control_ttl_ms: u64,
    pub control_hold_ms: (u64, u64),
    pub out_dir: PathBuf,
    /// Real nodes (kubelet, containerd, kube-proxy; the binary must run in the run's
    /// namespaces) instead of the process kubelet.
    pub real_nodes: bool,
    /// `SAFETY_LOAD`: busy processes per core while each phase deals its faults (0: none).
    /// They start before the first fault and are killed when the phase ends; the report
    /// states them and the load average measured.
    pub load_per_core: usize,
}

impl Settings {
    /// `out` is the default output directory under the repository's `target/`.
    pub fn from_env(default_faults: usize, default_seed: u64, out: &str) -> Self {
        let num = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
        Self {
            seed: num("SAFETY_SEED", default_seed),
            faults: num("SAFETY_FAULTS", default_faults as u64) as usize,
            kinds: kinds_from_env(),
            workers_per_client: num("SAFETY_WORKERS", 2) as usize,
            keys: 2,
            max_lock_ttl_ms: 3000,
            hold_ms: (300, 1500),
            control_ttl_ms: 10_000,
            control_hold_ms: (1000, 2500),
            out_dir: std::env::var("SAFETY_OUT").map_or_else(
                |_| {
                    redlock_testenv::controlplane::repo_root()
                        .join("target")
                        .join(out)
                },
                PathBuf::from,
            ),
            real_nodes: false,
            load_per_core: host::per_core_from_env(),
        }
    }

    /// One round: a fault of every kind dealt (`SAFETY_FAULTS` overrides the count), on real
    /// nodes when `real_nodes` (see `on_real_nodes`).
    pub fn one_round(default_seed: u64, out: &str, real_nodes: bool) -> Self {
        let mut s = Self::from_env(0, default_seed, out);
        if real_nodes {
            s = s.on_real_nodes();
        }
        if std::env::var("SAFETY_FAULTS").is_err() {
            s.faults = s.kinds.len();
        }
        s
    }

    /// The run on real nodes. A run that steps members' clocks runs its members in the
    /// `redis:7.0-faketime` image, which follows its node's clock. The binary must run in the
    /// run's namespaces (`redlock_testenv::nodes::namespace::enter`).
    pub fn on_real_nodes(mut self) -> Self {
        self.real_nodes = true;
        self
    }

    /// Whether the run steps members' clocks, so its Redis processes run under libfaketime.
    fn member_clocks(&self) -> bool {
        self.kinds.iter().any(|k| k.needs_member_clocks())
    }
}

/// `SAFETY_KINDS` (names as `FaultKind::name` spells them), or every kind.
fn kinds_from_env() -> Vec<FaultKind> {
    let Ok(names) = std::env::var("SAFETY_KINDS") else {
        return FaultKind::ALL.to_vec();
    };
    let mut kinds: Vec<FaultKind> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            FaultKind::from_name(n).unwrap_or_else(|| {
                let all: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                panic!("SAFETY_KINDS: no fault kind {n:?} (kinds: {})", all.join(", "))
            })
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    assert!(!kinds.is_empty(), "SAFETY_KINDS names no fault kind");
    kinds
}

/// The redis-server holding the shared counters: never faulted, no auth.
struct CounterServer {
    _proc: ManagedChild,
    addr: String,
}

impl CounterServer {
    async fn start(log: &Path) -> Result<Self> {
        let port = free_port()?;
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--port",
        ])
        .arg(port.to_string());
        let proc = ManagedChild::spawn("counter", cmd, log)?;
        let addr = format!("127.0.0.1:{port}");
        for _ in 0..250 {
            if let Ok(mut c) = redis::Client::open(format!("redis://{addr}"))?
                .get_multiplexed_async_connection()
                .await
                && redis::cmd("PING").query_async::<String>(&mut c).await.is_ok()
            {
                return Ok(Self { _proc: proc, addr });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("counter redis-server did not start")
    }

    async fn read(&self, keys: &[String]) -> Result<BTreeMap<String, i64>> {
        let mut c = redis::Client::open(format!("redis://{}", self.addr))?
            .get_multiplexed_async_connection()
            .await?;
        let mut out = BTreeMap::new();
        for k in keys {
            let v: Option<i64> = redis::cmd("GET")
                .arg(format!("count:{k}"))
                .query_async(&mut c)
                .await?;
            out.insert(k.clone(), v.unwrap_or(0));
        }
        Ok(out)
    }
}

/// One phase's raw results.
struct PhaseRun {
    ops: Vec<Op>,
    faults: Vec<FaultRecord>,
    counters: BTreeMap<String, i64>,
    start: u64,
    end: u64,
    /// The phase's start on both clocks: its times in UTC, as its logs and events have them.
    clock: WallClock,
    /// What it kept besides the history (operator logs, events, status history; the
    /// control's member history).
    evidence: Vec<EvidenceFile>,
    /// The load while the faults were dealt, and the host clock's steps over the phase.
    load: Option<LoadRecord>,
    host_clock: Option<HostClockRecord>,
    /// The operator's `ClockJump` events, every version seen (operator run only).
    clock_jumps: Option<Vec<ClockJumpSighting>>,
}

impl PhaseRun {
    fn report(&self) -> PhaseReport {
        let report = PhaseReport::new(
            &self.ops,
            &self.faults,
            overlaps(&self.ops),
            counter_mismatches(&self.ops, &self.counters),
            (self.end - self.start) as f64 / 1e9,
        )
        .with_wall_clock(self.clock)
        .with_host(self.load.clone(), self.host_clock.clone());
        match &self.clock_jumps {
            Some(sightings) => {
                let events = clock_jumps::occurrences(sightings, NAME, self.clock);
                let steps = self.host_clock.as_ref().map_or(&[][..], |h| &h.steps[..]);
                report.with_clock_jumps(clock_jumps::classify(&events, &self.faults, steps))
            }
            None => report,
        }
    }
}

/// `files` one a line, for an error's context.
fn evidence_lines(files: &[EvidenceFile]) -> String {
    files
        .iter()
        .map(|e| format!("\n  {} — {}", e.path, e.what))
        .collect()
}

/// Starts every client's workers against `mounts`; their names end in `suffix`.
async fn start_workers(
    settings: &Settings,
    bins: &workers::Bins,
    m: &mounts::Mounts,
    logs: &Path,
    phase: &str,
    suffix: &str,
) -> Result<Vec<workers::WorkerProc>> {
    let mut out = Vec::new();
    for client in ClientKind::ALL {
        for i in 0..settings.workers_per_client {
            let name = format!("{}-{i}{suffix}", client.name());
            let log = logs.join(format!("{phase}-{name}.log"));
            out.push(workers::spawn(bins, client, &name, m, &log).await?);
        }
    }
    Ok(out)
}

/// Waits until the workload has acquired `n` locks: every client is connected and working.
async fn warm_up(w: &Workload, n: i64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while w.acquired() < n {
        if w.failed() || Instant::now() > deadline {
            bail!(
                "workload did not acquire {n} locks within 60s (acquired {})",
                w.acquired()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Before a fault: its gap, then (up to 5 s) until a lock was acquired within the last
/// 100 ms and is still held, so the fault hits a holder early in its critical section. That
/// is when losing the lock's keys shows: without a hold, the key can be taken again while
/// the holder works on (the control run proves it).
async fn before_fault(w: &Workload, f: &Fault) -> Result<()> {
    tokio::time::sleep(Duration::from_millis(f.gap_ms)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(w.held_now() > 0 && mono_ns().saturating_sub(w.last_acquired()) < 100_000_000)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if w.failed() {
        bail!("a worker failed; see its error from finish()");
    }
    Ok(())
}

fn progress(phase: &str, f: &FaultRecord, total: usize) {
    eprintln!(
        "[{phase}] fault {}/{total} {} {:?}: recovered after {:.1}s",
        f.index + 1,
        f.kind.name(),
        f.members,
        (f.recovered - f.injected) as f64 / 1e9
    );
}

/// The operator run. Its evidence (`operator/evidence/`: the operator's logs, the events, the
/// status history) is kept whatever the run's outcome, before the control plane goes: by
/// `Recorder::finish` when the run returns (ok or an error, whose message then names the
/// files), by the recorder's `Drop` when it panics.
async fn operator_phase(
    settings: &Settings,
    plan: &[Fault],
    bins: &workers::Bins,
    rng: &mut Rng,
) -> Result<PhaseRun> {
    // One spare node: a partitioned member's replacement needs a node of its own. Member
    // clock jumps need every Redis process under libfaketime with its node's clock (the
    // process kubelet's `node_clocks`: a redis-server built with libc's malloc).
    let mut env = Env::start_config(
        redlock_testenv::ControlPlaneConfig {
            nodes: MEMBERS + 1,
            real_nodes: settings.real_nodes,
            node_clocks: settings.member_clocks().then(crate::redis_under_faketime),
            ..Default::default()
        },
        &[],
    )
    .await;
    let dir = settings.out_dir.join("operator");
    std::fs::create_dir_all(&dir)?;
    // Declared after `env`, so dropped before it (a panic): the control plane's directory
    // with the operator's logs is still there then.
    let recorder = evidence::Recorder::start(&env, NAME, &dir.join("evidence"))?;
    // From here to the phase's end: the host's clock against CLOCK_MONOTONIC.
    let host_clock =
        host::HostClock::start(&dir.join("evidence").join(evidence::HOST_CLOCK_STEPS), "operator")?;
    let result = operator_run(settings, plan, bins, rng, &mut env, &dir).await;
    let host_clock = host_clock.finish();
    let kept = recorder.finish(&env).await;
    let files = kept.files;
    eprintln!("[operator] evidence kept in {}", dir.join("evidence").display());
    match result {
        Ok(mut run) => {
            run.evidence = files;
            run.host_clock = host_clock;
            run.clock_jumps = Some(kept.clock_jumps);
            Ok(run)
        }
        Err(e) => Err(e.context(format!(
            "the operator run failed; its evidence:{}",
            evidence_lines(&files)
        ))),
    }
}

/// The operator run on `env`, from creating the cluster to the last fault's recovery.
async fn operator_run(
    settings: &Settings,
    plan: &[Fault],
    bins: &workers::Bins,
    rng: &mut Rng,
    env: &mut Env,
    dir: &Path,
) -> Result<PhaseRun> {
    // On real nodes an image built here (`ControlPlane::redis_image`: under libfaketime when
    // members' clocks jump).
    let spec = json!({"instances": MEMBERS, "maxLockTTL": format!("{}ms", settings.max_lock_ttl_ms), "holdMargin": "500ms"});
    env.create_cluster(NAME, spec).await;
    env.wait_ready(NAME, MEMBERS as i32, Duration::from_secs(90))
        .await;
    let services: Vec<String> = (0..MEMBERS).map(|i| format!("{NAME}-{i}")).collect();
    // Real nodes have kube-proxy; the process kubelet's ClusterIPs need the forwarder.
    let mut fwd = forwarder::start(env.cp.client(), &env.ns, &services, !settings.real_nodes).await?;
    let counter = CounterServer::start(&dir.join("counter.log")).await?;
    let (secret, config) = mounts::read_published(env.cp.client(), &env.ns, NAME).await?;
    let ttl: u64 = config
        .get("maxLockTTLMillis")
        .context("maxLockTTLMillis")?
        .parse()?;
    let m = mounts::write(dir, &secret, &config, &fwd.hosts, &counter.addr)?;
    if settings.real_nodes {
        // The process kubelet's forwarders keep listening on the first ClusterIPs and forward
        // by Service name; kube-proxy serves each Service only at its current ClusterIP.
        fwd.follow_cluster_ips(env.cp.client(), &env.ns, &services, m.hosts_file.clone());
    }
    let shape = OpShape {
        keys: (0..settings.keys).map(|k| format!("key{k}")).collect(),
        ttl_ms: ttl,
        hold_ms: settings.hold_ms,
        pause_ms: (5, 50),
    };
    let start = mono_ns();
    let workload = Workload::start(Vec::new(), &shape, rng);
    let mut rejoin_rng = rng.fork();
    let mut main = workload.join(
        start_workers(settings, bins, &m, dir, "operator", "").await?,
        &shape,
        &mut rejoin_rng,
    );
    let mut faults = Vec::new();
    let mut mounted = secret;
    let mut remounts = 0;
    // The busy processes (SAFETY_LOAD) from before the first fault to the last one's
    // recovery; killed on the way out whatever happens (`host::Load`'s drop).
    let mut load = None;
    let result = async {
        warm_up(&workload, 10).await?;
        load = Some(host::Load::start(settings.load_per_core, &dir.join("load.log"), "operator")?);
        let clients = ListClients {
            bins,
            workload: &workload,
            base: &m,
            shape: shape.clone(),
            rng: rng.fork(),
            dir: dir.to_owned(),
        };
        let mut target = ClusterTarget::new(env, NAME, MEMBERS, clients);
        for f in plan {
            before_fault(&workload, f).await?;
            let rec = target.inject(f).await?;
            progress("operator", &rec, plan.len());
            faults.push(rec);
            // A re-created cluster whose predecessor's Secrets the garbage collector removed
            // first has new passwords (docs/security.md "Passwords"): its clients, like pods mounting
            // `<name>-client`, start again with the new ones.
            let (secret, config) = mounts::read_published(target.env.cp.client(), &target.env.ns, NAME).await?;
            if secret.get("password") != mounted.get("password") {
                remounts += 1;
                eprintln!(
                    "[operator] fault {} {}: the client password changed (a re-created cluster's predecessor's Secrets were removed first); the workers restart with the new one ({remounts} so far)",
                    f.index + 1,
                    f.kind.name()
                );
                std::mem::take(&mut main).finish().await?;
                let again = mounts::write_beside(&dir.join(format!("remount-{remounts}")), &secret, &config, &m)?;
                let suffix = format!("-r{remounts}");
                main = workload.join(
                    start_workers(settings, bins, &again, dir, "operator", &suffix).await?,
                    &shape,
                    &mut rejoin_rng,
                );
                mounted = secret;
            }
        }
        let jumps = plan.iter().filter(|f| f.kind == FaultKind::MemberClockJump).count();
        eprintln!(
            "[operator] member clock events: {} (member-clock-jump faults: {jumps})",
            target.clock_events().await?
        );
        if target.env.cp.has_real_nodes() {
            // kube-proxy exits when the node it runs as is deleted (partition-delete-node) and
            // is started again as the next node; the Services follow their pods again then.
            eprintln!(
                "[operator] kube-proxy started again: {} times",
                target.env.cp.real_nodes().kube_proxy_restarts()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        anyhow::Ok(())
    }
    .await;
    let load = load.map(host::Load::finish);
    if let Some(l) = &load {
        eprintln!("[operator] load: {}", l.text());
    }
    let main_finished = main.finish().await;
    let ops = workload.finish().await?;
    result?;
    main_finished?;
    let end = mono_ns();
    let counters = counter.read(&shape.keys).await?;
    drop(fwd);
    Ok(PhaseRun {
        ops,
        faults,
        counters,
        start,
        end,
        // Any instant will do: neither clock is stepped on this machine during a run (the
        // faults step the operator's and the members' clocks through libfaketime only; the
        // host clock's readings, `host::HostClock`, would show a step).
        clock: evidence::wall_clock(),
        evidence: Vec::new(),
        load,
        host_clock: None,
        clock_jumps: None,
    })
}

async fn control_phase(
    settings: &Settings,
    plan: &[Fault],
    bins: &workers::Bins,
    rng: &mut Rng,
) -> Result<PhaseRun> {
    let dir = settings.out_dir.join("control");
    std::fs::create_dir_all(&dir)?;
    let host_clock = host::HostClock::start(&dir.join(evidence::HOST_CLOCK_STEPS), "control")?;
    // The same servers as the operator run's: under libfaketime when members' clocks jump.
    let clocks = settings.member_clocks().then(crate::redis_under_faketime);
    let mut set = NaiveSet::start(MEMBERS, "redlock-client", "control-password", &dir, clocks).await?;
    let counter = CounterServer::start(&dir.join("counter.log")).await?;
    let (secret, config) = set.published(settings.control_ttl_ms);
    let m = mounts::write(&dir, &secret, &config, "", &counter.addr)?;
    let shape = OpShape {
        keys: (0..settings.keys).map(|k| format!("key{k}")).collect(),
        ttl_ms: settings.control_ttl_ms,
        hold_ms: settings.control_hold_ms,
        pause_ms: (5, 50),
    };
    let start = mono_ns();
    let workload = Workload::start(
        start_workers(settings, bins, &m, &dir, "control", "").await?,
        &shape,
        rng,
    );
    let clock = evidence::wall_clock();
    let mut faults = Vec::new();
    let mut load = None;
    let result = async {
        warm_up(&workload, 3).await?;
        load = Some(host::Load::start(
            settings.load_per_core,
            &dir.join("load.log"),
            "control",
        )?);
        for f in plan {
            before_fault(&workload, f).await?;
            let rec = set.inject(f, &shape.keys).await?;
            progress("control", &rec, plan.len());
            faults.push(rec);
        }
        anyhow::Ok(())
    }
    .await;
    let load = load.map(host::Load::finish);
    if let Some(l) = &load {
        eprintln!("[control] load: {}", l.text());
    }
    let ops = workload.finish().await?;
    let host_clock = host_clock.finish();
    let files = evidence::control_files(&dir);
    eprintln!("[control] evidence kept in {}", dir.display());
    result.map_err(|e| {
        e.context(format!(
            "the control run failed; its evidence:{}",
            evidence_lines(&files)
        ))
    })?;
    let end = mono_ns();
    let counters = counter.read(&shape.keys).await?;
    Ok(PhaseRun {
        ops,
        faults,
        counters,
        start,
        end,
        clock,
        evidence: files,
        load,
        host_clock,
        clock_jumps: None,
    })
}

/// What a passing run shows: every fault injected, locks taken, no two holders and no lost
/// update under the operator (but inside a member clock jump's window before the probe that
/// finds it, the stated limit), no `ClockJump` event that neither a clock jump fault nor a
/// step of the host's clock explains, and at least one violation in the control (or the
/// checker proved nothing). The full run (benches/safety_full.rs) prints and exits on
/// `Report::passed` instead.
pub fn assert_safe(report: &Report, settings: &Settings) {
    let evidence = report.evidence_text();
    let out = settings.out_dir.display();
    assert_eq!(
        report.faults, settings.faults,
        "not every fault was injected; report in {out}\n{evidence}"
    );
    assert!(
        report.successful_operations > 0,
        "no lock was acquired; report in {out}\n{evidence}"
    );
    // Overlaps that began inside a member clock jump's window are the limit docs/safety.md "Clock
    // jumps" states (reported in the summary); every other one fails. The message names each
    // violation's members and replies, and where the operator's log, the events and the
    // status history are.
    assert_eq!(
        report.violations_beyond_limits,
        0,
        "mutual exclusion violated ({} beyond the stated limits); report in {out}/summary.md\n{}",
        report.violations_beyond_limits,
        report.violations_text()
    );
    assert_eq!(
        report.lost_updates_beyond_limits, 0,
        "lost updates: {:?}; report in {out}\n{evidence}",
        report.operator.counter_mismatches
    );
    // A clock jump no clock made: the operator fenced and held a member for nothing (under
    // load: a slow answer mistaken for a jump).
    assert_eq!(
        report.false_clock_jumps,
        0,
        "the operator reported clock jumps that no clock made; report in {out}/summary.md\n{}",
        report.false_clock_jumps_text()
    );
    assert!(
        report.control_violations >= 1,
        "the control run showed no violation: the checker proved nothing; report in {out}\n{evidence}"
    );
}

/// Runs both phases and writes `report.json`, `summary.md`, `timeline.svg` and `history.json`
/// to `settings.out_dir`, and each phase's evidence under it (`operator/evidence/`: the
/// operator's logs, the events, the status history; `control/evidence/`: the members'
/// history), whatever the outcome.
pub async fn run(settings: &Settings) -> Result<Report> {
    std::fs::create_dir_all(&settings.out_dir)?;
    eprintln!(
        "safety: seed {} faults {} (replay with SAFETY_SEED={}){}",
        settings.seed,
        settings.faults,
        settings.seed,
        if settings.load_per_core > 0 {
            format!(
                "; load: {} busy processes per core × {} cores while the faults run",
                settings.load_per_core,
                host::cores()
            )
        } else {
            String::new()
        }
    );
    let config = ScheduleConfig {
        members: MEMBERS,
        kinds: settings.kinds.clone(),
        ..Default::default()
    };
    // A jump must expire every lock on the member at once, in both runs.
    let longest_ttl = settings.max_lock_ttl_ms.max(settings.control_ttl_ms);
    if settings.member_clocks() && config.clock_jump_s.0 * 1000 <= longest_ttl {
        bail!(
            "member clock jumps of {} s at least do not outlast a lock TTL of {longest_ttl} ms",
            config.clock_jump_s.0
        );
    }
    let bins = workers::build(&settings.out_dir).await?;
    let plan = schedule(settings.seed, settings.faults, &config);
    let mut rng = Rng::new(settings.seed ^ 0x5AFE);
    let operator = operator_phase(settings, &plan, &bins, &mut rng).await?;
    let control = control_phase(settings, &plan, &bins, &mut rng).await?;

    let clients: Vec<String> = ClientKind::ALL.iter().map(|c| c.name().to_string()).collect();
    let (op_report, control_report) = (operator.report(), control.report());
    let svg = timeline::svg(
        &[
            Phase {
                title: "RedlockCluster (operator)".into(),
                ops: &operator.ops,
                faults: &operator.faults,
                violations: &op_report.violations,
                start: operator.start,
                end: operator.end,
            },
            Phase {
                title: "control: unfenced restarts".into(),
                ops: &control.ops,
                faults: &control.faults,
                violations: &control_report.violations,
                start: control.start,
                end: control.end,
            },
        ],
        &clients,
    );
    let settings_json = json!({
        "members": MEMBERS,
        "workers_per_client": settings.workers_per_client,
        "workers": settings.workers_per_client * ClientKind::ALL.len(),
        "keys": settings.keys,
        "fault_kinds_dealt": settings.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "max_lock_ttl_ms": settings.max_lock_ttl_ms,
        "hold_ms": [settings.hold_ms.0, settings.hold_ms.1],
        "control_ttl_ms": settings.control_ttl_ms,
        "control_hold_ms": [settings.control_hold_ms.0, settings.control_hold_ms.1],
        "load_per_core": settings.load_per_core,
        "cores": host::cores(),
        "busy_processes": settings.load_per_core * host::cores(),
    });
    let report = Report::new(settings.seed, clients, settings_json, op_report, control_report)
        .with_evidence([operator.evidence.clone(), control.evidence.clone()].concat());
    std::fs::write(
        settings.out_dir.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(settings.out_dir.join("summary.md"), report.summary_markdown())?;
    std::fs::write(settings.out_dir.join("timeline.svg"), svg)?;
    std::fs::write(
        settings.out_dir.join("history.json"),
        serde_json::to_string(&json!({"operator": operator.ops, "control": control.ops}))?,
    )?;
    eprintln!("{}", report.summary_markdown());
    eprintln!(
        "safety: report in {}\n{}",
        settings.out_dir.join("summary.md").display(),
        report.evidence_text()
    );
    Ok(report)
}
