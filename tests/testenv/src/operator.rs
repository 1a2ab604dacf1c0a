//! The operator under test as a real process: started against a control plane's kubeconfig,
//! probed over its HTTP endpoints, killed or stopped like a pod would be.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::procs::{ManagedChild, free_port};

pub struct OperatorProcess {
    child: ManagedChild,
    http_port: u16,
    log: PathBuf,
}

impl OperatorProcess {
    /// Starts `binary run` against `kubeconfig` with `extra_args`, logging to `log`.
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
        let http_port = free_port()?;
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg(format!("--http-addr=127.0.0.1:{http_port}"))
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            // One stable leader identity, as a pod keeps its name across container restarts:
            // a restarted operator renews its own lease at once instead of waiting it out.
            // Tests that run several operators pass `--leader-identity` each.
            .env("POD_NAME", "redlock-operator-envtest")
            .env(
                "RUST_LOG",
                std::env::var("OPERATOR_RUST_LOG").unwrap_or_else(|_| "info,redlock_operator=debug".into()),
            )
            .envs(env.iter().map(|(k, v)| (k, v)));
        Ok(Self {
            child: ManagedChild::spawn("redlock-operator", cmd, log)?,
            http_port,
            log: log.to_owned(),
        })
    }

    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Exit status if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.exited()
    }

    /// Waits until `/readyz` answers 200 (caches synced).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                bail!("operator exited ({status}) before ready:\n{}", self.log());
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("operator not ready within {timeout:?}:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// GET on the operator's HTTP server: (status code, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.http_port), path).await
    }

    /// SIGKILL: an operator crash.
    pub fn kill(&self) -> Result<()> {
        self.child.signal(Signal::SIGKILL)
    }

    /// SIGTERM and wait up to `timeout` for the exit status.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.child.signal(Signal::SIGTERM)?;
        self.wait_exit(timeout).await
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("operator still running after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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
