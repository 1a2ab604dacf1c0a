//! The operator under test as a real process: started against a control plane's kubeconfig,
//! probed over its HTTP endpoints, killed or stopped like a pod would be.
//!
//! Started as a Deployment's pod runs it ([`OperatorProcess::start_with_restarts`], what
//! `redlock-test-support` does for every test's operator), an operator that exits on its own
//! (its lease lost on a loaded machine, a crash) is started again with the kubelet's
//! CrashLoopBackOff ([`RestartPolicy::kubelet`]), with the same flags, HTTP port, identity and
//! log, so a test measures what the operator does after the exit, not a harness that left it
//! dead. Exits on purpose are not fought: [`OperatorProcess::kill`], [`OperatorProcess::terminate`],
//! [`OperatorProcess::wait_exit`] and [`OperatorProcess::stop_restarting`] end the supervision
//! first, so the exit they cause or wait for is final. `start` and `start_with_env` run a bare
//! process whose first exit is final, as before.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::procs::{ManagedChild, free_port};
pub use crate::restarting::RestartPolicy;
use crate::restarting::Restarting;

/// How long a stopped operator gets from SIGTERM to SIGKILL (it releases its lease first).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The first back-off delay of a test operator's restarts (`REDLOCK_TEST_OPERATOR_BACKOFF_MS`).
pub const BACKOFF_ENV: &str = "REDLOCK_TEST_OPERATOR_BACKOFF_MS";

/// The restarts of an operator in a test, as a Deployment's: the kubelet's CrashLoopBackOff
/// (an immediate first restart, then 10 s, doubling up to 300 s), its first delay overridable
/// with `REDLOCK_TEST_OPERATOR_BACKOFF_MS`.
pub fn deployment_restarts() -> RestartPolicy {
    match std::env::var(BACKOFF_ENV) {
        Err(_) => RestartPolicy::kubelet(),
        Ok(ms) => match ms.trim().parse::<u64>() {
            Ok(ms) => RestartPolicy::kubelet_with_base(Duration::from_millis(ms)),
            Err(_) => panic!("{BACKOFF_ENV}={ms:?}: expected milliseconds"),
        },
    }
}

pub struct OperatorProcess {
    process: Restarting,
    http_port: u16,
    log: PathBuf,
    /// How many of the process's exits came before the caller last addressed the running
    /// process (its readiness, `pid`, a kill or SIGTERM): those were restarted, and the exit
    /// [`Self::wait_exit`] reports is a later one.
    seen_exits: AtomicUsize,
}

impl OperatorProcess {
    /// Starts `binary run` against `kubeconfig` with `extra_args`, logging to `log`, as a bare
    /// process: its first exit is final.
    pub fn start(binary: &Path, kubeconfig: &Path, log: &Path, extra_args: &[&str]) -> Result<Self> {
        Self::start_with_env(binary, kubeconfig, log, extra_args, &[])
    }

    /// Like `start`, with extra environment variables (e.g. libfaketime's, to run the
    /// operator with a skewed or stepped wall clock).
    pub fn start_with_env(
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        extra_args: &[&str],
        env: &[(String, String)],
    ) -> Result<Self> {
        Self::start_with_restarts(binary, kubeconfig, log, extra_args, env, RestartPolicy::Never)
    }

    /// Like `start_with_env`, started again as `restarts` says whenever it exits on its own
    /// (see the module's docs; [`deployment_restarts`] is a Deployment's). Every start runs
    /// with the same arguments and environment, serves on the same HTTP port and appends to
    /// the same log, where each exit and restart is noted (`=== supervisor: ...`).
    pub fn start_with_restarts(
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        extra_args: &[&str],
        env: &[(String, String)],
        restarts: RestartPolicy,
    ) -> Result<Self> {
        let http_port = free_port()?;
        let binary = binary.to_owned();
        let kubeconfig = kubeconfig.to_owned();
        let args: Vec<String> = extra_args.iter().map(|a| (*a).to_owned()).collect();
        let env = env.to_vec();
        let rust_log =
            std::env::var("OPERATOR_RUST_LOG").unwrap_or_else(|_| "info,redlock_operator=debug".into());
        let spawn_log = log.to_owned();
        let process = Restarting::start_with(
            "redlock-operator",
            log.to_owned(),
            restarts,
            STOP_GRACE,
            Box::new(move |_| {
                let mut cmd = Command::new(&binary);
                cmd.arg("run")
                    // The same port every start: tests scrape `http_port()`.
                    .arg(format!("--http-addr=127.0.0.1:{http_port}"))
                    .args(&args)
                    .env("KUBECONFIG", &kubeconfig)
                    // One stable leader identity, as a pod keeps its name across container
                    // restarts: a restarted operator renews its own lease at once instead of
                    // waiting it out. Tests that run several operators pass
                    // `--leader-identity` each.
                    .env("POD_NAME", "redlock-operator-envtest")
                    .env("RUST_LOG", &rust_log)
                    .envs(env.iter().map(|(k, v)| (k, v)));
                ManagedChild::spawn("redlock-operator", cmd, &spawn_log)
            }),
        )?;
        Ok(Self {
            process,
            http_port,
            log: log.to_owned(),
            seen_exits: AtomicUsize::new(0),
        })
    }

    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The PID of the running operator process (after a restart, the new one's), else of the
    /// last one that ran. A later [`Self::wait_exit`] reports this process's exit or a later
    /// one, not an earlier process's.
    pub fn pid(&self) -> u32 {
        self.mark_seen();
        self.process.pid()
    }

    /// How often the operator was started again after it exited on its own.
    pub fn restarts(&self) -> u32 {
        self.process.restarts()
    }

    /// The exit status of every operator process that exited so far, oldest first.
    pub fn exits(&self) -> Vec<ExitStatus> {
        self.process.exits()
    }

    /// Exit status once the operator has ended for good: a bare process's first exit, or the
    /// exit after its supervision ended. `None` while it runs or is about to be started again.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.finished()
    }

    /// Ends the supervision on purpose, saying `why` in the log: the operator's next exit (or
    /// the one whose restart is due) is final. For a test that exercises the exit itself
    /// without `kill`, `terminate` or `wait_exit`, which do this first anyway.
    pub fn stop_restarting(&self, why: &str) {
        self.process.stop_restarting(why);
    }

    /// Waits until `/readyz` answers 200 (caches synced). An operator that exits meanwhile
    /// and is started again (a Deployment's) is waited for until `timeout`; one whose exit is
    /// final fails at once.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                bail!("operator exited ({status}) before ready:\n{}", self.log());
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                self.mark_seen();
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "operator not ready within {timeout:?} (exited {} times meanwhile):\n{}",
                    self.exits().len(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// GET on the operator's HTTP server: (status code, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.http_port), path).await
    }

    /// SIGKILL: an operator crash on purpose, so it is not started again (the test runs on
    /// without an operator until it starts one). An operator whose restart was due is left
    /// down; an error if it had ended already.
    pub fn kill(&self) -> Result<()> {
        self.signal_on_purpose(
            Signal::SIGKILL,
            "killed by the test (SIGKILL, OperatorProcess::kill)",
        )
    }

    /// SIGTERM and wait up to `timeout` for the exit status; not started again. An operator
    /// whose restart was due is left down and the status of its exit returned.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.signal_on_purpose(
            Signal::SIGTERM,
            "stopped by the test (SIGTERM, OperatorProcess::terminate)",
        )?;
        self.wait_exit(timeout).await
    }

    /// Waits up to `timeout` for the operator's exit, which is final: a test that waits for
    /// an exit exercises it, so the operator is not started again after it. The exit is the
    /// first one after the caller last addressed the running process (its readiness, `pid`,
    /// `kill`, `terminate`); should it have been restarted before this call, the restarted
    /// process is stopped.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process
            .stop_restarting("a test waits for its exit (OperatorProcess::wait_exit)");
        let deadline = Instant::now() + timeout;
        loop {
            let exits = self.process.exits();
            if let Some(status) = exits.get(self.seen_exits.load(Ordering::SeqCst)) {
                if self.process.running() {
                    self.process.stop_running(
                        "restarted after the exit a test waits for (OperatorProcess::wait_exit)",
                    );
                }
                return Ok(*status);
            }
            if Instant::now() > deadline {
                bail!("operator still running after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Ends the supervision (`why` in the log), then sends `signal` to the running process.
    fn signal_on_purpose(&self, signal: Signal, why: &str) -> Result<()> {
        let stopped = self.process.stop_restarting(why);
        if stopped.running {
            // Its exit, whichever comes, is the next one: not an earlier, restarted one's.
            self.seen_exits.store(stopped.exits, Ordering::SeqCst);
            return match self.process.signal(signal) {
                // Exited on its own a moment ago: down, as asked, and not started again.
                Err(_) if !self.process.running() => Ok(()),
                r => r,
            };
        }
        if stopped.cancelled_restart {
            return Ok(());
        }
        bail!("redlock-operator has exited: its process group is gone")
    }

    /// Exits so far are not what a later `wait_exit` reports.
    fn mark_seen(&self) {
        if let Some(exits) = self.process.exits_while_running() {
            self.seen_exits.store(exits, Ordering::SeqCst);
        }
    }
}

/// libfaketime, as Debian's `faketime` package installs it.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that runs a process under libfaketime with the wall-clock offset read from
/// `offset_file` (e.g. "+20s"; re-read at most once a second, so writing the file steps the
/// clock of the running process). Only `CLOCK_REALTIME` is faked: the monotonic clock runs
/// true, as after an NTP step.
pub fn faketime_env(offset_file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset_file.display().to_string(),
        ),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

/// Sets the offset a `faketime_env` process reads (atomically: write, then rename).
pub fn set_clock_offset(offset_file: &Path, offset: &str) -> Result<()> {
    let tmp = offset_file.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n"))?;
    std::fs::rename(&tmp, offset_file)?;
    Ok(())
}

/// Minimal HTTP/1.0 GET (no TLS, no redirects): (status code, body).
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw)).await??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::ExitStatusExt;

    /// A stand-in for the operator binary: a shell script that records each start's arguments
    /// and PID in `dir/starts`, and then runs `body`.
    fn fake_operator(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("fake-operator");
        let starts = dir.join("starts");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"$$ $*\" >> {}\nn=$(wc -l < {})\n{body}\n",
                starts.display(),
                starts.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Starts the fake operator, again while exec fails with ETXTBSY: another test's child
    /// may hold the script's file (just written) open between its fork and its exec.
    fn start(dir: &Path, binary: &Path, restarts: RestartPolicy) -> OperatorProcess {
        let log = dir.join("operator.log");
        let mut tries = 0;
        loop {
            match OperatorProcess::start_with_restarts(
                binary,
                &dir.join("kubeconfig"),
                &log,
                &["--leader-identity=a"],
                &[],
                restarts,
            ) {
                Ok(op) => return op,
                Err(e) if tries < 20 && format!("{e:#}").contains("busy") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{e:#}"),
            }
        }
    }

    fn starts(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("starts"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    async fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn an_operator_that_exits_on_its_own_runs_again_on_its_port_and_a_kill_is_final() {
        let dir = tempfile::tempdir().unwrap();
        // The first start exits as on a lost lease; the second one runs.
        let bin = fake_operator(dir.path(), "[ \"$n\" -gt 1 ] || exit 1\nexec sleep 600");
        let mut op = start(
            dir.path(),
            &bin,
            RestartPolicy::kubelet_with_base(Duration::from_secs(30)),
        );
        wait_until("a restart", || op.restarts() == 1).await;
        // The restart is counted at spawn; the fake writes its line when it first gets a core.
        wait_until("the second start's line", || starts(dir.path()).len() >= 2).await;
        let runs = starts(dir.path());
        assert_eq!(runs.len(), 2, "{runs:?}");
        let (first, second) = (&runs[0], &runs[1]);
        let args = |run: &str| run.split_once(' ').unwrap().1.to_owned();
        assert_eq!(
            args(first),
            format!("run --http-addr=127.0.0.1:{} --leader-identity=a", op.http_port())
        );
        assert_eq!(args(first), args(second), "the same flags and port");
        assert_eq!(op.pid().to_string(), second.split(' ').next().unwrap());
        assert_eq!(op.exited(), None, "restarted, not ended");
        assert!(
            op.log()
                .contains("redlock-operator exited (exit status: 1) after "),
            "{}",
            op.log()
        );

        op.kill().unwrap();
        let status = op.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(status.signal(), Some(9), "{status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(op.restarts(), 1, "not started again after a kill on purpose");
        assert_eq!(starts(dir.path()).len(), 2);
        assert_eq!(op.exited().and_then(|s| s.signal()), Some(9));
        assert!(op.kill().is_err(), "nothing is left to kill");
        assert!(
            op.log()
                .contains("not started again: killed by the test (SIGKILL, OperatorProcess::kill)"),
            "{}",
            op.log()
        );
    }

    /// `wait_exit` after an exit that was restarted before the call (the immediate first
    /// restart came first): that exit is reported, and the restarted process stopped.
    #[tokio::test]
    async fn wait_exit_reports_the_exit_even_if_a_restart_came_first() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_operator(dir.path(), "[ \"$n\" -gt 1 ] || exit 3\nexec sleep 600");
        let mut op = start(dir.path(), &bin, RestartPolicy::kubelet());
        wait_until("a restart", || op.restarts() == 1).await;
        wait_until("the second start's line", || starts(dir.path()).len() >= 2).await;
        let restarted: i32 = starts(dir.path())[1].split(' ').next().unwrap().parse().unwrap();
        let status = op.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(status.code(), Some(3), "{status}");
        assert!(op.exited().is_some(), "ended for good");
        assert!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(restarted), None).is_err(),
            "the restarted process is stopped"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(starts(dir.path()).len(), 2);
    }

    /// A bare operator (`start`, `start_with_env`): its first exit is final, as before.
    #[tokio::test]
    async fn a_bare_operator_is_not_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake_operator(dir.path(), "exit 2");
        let mut op = start(dir.path(), &bin, RestartPolicy::Never);
        let status = op.wait_exit(Duration::from_secs(10)).await.unwrap();
        assert_eq!(status.code(), Some(2));
        let err = op.wait_ready(Duration::from_secs(5)).await.unwrap_err();
        assert!(
            format!("{err}").contains("exited (exit status: 2) before ready"),
            "{err}"
        );
        assert_eq!((op.restarts(), starts(dir.path()).len()), (0, 1));
    }
}
