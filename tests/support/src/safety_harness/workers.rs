//! The client workers: building them, starting them the way a pod runs (mounted Secret and
//! ConfigMap, its own `/etc/hosts` in a private mount namespace), and the workload that
//! drives them: each worker, in a loop, locks a random key, does the critical section and
//! releases, while every event goes into one shared history.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use redlock_safety::history::{History, Op};
use redlock_safety::protocol::{self, Event};
use redlock_safety::rng::Rng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use super::mounts::Mounts;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    Rslock,
    GoRedsync,
    NodeRedlock,
}

impl ClientKind {
    pub const ALL: [ClientKind; 3] = [ClientKind::Rslock, ClientKind::GoRedsync, ClientKind::NodeRedlock];

    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Rslock => "rslock",
            ClientKind::GoRedsync => "go-redsync",
            ClientKind::NodeRedlock => "node-redlock",
        }
    }
}

/// The built workers.
pub struct Bins {
    rslock: PathBuf,
    go: PathBuf,
    node_script: PathBuf,
}

fn repo() -> PathBuf {
    redlock_testenv::controlplane::repo_root()
}

async fn run(mut cmd: Command, what: &str) -> Result<()> {
    let out = cmd.output().await.with_context(|| format!("start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Builds the three workers (each step is a no-op when up to date): the rslock worker with
/// cargo, the Go worker with `go build`, the Node worker's packages with `npm ci` from the
/// committed package-lock.json.
pub async fn build(out_dir: &Path) -> Result<Bins> {
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(|_| repo().join("target"), PathBuf::from);
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["build", "--quiet", "-p", "rslock-worker"])
        .current_dir(repo());
    run(cargo, "cargo build -p rslock-worker").await?;

    let go_dir = repo().join("tests/safety/go-worker");
    let go = out_dir.join("go-worker");
    let mut gob = Command::new("go");
    gob.arg("build").arg("-o").arg(&go).arg(".").current_dir(&go_dir);
    run(gob, "go build (tests/safety/go-worker)").await?;

    let node_dir = repo().join("tests/safety/node-worker");
    let installed = node_dir.join("node_modules/.package-lock.json");
    let lock = std::fs::read(node_dir.join("package-lock.json"))?;
    // npm ci wipes node_modules; only run it when the lock file changed since the last install.
    let stamp = node_dir.join("node_modules/.safety-lock-stamp");
    if !installed.exists() || std::fs::read(&stamp).ok().as_deref() != Some(&lock[..]) {
        let mut npm = Command::new("npm");
        npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&node_dir);
        run(npm, "npm ci (tests/safety/node-worker)").await?;
        std::fs::write(&stamp, &lock)?;
    }
    Ok(Bins {
        rslock: target.join("debug/rslock-worker"),
        go,
        node_script: node_dir.join("worker.js"),
    })
}

/// A running worker, ready for commands.
pub struct WorkerProc {
    pub name: String,
    pub client: ClientKind,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

/// Starts a worker with the mounts of a pod and waits for its `ready` line.
pub async fn spawn(
    bins: &Bins,
    client: ClientKind,
    name: &str,
    mounts: &Mounts,
    log: &Path,
) -> Result<WorkerProc> {
    // The worker runs in its own mount namespace where the hosts file is /etc/hosts: Go's,
    // Node's and Rust's resolvers all read it, so the published names resolve as in a pod.
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        r#"mount --bind "$0" /etc/hosts && exec "$@""#,
    ])
    .arg(&mounts.hosts_file);
    match client {
        ClientKind::Rslock => cmd.arg(&bins.rslock),
        ClientKind::GoRedsync => cmd.arg(&bins.go),
        ClientKind::NodeRedlock => cmd.arg("node").arg(&bins.node_script),
    };
    cmd.env("REDLOCK_SECRET_DIR", &mounts.secret_dir)
        .env("REDLOCK_CONFIG_DIR", &mounts.config_dir)
        .env("COUNTER_ADDR", &mounts.counter_addr)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; a killed test leaves no worker behind.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("spawn worker {name}"))?;
    let stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .with_context(|| format!("worker {name} not ready in 30s"))??;
    match first.as_deref().map(protocol::parse) {
        Some(Ok(Event::Ready { .. })) => {}
        other => bail!(
            "worker {name} did not start: {other:?}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
    Ok(WorkerProc {
        name: name.to_owned(),
        client,
        child,
        stdin,
        lines,
    })
}

/// What each operation asks for.
#[derive(Debug, Clone)]
pub struct OpShape {
    pub keys: Vec<String>,
    pub ttl_ms: u64,
    /// Range of the critical section's sleep.
    pub hold_ms: (u64, u64),
    /// Range of the pause between a worker's operations.
    pub pause_ms: (u64, u64),
}

/// What the workers' loops share with the harness.
#[derive(Default)]
struct Shared {
    history: Mutex<History>,
    /// Locks held right now (acquired, release not yet invoked).
    held: AtomicI64,
    acquired: AtomicI64,
    /// CLOCK_MONOTONIC ns of the latest acquisition.
    last_acquired: AtomicU64,
    stop: AtomicBool,
    /// A worker of any group failed (its error comes out of its group's or the workload's
    /// `finish`).
    failed: AtomicBool,
}

/// The workers running their loops.
pub struct Workload {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<Result<()>>>,
}

/// Workers that joined a running workload, stopped on their own before it ends (clients that
/// used one list of servers for a while, e.g. during a resize). The default is empty.
#[derive(Default)]
pub struct Group {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Result<()>>>,
}

impl Group {
    /// Lets each worker of the group finish its operation in flight, then stops it; their
    /// operations stay in the workload's history.
    pub async fn finish(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.context("worker task")??;
        }
        Ok(())
    }
}

impl Workload {
    pub fn start(workers: Vec<WorkerProc>, shape: &OpShape, rng: &mut Rng) -> Self {
        let shared = Arc::new(Shared::default());
        // The run's own workers stop only with the whole workload.
        let never = Arc::new(AtomicBool::new(false));
        let tasks = spawn_drivers(workers, shape, rng, &shared, &never);
        Workload { shared, tasks }
    }

    /// Adds workers to the running workload, writing into the same history.
    pub fn join(&self, workers: Vec<WorkerProc>, shape: &OpShape, rng: &mut Rng) -> Group {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = spawn_drivers(workers, shape, rng, &self.shared, &stop);
        Group { stop, tasks }
    }

    /// Locks held right now (acquired, release not yet invoked).
    pub fn held_now(&self) -> i64 {
        self.shared.held.load(Ordering::Relaxed)
    }

    pub fn acquired(&self) -> i64 {
        self.shared.acquired.load(Ordering::Relaxed)
    }

    /// CLOCK_MONOTONIC ns of the latest acquisition (0 before the first).
    pub fn last_acquired(&self) -> u64 {
        self.shared.last_acquired.load(Ordering::Relaxed)
    }

    /// Whether a worker has failed (its error comes out of `finish`).
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed) || self.tasks.iter().any(|t| t.is_finished())
    }

    /// Lets every worker finish its operation in flight, stops them, returns the history.
    pub async fn finish(self) -> Result<Vec<Op>> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.context("worker task")??;
        }
        Ok(self.shared.history.lock().unwrap().ops())
    }
}

fn spawn_drivers(
    workers: Vec<WorkerProc>,
    shape: &OpShape,
    rng: &mut Rng,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<Result<()>>> {
    workers
        .into_iter()
        .map(|worker| {
            let (shape, rng, shared, stop) = (shape.clone(), rng.fork(), shared.clone(), stop.clone());
            tokio::spawn(async move {
                let done = drive(worker, shape, rng, shared.clone(), stop).await;
                if done.is_err() {
                    shared.failed.store(true, Ordering::Relaxed);
                }
                done
            })
        })
        .collect()
}

async fn drive(
    mut w: WorkerProc,
    shape: OpShape,
    mut rng: Rng,
    shared: Arc<Shared>,
    group_stop: Arc<AtomicBool>,
) -> Result<()> {
    while !shared.stop.load(Ordering::Relaxed) && !group_stop.load(Ordering::Relaxed) {
        let key = &shape.keys[rng.range(0, shape.keys.len() as u64 - 1) as usize];
        let hold = rng.range(shape.hold_ms.0, shape.hold_ms.1);
        let seq = shared
            .history
            .lock()
            .unwrap()
            .issue(w.client.name(), &w.name, key);
        w.stdin
            .write_all(protocol::lock_command(seq, key, shape.ttl_ms, hold).as_bytes())
            .await
            .with_context(|| format!("worker {} stdin", w.name))?;
        loop {
            // Every client bounds its own calls well below this; silence means a hung worker.
            let line = tokio::time::timeout(Duration::from_secs(60), w.lines.next_line())
                .await
                .with_context(|| format!("worker {} silent for 60s in op {seq}", w.name))??
                .with_context(|| format!("worker {} exited during op {seq}", w.name))?;
            let event = protocol::parse(&line).map_err(anyhow::Error::msg)?;
            match event {
                Event::AcquireOk { t, .. } => {
                    shared.held.fetch_add(1, Ordering::Relaxed);
                    shared.acquired.fetch_add(1, Ordering::Relaxed);
                    shared.last_acquired.fetch_max(t, Ordering::Relaxed);
                }
                Event::ReleaseInvoke { .. } => {
                    shared.held.fetch_sub(1, Ordering::Relaxed);
                }
                _ => {}
            }
            let done = shared.history.lock().unwrap().apply(&w.name, &event);
            if done.map_err(anyhow::Error::msg)? == Some(seq) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(
            rng.range(shape.pause_ms.0, shape.pause_ms.1),
        ))
        .await;
    }
    let _ = w.stdin.write_all(b"quit\n").await;
    if tokio::time::timeout(Duration::from_secs(5), w.child.wait())
        .await
        .is_err()
    {
        let _ = w.child.kill().await;
    }
    Ok(())
}
