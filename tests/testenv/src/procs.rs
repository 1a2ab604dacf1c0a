//! Child processes that cannot outlive the test: each runs in its own process group, dies
//! with its parent (`PR_SET_PDEATHSIG`), and is stopped (SIGTERM, then SIGKILL) on drop.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A running child process; killed with its whole process group when dropped.
pub struct ManagedChild {
    name: String,
    child: Option<Child>,
}

impl ManagedChild {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open log {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("spawn {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the process has exited (reaps it if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends `signal` to the whole process group.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = Pid::from_raw(self.pid() as i32);
        killpg(pid, signal).with_context(|| format!("signal {signal} to {}", self.name))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pgid = Pid::from_raw(child.id() as i32);
        if child.try_wait().ok().flatten().is_none() {
            let _ = killpg(pgid, Signal::SIGCONT);
            let _ = killpg(pgid, Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Children of the leader (if any) share the group: kill it regardless.
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// A free TCP port on 127.0.0.1 for a server started later (bound and released).
///
/// Chosen at random *below* the kernel's ephemeral range: a port from `bind(0)` comes from
/// that range, and between its release and the server's own bind any outgoing connection on
/// the machine (API clients, Redis probes, a parallel test run) could take it as its source
/// port, which made etcd fail with "address already in use".
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_start.saturating_sub(1).max(10_001));
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    for i in 0..1000u64 {
        let port = low + ((seed.wrapping_add(i.wrapping_mul(7919)) % u64::from(high - low)) as u16);
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return Ok(l.local_addr()?.port());
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::free_port;

    #[test]
    fn free_ports_lie_outside_the_ephemeral_range_and_can_be_bound() {
        let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        for p in &ports {
            assert!((10_000..start).contains(p), "{p} not below {start}");
            std::net::TcpListener::bind(("127.0.0.1", *p)).unwrap();
        }
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert!(distinct.len() > 10, "not random: {ports:?}");
    }
}
