//! A child process started again whenever it exits, as a DaemonSet or a systemd unit with
//! `Restart=always` keeps a node agent running. Used for the one component of real nodes
//! that exits by design while the cluster goes on (kube-proxy, `nodes::kube_proxy`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Result, anyhow};
use tracing::warn;

use crate::procs::ManagedChild;

/// Starts the process; its argument counts the starts (0 the first).
pub type Spawn = Box<dyn FnMut(u32) -> Result<ManagedChild> + Send>;

/// How long after an exit the process starts again: a crash-looping one must not spin.
const RESTART_DELAY: Duration = Duration::from_secs(1);
/// How often the supervising thread looks at the process.
const POLL: Duration = Duration::from_millis(100);

/// A running process and the thread that starts it again. Dropping it stops both.
pub struct Restarting {
    stop: Arc<AtomicBool>,
    restarts: Arc<AtomicU32>,
    thread: Option<JoinHandle<()>>,
}

impl Restarting {
    /// Starts the process; fails if the first start fails. Each exit and restart is written
    /// as a line to `log` (the process's own log, where its exit is read).
    pub fn start(name: &str, log: PathBuf, spawn: Spawn) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let restarts = Arc::new(AtomicU32::new(0));
        let (started_tx, started_rx) = mpsc::channel();
        // This thread starts every process and lives as long as they may: each dies with the
        // thread that started it (PR_SET_PDEATHSIG), not with the caller's.
        let thread = std::thread::Builder::new()
            .name(format!("{name}-supervisor"))
            .spawn({
                let (stop, restarts, name) = (stop.clone(), restarts.clone(), name.to_owned());
                move || {
                    let s = Supervisor {
                        name,
                        log,
                        spawn,
                        stop,
                        restarts,
                    };
                    s.run(started_tx)
                }
            })?;
        let mut this = Self {
            stop,
            restarts,
            thread: Some(thread),
        };
        let started = started_rx
            .recv()
            .unwrap_or_else(|_| Err(anyhow!("the {name} supervisor ended before its first start")));
        if let Err(e) = started {
            this.shut_down();
            return Err(e);
        }
        Ok(this)
    }

    /// How often the process has been started again after it exited (counted once the new
    /// process runs).
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::SeqCst)
    }

    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            warn!("a supervisor thread panicked: its process was stopped as it unwound");
        }
    }
}

impl Drop for Restarting {
    fn drop(&mut self) {
        self.shut_down();
    }
}

struct Supervisor {
    name: String,
    log: PathBuf,
    spawn: Spawn,
    stop: Arc<AtomicBool>,
    restarts: Arc<AtomicU32>,
}

impl Supervisor {
    fn run(mut self, started: mpsc::Sender<Result<()>>) {
        let mut child = match (self.spawn)(0) {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        let _ = started.send(Ok(()));
        loop {
            if self.stopped_within(POLL) {
                if let Some(mut c) = child.take() {
                    c.stop(Duration::from_secs(2));
                }
                return;
            }
            let Some(status) = child.as_mut().and_then(ManagedChild::exited) else {
                continue;
            };
            // `exited` killed what was left of its process group before reaping it (while its
            // number was still pinned); nothing of it is signalled again.
            drop(child.take());
            let n = self.restarts.load(Ordering::SeqCst) + 1;
            warn!(name = %self.name, %status, restart = n, "exited; starting it again");
            self.note(&format!(
                "{} exited ({status}); starting it again (restart {n})",
                self.name
            ));
            // Started again until it runs or the supervisor stops: a failed start is retried.
            child = Some(loop {
                if self.stopped_within(RESTART_DELAY) {
                    return;
                }
                match (self.spawn)(n) {
                    Ok(c) => break c,
                    Err(e) => self.note(&format!("starting {} failed: {e:#}", self.name)),
                }
            });
            self.restarts.store(n, Ordering::SeqCst);
        }
    }

    /// Waits `d` in steps; true as soon as the supervisor is told to stop.
    fn stopped_within(&self, d: Duration) -> bool {
        let mut left = d;
        while !self.stop.load(Ordering::SeqCst) {
            if left.is_zero() {
                return false;
            }
            let step = left.min(Duration::from_millis(50));
            std::thread::sleep(step);
            left -= step;
        }
        true
    }

    fn note(&self, line: &str) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let _ = writeln!(f, "=== supervisor: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_process_that_exits_is_started_again_and_stopped_with_its_supervisor() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let starts = dir.path().join("starts");
        let pid_file = dir.path().join("pid");
        let (log2, starts2, pid2) = (log.clone(), starts.clone(), pid_file.clone());
        // Each start records its number; the first two exit at once, the third keeps running.
        let spawn: Spawn = Box::new(move |n| {
            let script = format!(
                "echo {n} >> {}; echo $$ > {}; if [ {n} -lt 2 ]; then exit 3; fi; exec sleep 600",
                starts2.display(),
                pid2.display()
            );
            ManagedChild::spawn("p", sh(&script), &log2)
        });
        let p = Restarting::start("p", log.clone(), spawn).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.restarts() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(p.restarts(), 2, "two exits, two restarts");
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(p.restarts(), 2, "the third start keeps running");
        assert_eq!(std::fs::read_to_string(&starts).unwrap(), "0\n1\n2\n");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("=== supervisor: p exited (exit status: 3); starting it again (restart 1)"),
            "{text}"
        );
        // `exec` keeps the shell's PID: the running third start is that process.
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        };
        assert!(alive(pid), "the third start runs");
        drop(p);
        assert!(!alive(pid), "stopped with its supervisor");
    }

    #[test]
    fn a_first_start_that_fails_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let spawn: Spawn = Box::new(|_| Err(anyhow!("no such binary")));
        let err = Restarting::start("p", dir.path().join("p.log"), spawn)
            .err()
            .expect("the first start fails");
        assert_eq!(format!("{err:#}"), "no such binary");
    }
}
