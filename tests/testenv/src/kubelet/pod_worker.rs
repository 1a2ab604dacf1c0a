//! One task per pod bound to one of our nodes: sets up its "sandbox" (address, volumes),
//! runs init containers then containers as processes, probes and restarts them, reports
//! status, and on deletion stops everything and removes the pod object, as the kubelet's
//! pod worker does.
//!
//! The worker polls its processes on a short tick instead of waiting on them: the
//! processes are owned by the shared `ProcTable` (so they can be killed synchronously on
//! drop), and a 100 ms poll is far below every Kubernetes timing that matters here.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, Pod,
    PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::Shared;
use super::backoff::Backoff;
use super::env::{Env, PodFacts, build_env};
use super::image::{Flavor, MappedImage, map_image};
use super::probes::{ProbeKind, ProbeTracker, action_for, run_probe};
use super::proc_table::ProcId;
use super::runtime::{
    Launch, SYSTEM_PATH, VolumeDir, container_argv, container_command, host_path_of, mounts_for, workdir_for,
};
use super::status::{ContainerView, PodView, build_status, status_patch};
use super::volumes::{PodVolumes, fetch_sources};

const TICK: Duration = Duration::from_millis(100);
/// Retry delay after a failure that is not the container's fault (API error, missing
/// ConfigMap), like the kubelet's resync.
const RETRY: Duration = Duration::from_secs(2);
/// How often ConfigMap/Secret/projected volume contents are refreshed.
const VOLUME_RESYNC: Duration = Duration::from_secs(10);
/// How often the status the API shows is compared with the one last written (the real
/// kubelet's status manager syncs every 10 s).
const STATUS_CHECK: Duration = Duration::from_secs(10);

/// The latest pod object from the watch; `None` once it is gone from the API.
pub type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Init,
    Main,
}

/// A running container process.
struct Proc {
    id: ProcId,
    pid: u32,
    started_at: Timestamp,
    since: Instant,
    env: Env,
    /// Set once the kubelet decided to stop it (liveness failure, deletion).
    stopping: Option<Stopping>,
}

struct Stopping {
    sigkill_at: Instant,
    sigkill_sent: bool,
    /// A liveness/startup kill restarts unless `restartPolicy: Never`, whatever the exit code.
    restart: bool,
}

enum Run {
    /// Not running; started at `retry_at` when the pod's stage allows (never when `None`).
    Waiting {
        reason: String,
        message: Option<String>,
        retry_at: Option<Instant>,
    },
    Running(Proc),
    Terminated(ContainerStateTerminated),
}

struct Ctr {
    spec: Container,
    mapped: Result<MappedImage, String>,
    run: Run,
    last_terminated: Option<ContainerStateTerminated>,
    restart_count: i32,
    /// Whether a process of this container ran before (a new start is then a restart).
    has_run: bool,
    backoff: Backoff,
    started: bool,
    ready: bool,
    /// Bumped on every start; probe results of an older run are ignored.
    generation: u64,
    probes: Vec<(ProbeTracker, Probe)>,
}

impl Ctr {
    fn new(
        group: Group,
        spec: &Container,
        waiting_reason: &str,
        shared: &Shared,
        previous: Option<&PodStatus>,
    ) -> Self {
        let config = &shared.config;
        let mut ctr = Ctr {
            spec: spec.clone(),
            mapped: map_image(spec.image.as_deref().unwrap_or_default(), &config.extra_images),
            run: Run::Waiting {
                reason: waiting_reason.into(),
                message: None,
                retry_at: Some(Instant::now()),
            },
            last_terminated: None,
            restart_count: 0,
            has_run: false,
            backoff: Backoff::new(
                config.restart_backoff_base,
                config.restart_backoff_max,
                config.restart_backoff_reset,
            ),
            started: false,
            ready: false,
            generation: 0,
            probes: Vec::new(),
        };
        // A kubelet that comes back (node restored) continues the counts the API shows; a
        // container that was running then is gone, which is a restart.
        let statuses = previous.and_then(|s| match group {
            Group::Init => s.init_container_statuses.as_ref(),
            Group::Main => s.container_statuses.as_ref(),
        });
        if let Some(prev) = statuses.and_then(|ss| ss.iter().find(|s| s.name == spec.name)) {
            ctr.restart_count = prev.restart_count;
            ctr.last_terminated = prev.last_state.as_ref().and_then(|s| s.terminated.clone());
            let state = prev.state.as_ref();
            if state.is_some_and(|s| s.running.is_some() || s.terminated.is_some()) {
                ctr.has_run = true;
                ctr.last_terminated = Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("ContainerStatusUnknown".into()),
                    message: Some("The container could not be located when the pod was terminated".into()),
                    container_id: prev.container_id.clone(),
                    ..Default::default()
                });
            }
        }
        ctr
    }

    fn completed(&self) -> bool {
        matches!(&self.run, Run::Terminated(t) if t.exit_code == 0)
    }

    fn running(&self) -> Option<&Proc> {
        match &self.run {
            Run::Running(p) => Some(p),
            _ => None,
        }
    }

    fn wait(&mut self, reason: &str, message: Option<String>, retry_at: Option<Instant>) {
        self.run = Run::Waiting {
            reason: reason.into(),
            message,
            retry_at,
        };
    }

    fn view(&self) -> ContainerView {
        let (state, container_id) = match &self.run {
            Run::Waiting { reason, message, .. } => (
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.clone()),
                        message: message.clone(),
                    }),
                    ..Default::default()
                },
                self.last_terminated.as_ref().and_then(|t| t.container_id.clone()),
            ),
            Run::Running(p) => (
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(p.started_at)),
                    }),
                    ..Default::default()
                },
                Some(container_id(p.pid)),
            ),
            Run::Terminated(t) => (
                ContainerState {
                    terminated: Some(t.clone()),
                    ..Default::default()
                },
                t.container_id.clone(),
            ),
        };
        let running = self.running().is_some();
        ContainerView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: self
                .mapped
                .as_ref()
                .map(|m| format!("process://{}", m.program.display()))
                .unwrap_or_default(),
            container_id,
            state,
            last_terminated: self.last_terminated.clone(),
            restart_count: self.restart_count,
            ready: running && self.ready,
            started: running && self.started,
        }
    }
}

fn container_id(pid: u32) -> String {
    format!("process://{pid}")
}

/// The terminated state of `proc` after it exited with `status`, as a kubelet reports it:
/// a signal death is exit code 128 + signal.
fn terminated(proc: &Proc, status: ExitStatus) -> ContainerStateTerminated {
    let (exit_code, signal) = match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        (None, None) => (255, None),
    };
    ContainerStateTerminated {
        exit_code,
        signal,
        reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
        started_at: Some(Time(proc.started_at)),
        finished_at: Some(Time(Timestamp::now())),
        container_id: Some(container_id(proc.pid)),
        message: None,
    }
}

/// Volumes set up and an address assigned: containers may start.
struct Sandbox {
    volumes: BTreeMap<String, VolumeDir>,
}

struct Worker {
    shared: Arc<Shared>,
    pod: Arc<Pod>,
    uid: String,
    ns: String,
    name: String,
    host_ip: String,
    dir: PathBuf,
    pod_ip: Option<Ipv4Addr>,
    volumes: PodVolumes,
    sandbox: Option<Sandbox>,
    sandbox_error: Option<String>,
    next_sandbox_try: Instant,
    next_volume_resync: Instant,
    start_time: Timestamp,
    init: Vec<Ctr>,
    main: Vec<Ctr>,
    /// The pod was already terminal when this worker started: run nothing, write nothing,
    /// only remove it once deleted.
    passive: bool,
    terminating: Option<Instant>,
    /// Deleted and everything stopped; the terminal status is the next to be written.
    stopped: bool,
    /// The final delete (grace 0) went through.
    finalized: bool,
    last_written: Option<PodStatus>,
    next_write: Instant,
    /// When the API's copy of the status is next compared with `last_written`.
    next_status_check: Instant,
    probe_runs: JoinSet<ProbeResult>,
    main_pid: Arc<AtomicU32>,
}

type ProbeResult = (Group, usize, u64, ProbeKind, bool);

/// Runs the worker of one pod until the pod is gone from the API.
pub async fn run(shared: Arc<Shared>, pod: Arc<Pod>, mut updates: PodUpdates, main_pid: Arc<AtomicU32>) {
    let mut w = Worker::new(shared, pod, main_pid);
    info!(pod = %format!("{}/{}", w.ns, w.name), node = %w.host_ip, "pod worker started");
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let node = w
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let mut sender_gone = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = updates.changed(), if !sender_gone => {
                if changed.is_err() {
                    sender_gone = true;
                }
            }
            Some(result) = w.probe_runs.join_next(), if !w.probe_runs.is_empty() => {
                if let Ok(result) = result {
                    w.on_probe_result(result);
                }
            }
        }
        // A partitioned node's kubelet is silent: its containers run on as they are (no
        // status, no restarts, no reaction to the pod's deletion) until the partition heals.
        if w.shared.is_partitioned(&node) {
            continue;
        }
        let latest = if sender_gone {
            None
        } else {
            updates.borrow_and_update().clone()
        };
        match latest {
            None => {
                w.gone();
                return;
            }
            Some(pod) => w.pod = pod,
        }
        w.step().await;
    }
}

impl Worker {
    fn new(shared: Arc<Shared>, pod: Arc<Pod>, main_pid: Arc<AtomicU32>) -> Self {
        let meta = &pod.metadata;
        let uid = meta.uid.clone().unwrap_or_default();
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let node = spec.node_name.clone().unwrap_or_default();
        let host_ip = shared.node_ip(&node).map(|ip| ip.to_string()).unwrap_or_default();
        let dir = shared
            .config
            .work_dir
            .join("pods")
            .join(format!("{ns}_{name}_{uid}"));
        let previous = pod.status.as_ref();
        let phase = previous.and_then(|s| s.phase.as_deref());
        let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
        let main_reason = if has_init {
            "PodInitializing"
        } else {
            "ContainerCreating"
        };
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| Ctr::new(Group::Init, c, "PodInitializing", &shared, previous))
            .collect();
        let main = spec
            .containers
            .iter()
            .map(|c| Ctr::new(Group::Main, c, main_reason, &shared, previous))
            .collect();
        let now = Instant::now();
        Worker {
            volumes: PodVolumes::new(dir.join("volumes")),
            start_time: previous
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0)
                .unwrap_or_else(Timestamp::now),
            passive: matches!(phase, Some("Succeeded" | "Failed")),
            shared,
            pod,
            uid,
            ns,
            name,
            host_ip,
            dir,
            pod_ip: None,
            sandbox: None,
            sandbox_error: None,
            next_sandbox_try: now,
            next_volume_resync: now,
            init,
            main,
            terminating: None,
            stopped: false,
            finalized: false,
            last_written: None,
            next_write: now,
            next_status_check: now + STATUS_CHECK,
            probe_runs: JoinSet::new(),
            main_pid,
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.ns, self.name)
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    fn ctrs(&mut self, group: Group) -> &mut Vec<Ctr> {
        match group {
            Group::Init => &mut self.init,
            Group::Main => &mut self.main,
        }
    }

    /// The pod is gone from the API (deleted after termination, or force-deleted): kill
    /// whatever still runs at once and free its address and files.
    fn gone(&mut self) {
        info!(pod = %self.key(), "pod gone from the API");
        self.probe_runs.abort_all();
        self.shared.procs.kill_owner(&self.uid);
        self.shared.release_pod(&self.uid);
        let _ = std::fs::remove_dir_all(self.volumes.root());
        self.main_pid.store(0, Ordering::Relaxed);
    }

    async fn step(&mut self) {
        let now = Instant::now();
        self.follow_image_changes();
        if self.pod.metadata.deletion_timestamp.is_some() {
            if !self.passive {
                self.terminate(now);
                self.write_status().await;
            }
            // The object goes only after the terminal status is recorded, as in the kubelet.
            let ready_to_remove = self.passive || (self.stopped && self.status_is_current());
            if ready_to_remove && !self.finalized && now >= self.next_write {
                self.finalize().await;
            }
            return;
        }
        if self.passive {
            return;
        }
        self.ensure_sandbox(now).await;
        if self.sandbox.is_some() {
            self.refresh_volumes(now).await;
            self.drive_init(now).await;
            if self.init.iter().all(Ctr::completed) {
                for i in 0..self.main.len() {
                    self.drive(Group::Main, i, now).await;
                }
            }
        }
        self.write_status().await;
    }

    /// Containers' images may be changed in place; an unmapped image gets another chance.
    fn follow_image_changes(&mut self) {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let extra = self.shared.config.extra_images.clone();
        let pairs = spec
            .init_containers
            .iter()
            .flatten()
            .zip(self.init.iter_mut())
            .chain(spec.containers.iter().zip(self.main.iter_mut()));
        for (c, ctr) in pairs {
            if c.image != ctr.spec.image {
                ctr.spec.image = c.image.clone();
                ctr.mapped = map_image(c.image.as_deref().unwrap_or_default(), &extra);
                if matches!(&ctr.run, Run::Waiting { reason, .. } if reason == "ImageNotMapped") {
                    ctr.wait("ContainerCreating", None, Some(Instant::now()));
                }
            }
        }
    }

    fn facts(&self) -> PodFacts<'_> {
        PodFacts {
            pod: &self.pod,
            pod_ip: self.pod_ip.map(|ip| ip.to_string()).unwrap_or_default(),
            host_ip: self.host_ip.clone(),
        }
    }

    /// Assigns the address and materialises the volumes (retried until it works, like
    /// the kubelet's volume manager; containers wait in `ContainerCreating`).
    async fn ensure_sandbox(&mut self, now: Instant) {
        if self.sandbox.is_some() || now < self.next_sandbox_try {
            return;
        }
        self.next_sandbox_try = now + RETRY;
        if self.pod_ip.is_none() {
            let preferred = self
                .pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok());
            self.pod_ip = self.shared.allocate_ip(&self.uid, preferred);
            if self.pod_ip.is_none() {
                self.sandbox_error = Some("no free pod address".into());
                return;
            }
        }
        match self.materialise_volumes().await {
            Ok(volumes) => {
                self.sandbox = Some(Sandbox { volumes });
                self.sandbox_error = None;
                self.next_volume_resync = now + VOLUME_RESYNC;
                for d in ["logs", "containers"] {
                    let _ = std::fs::create_dir_all(self.dir.join(d));
                }
            }
            Err(e) => {
                let message = format!("{e:#}");
                if self.sandbox_error.as_ref() != Some(&message) {
                    warn!(pod = %self.key(), "{message}");
                }
                self.sandbox_error = Some(message);
            }
        }
    }

    async fn materialise_volumes(&mut self) -> anyhow::Result<BTreeMap<String, VolumeDir>> {
        let (cms, secrets) = super::volumes::referenced_sources(&self.pod);
        let sources = fetch_sources(&self.shared.client, &self.ns, &cms, &secrets).await?;
        let pod = self.pod.clone();
        let facts = PodFacts {
            pod: &pod,
            pod_ip: self.pod_ip.map(|ip| ip.to_string()).unwrap_or_default(),
            host_ip: self.host_ip.clone(),
        };
        let dirs = self
            .volumes
            .materialise(&self.shared.client, &facts, &sources)
            .await?;
        let spec_volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        Ok(spec_volumes
            .filter_map(|v| {
                let always_read_only = v.config_map.is_some()
                    || v.secret.is_some()
                    || v.downward_api.is_some()
                    || v.projected.is_some();
                dirs.get(&v.name).map(|dir| {
                    (
                        v.name.clone(),
                        VolumeDir {
                            host_path: dir.clone(),
                            always_read_only,
                        },
                    )
                })
            })
            .collect())
    }

    /// Keeps ConfigMap/Secret/downward-API/projected contents current (and tokens fresh).
    async fn refresh_volumes(&mut self, now: Instant) {
        if now < self.next_volume_resync {
            return;
        }
        self.next_volume_resync = now + VOLUME_RESYNC;
        if let Err(e) = self.materialise_volumes().await {
            debug!(pod = %self.key(), "volume refresh failed: {e:#}");
        }
    }

    /// Init containers run one after the other, each to successful completion.
    async fn drive_init(&mut self, now: Instant) {
        let never = self.restart_policy() == "Never";
        let failed = self
            .init
            .iter()
            .any(|c| matches!(&c.run, Run::Terminated(t) if t.exit_code != 0));
        if never && failed {
            return;
        }
        if let Some(i) = self.init.iter().position(|c| !c.completed()) {
            self.drive(Group::Init, i, now).await;
        }
    }

    /// Advances one container: start it when due, notice its exit, enforce a pending
    /// kill, and launch its probes.
    async fn drive(&mut self, group: Group, idx: usize, now: Instant) {
        let due_start =
            matches!(&self.ctrs(group)[idx].run, Run::Waiting { retry_at: Some(t), .. } if now >= *t);
        if due_start {
            self.start(group, idx).await;
            return;
        }
        let Some((id, pid)) = self.ctrs(group)[idx].running().map(|p| (p.id, p.pid)) else {
            return;
        };
        if let Some(status) = self.shared.procs.exited(id) {
            self.on_exit(group, idx, status, self.terminating.is_none()).await;
            return;
        }
        let ctr = &mut self.ctrs(group)[idx];
        if let Run::Running(Proc {
            stopping: Some(stop), ..
        }) = &mut ctr.run
            && !stop.sigkill_sent
            && now >= stop.sigkill_at
        {
            stop.sigkill_sent = true;
            let _ = self.shared.procs.signal(id, Signal::SIGKILL);
            return;
        }
        if self.terminating.is_none() {
            self.launch_probes(group, idx, pid, now);
        }
    }

    async fn start(&mut self, group: Group, idx: usize) {
        let now = Instant::now();
        let Some(pod_ip) = self.pod_ip else { return };
        let spec = self.ctrs(group)[idx].spec.clone();
        let mapped = match self.ctrs(group)[idx].mapped.clone() {
            Ok(m) => m,
            Err(message) => {
                let ctr = &mut self.ctrs(group)[idx];
                if !matches!(&ctr.run, Run::Waiting { reason, .. } if reason == "ImageNotMapped") {
                    warn!(pod = %self.key(), container = %spec.name, "{message}");
                }
                self.ctrs(group)[idx].wait("ImageNotMapped", Some(message), None);
                return;
            }
        };
        let env = match self.container_env(&spec, &mapped).await {
            Ok(env) => env,
            Err(message) => {
                self.ctrs(group)[idx].wait("CreateContainerConfigError", Some(message), Some(now + RETRY));
                return;
            }
        };
        let Some(sandbox) = &self.sandbox else { return };
        let mounts = match mounts_for(&spec, &sandbox.volumes, &env) {
            Ok(m) => m,
            Err(message) => {
                self.ctrs(group)[idx].wait("CreateContainerConfigError", Some(message), Some(now + RETRY));
                return;
            }
        };
        let private = self.dir.join("containers").join(&spec.name);
        let _ = std::fs::create_dir_all(&private);
        let workdir = workdir_for(&spec, Some(&mapped), &mounts, &private);
        let argv = container_argv(&spec, &mapped, &env, &pod_ip.to_string(), |path, directive| {
            config_sets(&host_path_of(path, &mounts), directive)
        });
        let mut launch = Launch {
            argv,
            env: env.vars().to_vec(),
            mounts,
            workdir,
        };
        if let Some(redis) = &self.shared.config.node_clocks
            && mapped.flavor == super::image::Flavor::RedisServer
            && Path::new(&launch.argv[0]) == mapped.program
        {
            let node = self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            launch.argv[0] = redis.display().to_string();
            launch.env.extend([
                ("LD_PRELOAD".to_string(), crate::operator::LIBFAKETIME.to_string()),
                (
                    "FAKETIME_TIMESTAMP_FILE".to_string(),
                    self.shared.clock_file(&node).display().to_string(),
                ),
                ("FAKETIME_CACHE_DURATION".to_string(), "1".to_string()),
                ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
            ]);
        }
        let log = self.dir.join("logs").join(format!("{}.log", spec.name));
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| {
                std::io::Write::write_all(
                    &mut f,
                    format!("[process kubelet] start {:?}\n", launch.argv).as_bytes(),
                )
            });
        let proc_name = format!("{}/{}", self.key(), spec.name);
        match self
            .shared
            .procs
            .spawn(&self.uid, &proc_name, container_command(&launch), &log)
        {
            Ok((id, pid)) => {
                info!(pod = %self.key(), container = %spec.name, pid, "container started");
                let probe_specs = [
                    (ProbeKind::Startup, spec.startup_probe.clone()),
                    (ProbeKind::Liveness, spec.liveness_probe.clone()),
                    (ProbeKind::Readiness, spec.readiness_probe.clone()),
                ];
                let is_main_container = group == Group::Main && idx == 0;
                let ctr = &mut self.ctrs(group)[idx];
                if ctr.has_run {
                    ctr.restart_count += 1;
                }
                ctr.has_run = true;
                ctr.generation += 1;
                ctr.probes = probe_specs
                    .into_iter()
                    .filter_map(|(kind, p)| p.map(|p| (ProbeTracker::new(kind, &p, now), p)))
                    .collect();
                // Init containers have no probes in Kubernetes (sidecars aside).
                if group == Group::Init {
                    ctr.probes.clear();
                }
                ctr.started = !ctr.probes.iter().any(|(t, _)| t.kind == ProbeKind::Startup);
                ctr.ready = ctr.started && !ctr.probes.iter().any(|(t, _)| t.kind == ProbeKind::Readiness);
                ctr.run = Run::Running(Proc {
                    id,
                    pid,
                    started_at: Timestamp::now(),
                    since: now,
                    env,
                    stopping: None,
                });
                if is_main_container {
                    self.main_pid.store(pid, Ordering::Relaxed);
                }
            }
            Err(e) => {
                let message = format!("{e:#}");
                warn!(pod = %self.key(), container = %spec.name, "{message}");
                self.ctrs(group)[idx].wait("RunContainerError", Some(message), Some(now + RETRY));
            }
        }
    }

    /// The container's environment: the runtime's basics, then the pod's definitions.
    async fn container_env(&self, spec: &Container, mapped: &MappedImage) -> Result<Env, String> {
        let (cms, secrets) = super::env::referenced_sources(spec);
        let sources = fetch_sources(&self.shared.client, &self.ns, &cms, &secrets)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let service_env = match mapped.flavor {
            Flavor::Extra => self.shared.service_env().await,
            Flavor::RedisServer => Vec::new(),
        };
        let defined = build_env(&self.facts(), spec, &sources, &service_env)?;
        let mut env = Env::default();
        env.set("PATH", format!("{}:{SYSTEM_PATH}", self.shared.bin_dir.display()));
        let hostname = self.pod.spec.as_ref().and_then(|s| s.hostname.clone());
        env.set("HOSTNAME", hostname.unwrap_or_else(|| self.name.clone()));
        env.set("HOME", "/root".into());
        for (k, v) in defined.vars() {
            env.set(k, v.clone());
        }
        Ok(env)
    }

    /// A container process exited: record it and restart per `restartPolicy` with backoff.
    async fn on_exit(&mut self, group: Group, idx: usize, status: ExitStatus, may_restart: bool) {
        let policy = self.restart_policy();
        let key = self.key();
        let pod_ref = format!("{}_{}({})", self.name, self.ns, self.uid);
        let ctr = &mut self.ctrs(group)[idx];
        let Run::Running(proc) = std::mem::replace(
            &mut ctr.run,
            Run::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
                retry_at: None,
            },
        ) else {
            return;
        };
        let term = terminated(&proc, status);
        let exit_code = term.exit_code;
        info!(pod = %key, container = %ctr.spec.name, exit_code, signal = ?term.signal, "container exited");
        ctr.started = false;
        ctr.ready = false;
        ctr.probes.clear();
        let restart = may_restart
            && match (group, &proc.stopping) {
                (Group::Init, _) => exit_code != 0 && policy != "Never",
                (Group::Main, Some(stop)) if stop.restart => policy != "Never",
                (Group::Main, _) => policy == "Always" || (policy == "OnFailure" && exit_code != 0),
            };
        let ran_for = proc.since.elapsed();
        let is_main_container = group == Group::Main && idx == 0;
        if !restart {
            ctr.run = Run::Terminated(term);
        } else {
            let delay = ctr.backoff.next_delay(ran_for);
            ctr.last_terminated = Some(term);
            if delay.is_zero() {
                ctr.wait("ContainerCreating", None, Some(Instant::now()));
            } else {
                let message = format!(
                    "back-off {}s restarting failed container={} pod={pod_ref}",
                    delay.as_secs_f64().ceil(),
                    ctr.spec.name
                );
                ctr.wait("CrashLoopBackOff", Some(message), Some(Instant::now() + delay));
            }
        }
        self.shared.procs.kill(proc.id);
        if is_main_container {
            self.main_pid.store(0, Ordering::Relaxed);
        }
        if restart
            && matches!(&self.ctrs(group)[idx].run, Run::Waiting { reason, .. } if reason == "ContainerCreating")
        {
            self.start(group, idx).await;
        }
    }

    fn launch_probes(&mut self, group: Group, idx: usize, pid: u32, now: Instant) {
        let Some(pod_ip) = self.pod_ip else { return };
        let procs = self.shared.procs.clone();
        let owner = self.uid.clone();
        let log = self.dir.join("logs");
        let ctr = match group {
            Group::Init => &mut self.init[idx],
            Group::Main => &mut self.main[idx],
        };
        let Run::Running(proc) = &ctr.run else { return };
        if proc.stopping.is_some() {
            return;
        }
        let started = ctr.started;
        let generation = ctr.generation;
        for (tracker, probe) in ctr.probes.iter_mut() {
            let gated = match tracker.kind {
                ProbeKind::Startup => started,
                _ => !started,
            };
            if gated || !tracker.due(now) {
                continue;
            }
            tracker.launched(now);
            let action = action_for(probe, &ctr.spec, pod_ip, pid, &proc.env);
            let kind = tracker.kind;
            let timeout = tracker.timing.timeout;
            let log = log.join(format!("{}.probe.log", ctr.spec.name));
            let (procs, owner) = (procs.clone(), owner.clone());
            self.probe_runs.spawn(async move {
                let ok = run_probe(action, timeout, procs, owner, log).await;
                (group, idx, generation, kind, ok)
            });
        }
    }

    fn on_probe_result(&mut self, (group, idx, generation, kind, ok): ProbeResult) {
        let policy = self.restart_policy();
        let pod_grace = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let key = self.key();
        let procs = self.shared.procs.clone();
        let ctr = &mut self.ctrs(group)[idx];
        if ctr.generation != generation || ctr.running().is_none() {
            return;
        }
        let Some(pos) = ctr.probes.iter().position(|(t, _)| t.kind == kind) else {
            return;
        };
        let (tracker, probe) = &mut ctr.probes[pos];
        tracker.record(ok);
        let (passing, failed) = (tracker.passing(), tracker.failed());
        let grace = probe.termination_grace_period_seconds.unwrap_or(pod_grace).max(0) as u64;
        let kill = match kind {
            ProbeKind::Startup if passing => {
                ctr.started = true;
                let now = Instant::now();
                for (t, _) in ctr.probes.iter_mut() {
                    t.not_before(now);
                }
                ctr.ready = !ctr.probes.iter().any(|(t, _)| t.kind == ProbeKind::Readiness);
                false
            }
            ProbeKind::Startup | ProbeKind::Liveness => failed,
            ProbeKind::Readiness => {
                ctr.ready = passing;
                false
            }
        };
        if kill && let Run::Running(proc) = &mut ctr.run {
            if proc.stopping.is_some() {
                return;
            }
            info!(pod = %key, container = %ctr.spec.name, ?kind, "probe failed, killing container");
            proc.stopping = Some(Stopping {
                sigkill_at: Instant::now() + Duration::from_secs(grace),
                sigkill_sent: false,
                restart: policy != "Never",
            });
            let signal = if grace == 0 {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            let _ = procs.signal(proc.id, Signal::SIGCONT);
            let _ = procs.signal(proc.id, signal);
        }
    }

    /// The pod is being deleted: stop every container (SIGTERM, the grace period, SIGKILL)
    /// and never start one again.
    fn terminate(&mut self, now: Instant) {
        if self.terminating.is_none() {
            let grace = self
                .pod
                .metadata
                .deletion_grace_period_seconds
                .or_else(|| {
                    self.pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                })
                .unwrap_or(30)
                .max(0) as u64;
            info!(pod = %self.key(), grace, "pod deleted, stopping containers");
            self.probe_runs.abort_all();
            let deadline = now + Duration::from_secs(grace);
            self.terminating = Some(deadline);
            let procs = self.shared.procs.clone();
            for ctr in self.init.iter_mut().chain(self.main.iter_mut()) {
                if let Run::Running(proc) = &mut ctr.run {
                    let _ = procs.signal(proc.id, Signal::SIGCONT);
                    let _ = procs.signal(
                        proc.id,
                        if grace == 0 {
                            Signal::SIGKILL
                        } else {
                            Signal::SIGTERM
                        },
                    );
                    proc.stopping = Some(Stopping {
                        sigkill_at: deadline,
                        sigkill_sent: grace == 0,
                        restart: false,
                    });
                }
            }
        }
        let procs = self.shared.procs.clone();
        let mut still_running = false;
        for ctr in self.init.iter_mut().chain(self.main.iter_mut()) {
            let Run::Running(proc) = &mut ctr.run else {
                continue;
            };
            if let Some(status) = procs.exited(proc.id) {
                let term = terminated(proc, status);
                procs.kill(proc.id);
                ctr.run = Run::Terminated(term);
                ctr.ready = false;
                ctr.started = false;
                continue;
            }
            still_running = true;
            if let Some(stop) = &mut proc.stopping
                && !stop.sigkill_sent
                && now >= stop.sigkill_at
            {
                stop.sigkill_sent = true;
                let _ = procs.signal(proc.id, Signal::SIGKILL);
            }
        }
        if !still_running && !self.stopped {
            // Containers that never ran (or wait for a restart) end as the kubelet reports
            // containers it cannot find when a pod terminates.
            for ctr in self.init.iter_mut().chain(self.main.iter_mut()) {
                if matches!(ctr.run, Run::Waiting { .. }) {
                    ctr.run = Run::Terminated(ContainerStateTerminated {
                        exit_code: 137,
                        reason: Some("ContainerStatusUnknown".into()),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        ..Default::default()
                    });
                }
            }
            self.main_pid.store(0, Ordering::Relaxed);
            self.stopped = true;
        }
    }

    /// Deletes the pod object for good once it has stopped (grace 0, only this very pod).
    async fn finalize(&mut self) {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&self.name, &params).await {
            Ok(_) => {
                info!(pod = %self.key(), "pod terminated and removed");
                self.finalized = true;
            }
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => self.finalized = true,
            Err(e) => {
                warn!(pod = %self.key(), "final delete failed: {e}");
                self.next_write = Instant::now() + Duration::from_secs(1);
            }
        }
    }

    fn view(&self) -> PodView {
        // The API refuses to change a pod's address once set, so only a pod that shows none
        // yet (or already the reported one) is reported elsewhere.
        let shown = self.pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        let reported = match self.shared.reported_address(&self.key()) {
            Some((ip, new_pods))
                if shown == Some(ip.to_string().as_str()) || (shown.is_none() && new_pods) =>
            {
                Some(ip)
            }
            _ => None,
        };
        let pod_ip = self.pod_ip.map(|own| reported.unwrap_or(own));
        PodView {
            host_ip: self.host_ip.clone(),
            pod_ip: pod_ip.map(|ip| ip.to_string()),
            start_time: self.start_time,
            sandbox_ready: self.sandbox.is_some(),
            init_containers: self.init.iter().map(Ctr::view).collect(),
            containers: self
                .main
                .iter()
                .map(|c| {
                    let mut v = c.view();
                    // Mount failures are otherwise only events; show them where tests look.
                    if self.sandbox.is_none()
                        && let (Some(err), Some(w)) = (&self.sandbox_error, v.state.waiting.as_mut())
                    {
                        w.message = Some(err.clone());
                    }
                    v
                })
                .collect(),
            terminated: self.stopped,
        }
    }

    fn current_status(&self) -> PodStatus {
        let previous = self.last_written.as_ref().or(self.pod.status.as_ref());
        build_status(&self.pod, &self.view(), previous, Timestamp::now())
    }

    fn status_is_current(&self) -> bool {
        self.last_written.as_ref() == Some(&self.current_status())
    }

    /// Whether the API's copy of the pod shows other values of the conditions this worker
    /// writes than the status it last wrote, checked every [`STATUS_CHECK`]. Then it is written
    /// again, as the real kubelet's status manager does (`needsReconcile`): under load an
    /// older write of ours can land after a newer one (the client timed it out, the API
    /// server applied it late), and the node lifecycle controller marks pods not ready
    /// while a node's heartbeats are late. Without this a pod could stay not Ready with
    /// every container ready, for good.
    fn api_shows_another_status(&mut self, now: Instant) -> bool {
        if now < self.next_status_check {
            return false;
        }
        self.next_status_check = now + STATUS_CHECK;
        let (Some(ours), Some(theirs)) = (&self.last_written, self.pod.status.as_ref()) else {
            return false;
        };
        // Only the conditions this worker writes: others' (DisruptionTarget) are theirs, and a
        // terminal phase set by the control plane is never undone (nor by the real kubelet).
        let ours_by_type: BTreeMap<&str, &str> = ours
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        let differs = theirs
            .conditions
            .iter()
            .flatten()
            .filter(|c| ours_by_type.contains_key(c.type_.as_str()))
            .any(|c| ours_by_type[c.type_.as_str()] != c.status);
        if differs {
            debug!(pod = %self.key(), "the API shows another status than the last written; writing it again");
        }
        differs
    }

    /// Writes the status through the status subresource when it changed.
    async fn write_status(&mut self) {
        let now = Instant::now();
        if now < self.next_write {
            return;
        }
        let status = self.current_status();
        if self.last_written.as_ref() == Some(&status) && !self.api_shows_another_status(now) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.ns);
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(status_patch(&status)),
            )
            .await
        {
            Ok(_) => self.last_written = Some(status),
            Err(kube::Error::Api(s)) if s.is_not_found() => self.next_write = now + RETRY,
            Err(e) => {
                warn!(pod = %self.key(), "status update failed: {e}");
                self.next_write = now + Duration::from_secs(1);
            }
        }
    }
}

impl Drop for Worker {
    /// An aborted worker (node lost, kubelet shut down) leaves no process behind.
    fn drop(&mut self) {
        self.probe_runs.abort_all();
        self.shared.procs.kill_owner(&self.uid);
        self.main_pid.store(0, Ordering::Relaxed);
    }
}

/// Whether a redis config file sets `directive` itself (`protected-mode`: the image
/// entrypoint then leaves it alone; `tls-port`: the server is TLS only). Redis keeps the last
/// value of a directive, and a port of 0 is a closed port, so `tls-port 0` last sets nothing.
fn config_sets(path: &std::path::Path, directive: &str) -> bool {
    std::fs::read_to_string(path)
        .map(|c| {
            c.lines()
                .rfind(|l| l.split_whitespace().next() == Some(directive))
                .is_some_and(|l| !(directive.ends_with("port") && l.split_whitespace().nth(1) == Some("0")))
        })
        .unwrap_or(false)
}
