//! A child process started again when it exits on its own, as the kubelet restarts a
//! container of a Deployment's pod (`restartPolicy: Always`) or systemd a unit with
//! `Restart=always`. Used for the one component of real nodes that exits by design while the
//! cluster goes on (kube-proxy, `nodes::kube_proxy`: a fixed 1 s delay), and for the operator
//! under test (`operator::OperatorProcess`: the kubelet's CrashLoopBackOff), so that a test
//! measures what the operator does after an exit (a lost lease, a crash), not that the harness
//! left it dead.
//!
//! An exit on purpose is not fought: [`Restarting::stop_restarting`] (which a test's kill,
//! SIGTERM or wait for the exit calls first) makes the next exit final and cancels a restart
//! that is due. Every exit, restart and stop is written as a line to the process's own log
//! (`=== supervisor: ...`), where its exit is read.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use nix::sys::signal::Signal;
use tracing::warn;

use crate::kubelet::backoff::Backoff;
use crate::procs::ManagedChild;

/// Starts the process; its argument counts the starts (0 the first).
pub type Spawn = Box<dyn FnMut(u32) -> Result<ManagedChild> + Send>;

/// kube-proxy's delay ([`Restarting::start`]): a crash-looping one must not spin.
const RESTART_DELAY: Duration = Duration::from_secs(1);
/// How long a process gets from SIGTERM to SIGKILL when its supervisor stops it
/// ([`Restarting::start`]).
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often the supervising thread looks at the process.
const POLL: Duration = Duration::from_millis(100);

/// When a process that exited on its own is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Never: its first exit is final (a bare process, as `restartPolicy: Never`).
    Never,
    /// Always, this long after the exit.
    Fixed(Duration),
    /// Always, with the kubelet's CrashLoopBackOff (`kubelet::backoff::Backoff`, which the
    /// process kubelet uses too): the first restart is immediate, every further one waits
    /// `base`, `2·base`, … up to `max`; a process that ran for `reset_after` starts over at an
    /// immediate restart. A start that fails counts as a crash.
    CrashLoopBackOff {
        base: Duration,
        max: Duration,
        reset_after: Duration,
    },
}

impl RestartPolicy {
    /// The kubelet's back-off: 10 s, doubling up to 300 s, reset after a 10 min run.
    pub const fn kubelet() -> Self {
        Self::kubelet_with_base(Duration::from_secs(10))
    }

    /// The kubelet's back-off with another first delay (its cap and reset stay the kubelet's).
    pub const fn kubelet_with_base(base: Duration) -> Self {
        Self::CrashLoopBackOff {
            base,
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

/// The delays a policy gives, exit after exit.
enum Delays {
    Never,
    Fixed(Duration),
    Backoff(Backoff),
}

impl Delays {
    fn new(policy: RestartPolicy) -> Self {
        match policy {
            RestartPolicy::Never => Self::Never,
            RestartPolicy::Fixed(d) => Self::Fixed(d),
            RestartPolicy::CrashLoopBackOff {
                base,
                max,
                reset_after,
            } => Self::Backoff(Backoff::new(base, max, reset_after)),
        }
    }

    /// How long after an exit of a process that ran for `ran_for` it starts again.
    fn next(&mut self, ran_for: Duration) -> Option<Duration> {
        match self {
            Self::Never => None,
            Self::Fixed(d) => Some(*d),
            Self::Backoff(b) => Some(b.next_delay(ran_for)),
        }
    }
}

/// What [`Restarting::stop_restarting`] found, all under one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// A process runs (and will not be started again once it exits).
    pub running: bool,
    /// How many exits there were before: a running process's exit will be number `exits`
    /// (counted from 0) in [`Restarting::exits`].
    pub exits: usize,
    /// No process ran: one had exited and its restart, due later, is cancelled.
    pub cancelled_restart: bool,
}

/// A running process and the thread that starts it again. Dropping it stops both.
pub struct Restarting {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Restarting {
    /// Starts the process and starts it again 1 s after each exit; fails if the first start
    /// fails. Each exit and restart is written as a line to `log` (the process's own log,
    /// where its exit is read).
    pub fn start(name: &str, log: PathBuf, spawn: Spawn) -> Result<Self> {
        Self::start_with(name, log, RestartPolicy::Fixed(RESTART_DELAY), STOP_GRACE, spawn)
    }

    /// Starts the process, and again after each exit on its own as `policy` says; fails if
    /// the first start fails. When stopped (drop), the process gets `stop_grace` from SIGTERM
    /// to SIGKILL.
    pub fn start_with(
        name: &str,
        log: PathBuf,
        policy: RestartPolicy,
        stop_grace: Duration,
        spawn: Spawn,
    ) -> Result<Self> {
        let no_restart = (policy == RestartPolicy::Never).then(|| "it runs without restarts".to_owned());
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            log,
            stop_grace,
            state: Mutex::new(State {
                child: None,
                last_pid: 0,
                started_at: Instant::now(),
                starts: 0,
                exits: Vec::new(),
                delays: Delays::new(policy),
                no_restart,
                next_start: None,
                shutdown: false,
            }),
            wake: Condvar::new(),
        });
        let (started_tx, started_rx) = mpsc::channel();
        // This thread starts every process and lives as long as they may: each dies with the
        // thread that started it (PR_SET_PDEATHSIG), not with the caller's.
        let thread = std::thread::Builder::new()
            .name(format!("{name}-supervisor"))
            .spawn({
                let shared = shared.clone();
                move || supervise(&shared, spawn, started_tx)
            })?;
        let mut this = Self {
            shared,
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
        self.shared.lock().starts.saturating_sub(1)
    }

    /// The exit status of every process that exited so far, oldest first.
    pub fn exits(&self) -> Vec<ExitStatus> {
        let mut s = self.shared.lock();
        self.shared.check(&mut s);
        s.exits.clone()
    }

    /// Whether a process runs (it may have exited a moment ago without being reaped yet).
    pub fn running(&self) -> bool {
        let mut s = self.shared.lock();
        self.shared.check(&mut s);
        s.child.is_some()
    }

    /// How many processes exited so far, if one runs now (in one look: its exit will be the
    /// next one); `None` when none runs.
    pub fn exits_while_running(&self) -> Option<usize> {
        let mut s = self.shared.lock();
        self.shared.check(&mut s);
        s.child.is_some().then_some(s.exits.len())
    }

    /// The PID of the running process, else of the last one that ran.
    pub fn pid(&self) -> u32 {
        self.shared.lock().last_pid
    }

    /// The final exit: none runs and none will be started again (its policy is `Never`, or
    /// it was stopped on purpose). `None` while a process runs or a restart is due.
    pub fn finished(&self) -> Option<ExitStatus> {
        let mut s = self.shared.lock();
        self.shared.check(&mut s);
        if s.child.is_none() && s.next_start.is_none() {
            s.exits.last().copied()
        } else {
            None
        }
    }

    /// Sends `signal` to the running process's group; an error when none runs.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let s = self.shared.lock();
        match &s.child {
            Some(c) => c.signal(signal),
            None => bail!("{} is not running: it has exited", self.shared.name),
        }
    }

    /// Ends the supervision on purpose (`why` goes to the log): the running process is not
    /// started again once it exits, and a restart that is due is cancelled. What a test calls
    /// before it kills the process or waits for its exit, so no restart fights it. Idempotent.
    pub fn stop_restarting(&self, why: &str) -> Stopped {
        let mut s = self.shared.lock();
        self.shared.check(&mut s);
        let cancelled_restart = s.next_start.take().is_some();
        if s.no_restart.is_none() {
            s.no_restart = Some(why.to_owned());
            if cancelled_restart {
                self.shared
                    .note(&format!("restart cancelled, not started again: {why}"));
            } else if s.child.is_some() {
                self.shared
                    .note(&format!("not started again after it exits: {why}"));
            }
        }
        self.shared.wake.notify_all();
        Stopped {
            running: s.child.is_some(),
            exits: s.exits.len(),
            cancelled_restart,
        }
    }

    /// Stops the running process (SIGTERM, then SIGKILL after the stop grace) and ends the
    /// supervision (`why` goes to the log); its exit is recorded. Blocks until it is gone.
    pub fn stop_running(&self, why: &str) {
        self.stop_restarting(why);
        let (child, ran_for) = {
            let mut s = self.shared.lock();
            (s.child.take(), s.started_at.elapsed())
        };
        let Some(mut child) = child else { return };
        self.shared.note(&format!(
            "stopping {} (pid {}): {why}",
            self.shared.name,
            child.pid()
        ));
        child.stop(self.shared.stop_grace);
        let status = child.exited().unwrap_or_else(unknown_exit);
        let mut s = self.shared.lock();
        s.exits.push(status);
        self.shared.note(&format!(
            "{} exited ({status}) after {:.1} s; not started again: {why}",
            self.shared.name,
            ran_for.as_secs_f64()
        ));
    }

    fn shut_down(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
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

struct Shared {
    name: String,
    log: PathBuf,
    stop_grace: Duration,
    state: Mutex<State>,
    /// Wakes the supervising thread (shutdown, end of supervision).
    wake: Condvar,
}

struct State {
    child: Option<ManagedChild>,
    last_pid: u32,
    started_at: Instant,
    /// Successful starts, the first one included.
    starts: u32,
    exits: Vec<ExitStatus>,
    delays: Delays,
    /// Why an exit is final, once it is (its policy, or a stop on purpose).
    no_restart: Option<String>,
    /// When the next start is due, after an exit on its own.
    next_start: Option<Instant>,
    /// The thread stops the process and ends.
    shutdown: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// If the running process has exited: records the exit (reaped, its group killed), and
    /// when it starts again.
    fn check(&self, s: &mut State) {
        let Some(status) = s.child.as_mut().and_then(ManagedChild::exited) else {
            return;
        };
        // `exited` killed what was left of its process group before reaping it (while its
        // number was still pinned); nothing of it is signalled again.
        drop(s.child.take());
        let ran_for = s.started_at.elapsed();
        s.exits.push(status);
        let delay = match (&s.no_restart, s.shutdown) {
            (None, false) => s.delays.next(ran_for),
            _ => None,
        };
        let ran_for = ran_for.as_secs_f64();
        let name = &self.name;
        match delay {
            Some(d) => {
                s.next_start = Some(Instant::now() + d);
                let n = s.starts;
                warn!(%name, %status, restart = n, delay = ?d, "exited; starting it again");
                self.note(&format!(
                    "{name} exited ({status}) after {ran_for:.1} s; starting it again in {:.1} s (restart {n})",
                    d.as_secs_f64()
                ));
            }
            None => {
                let why = s.no_restart.as_deref().unwrap_or("its supervisor stops");
                self.note(&format!(
                    "{name} exited ({status}) after {ran_for:.1} s; not started again: {why}"
                ));
            }
        }
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

/// The supervising thread: the first start, then every restart until told to stop.
fn supervise(shared: &Shared, mut spawn: Spawn, started: mpsc::Sender<Result<()>>) {
    match spawn(0) {
        Ok(c) => {
            let mut s = shared.lock();
            s.last_pid = c.pid();
            s.child = Some(c);
            s.starts = 1;
            s.started_at = Instant::now();
        }
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    }
    let _ = started.send(Ok(()));
    let mut s = shared.lock();
    loop {
        if s.shutdown {
            let child = s.child.take();
            drop(s);
            if let Some(mut c) = child {
                c.stop(shared.stop_grace);
            }
            return;
        }
        shared.check(&mut s);
        let now = Instant::now();
        if let Some(at) = s.next_start
            && at <= now
        {
            s.next_start = None;
            let n = s.starts;
            match spawn(n) {
                Ok(c) => {
                    shared.note(&format!(
                        "{} started again (restart {n}, pid {})",
                        shared.name,
                        c.pid()
                    ));
                    s.last_pid = c.pid();
                    s.child = Some(c);
                    s.started_at = Instant::now();
                    s.starts += 1;
                }
                Err(e) => {
                    let retry = s.delays.next(Duration::ZERO).unwrap_or(RESTART_DELAY);
                    shared.note(&format!(
                        "starting {} failed: {e:#}; trying again in {:.1} s",
                        shared.name,
                        retry.as_secs_f64()
                    ));
                    s.next_start = Some(Instant::now() + retry);
                }
            }
        }
        let wait = s
            .next_start
            .map_or(POLL, |at| at.saturating_duration_since(Instant::now()).min(POLL));
        s = shared
            .wake
            .wait_timeout(s, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// The status of a process whose real one is lost: exit code 127.
fn unknown_exit() -> ExitStatus {
    std::os::unix::process::ExitStatusExt::from_raw(127 << 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
    }

    fn wait_until(what: &str, timeout: Duration, f: impl Fn() -> bool) {
        let deadline = Instant::now() + timeout;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
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
        wait_until("two restarts", Duration::from_secs(20), || p.restarts() >= 2);
        assert_eq!(p.restarts(), 2, "two exits, two restarts");
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(p.restarts(), 2, "the third start keeps running");
        // Its line comes when its shell first gets a core (later on a loaded machine).
        wait_until("the third start's line", Duration::from_secs(20), || {
            std::fs::read_to_string(&starts).is_ok_and(|s| s.lines().count() >= 3)
        });
        assert_eq!(std::fs::read_to_string(&starts).unwrap(), "0\n1\n2\n");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("=== supervisor: p exited (exit status: 3) after ")
                && text.contains("starting it again in 1.0 s (restart 1)")
                && text.contains("=== supervisor: p started again (restart 2, pid "),
            "{text}"
        );
        // `exec` keeps the shell's PID: the running third start is that process.
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(p.pid(), pid as u32);
        assert!(alive(pid), "the third start runs");
        assert_eq!(p.finished(), None);
        drop(p);
        assert!(!alive(pid), "stopped with its supervisor");
    }

    /// The operator's policy (a shorter first delay): an exit on its own is followed by a start
    /// after the back-off (immediate, then `base`, then `2·base`); a process killed on purpose
    /// after `stop_restarting` is not started again, its exit is final.
    #[test]
    fn exits_on_its_own_are_restarted_after_the_backoff_and_a_kill_on_purpose_is_final() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let starts = dir.path().join("starts");
        let (log2, starts2) = (log.clone(), starts.clone());
        // The first three starts exit at once (a crash loop), the fourth keeps running.
        let spawn: Spawn = Box::new(move |n| {
            let script = format!(
                "echo {n} >> {}; if [ {n} -lt 3 ]; then exit 1; fi; exec sleep 600",
                starts2.display()
            );
            ManagedChild::spawn("p", sh(&script), &log2)
        });
        let base = Duration::from_millis(700);
        let begun = Instant::now();
        let p = Restarting::start_with(
            "p",
            log.clone(),
            RestartPolicy::kubelet_with_base(base),
            Duration::from_secs(1),
            spawn,
        )
        .unwrap();
        let mut at = vec![];
        for n in 1..=3 {
            wait_until(&format!("restart {n}"), Duration::from_secs(20), || {
                p.restarts() >= n
            });
            at.push(begun.elapsed());
        }
        // Immediate, then 0.7 s, then 1.4 s (each also waits for the exit and a poll).
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        // (Less a little: each restart is seen up to a poll of this loop late.)
        let slack = Duration::from_millis(50);
        assert!(gaps[0] >= base - slack, "second restart {gaps:?} after the first");
        assert!(
            gaps[1] >= base * 2 - slack,
            "third restart {gaps:?} after the second"
        );
        assert_eq!(p.exits().len(), 3);
        assert!(p.running());
        // The restart is counted when the fourth process is spawned; its shell writes its
        // line when it first gets a core, which on a loaded machine comes later (seen once in
        // a CI run: "0 1 2" read before the fourth wrote).
        wait_until("the fourth start's line", Duration::from_secs(20), || {
            std::fs::read_to_string(&starts).is_ok_and(|s| s.lines().count() >= 4)
        });
        assert_eq!(std::fs::read_to_string(&starts).unwrap(), "0\n1\n2\n3\n");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("starting it again in 0.0 s (restart 1)"), "{text}");
        assert!(text.contains("starting it again in 0.7 s (restart 2)"), "{text}");
        assert!(text.contains("starting it again in 1.4 s (restart 3)"), "{text}");

        // Killed on purpose: not started again.
        let pid = p.pid();
        let stopped = p.stop_restarting("killed by the test");
        assert_eq!(
            stopped,
            Stopped {
                running: true,
                exits: 3,
                cancelled_restart: false
            }
        );
        p.signal(Signal::SIGKILL).unwrap();
        wait_until("the final exit", Duration::from_secs(10), || {
            p.finished().is_some()
        });
        let status = p.finished().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "{status}"
        );
        std::thread::sleep(base * 3);
        assert_eq!(p.restarts(), 3, "not started again");
        assert!(!p.running());
        assert!(!alive(pid as i32));
        assert_eq!(std::fs::read_to_string(&starts).unwrap(), "0\n1\n2\n3\n");
        assert!(p.signal(Signal::SIGKILL).is_err(), "nothing runs to signal");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("not started again after it exits: killed by the test")
                && text.contains("p exited (signal: 9 (SIGKILL)) after ")
                && text.contains("; not started again: killed by the test"),
            "{text}"
        );
    }

    /// A process that exited on its own while its restart waits out the back-off: ending the
    /// supervision cancels the restart, and that exit is final.
    #[test]
    fn ending_the_supervision_cancels_a_restart_that_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let log2 = log.clone();
        let spawn: Spawn = Box::new(move |_| ManagedChild::spawn("p", sh("exit 4"), &log2));
        let p = Restarting::start_with(
            "p",
            log.clone(),
            RestartPolicy::kubelet_with_base(Duration::from_secs(30)),
            Duration::from_secs(1),
            spawn,
        )
        .unwrap();
        // Immediate first restart, then a 30 s back-off after the second exit.
        wait_until("the second exit", Duration::from_secs(10), || {
            p.exits().len() >= 2
        });
        assert_eq!(p.finished(), None, "a restart is due");
        let stopped = p.stop_restarting("the test waits for the exit");
        assert_eq!(
            stopped,
            Stopped {
                running: false,
                exits: 2,
                cancelled_restart: true
            }
        );
        assert_eq!(p.finished().and_then(|s| s.code()), Some(4));
        assert_eq!(p.restarts(), 1);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("restart cancelled, not started again: the test waits for the exit"),
            "{text}"
        );
    }

    #[test]
    fn without_restarts_the_first_exit_is_final() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let log2 = log.clone();
        let spawn: Spawn = Box::new(move |_| ManagedChild::spawn("p", sh("exit 5"), &log2));
        let p = Restarting::start_with(
            "p",
            log.clone(),
            RestartPolicy::Never,
            Duration::from_secs(1),
            spawn,
        )
        .unwrap();
        wait_until("the exit", Duration::from_secs(10), || p.finished().is_some());
        assert_eq!(p.finished().and_then(|s| s.code()), Some(5));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!((p.restarts(), p.exits().len()), (0, 1));
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
