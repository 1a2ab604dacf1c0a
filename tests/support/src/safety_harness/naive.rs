//! The control experiment's server set: the same redis-server, N masters, no persistence,
//! the same client user and password, but no fence and no hold. A crashed member is restarted
//! at once, empty, and serves clients immediately: what a StatefulSet with `restartPolicy:
//! Always` and no delayed-restart rule does. When members' clocks jump in the run, each runs
//! under libfaketime with its own offset file, as the operator run's pods do on their nodes.
//! Each member's history (started with its pid, killed, stopped, continued, clock set) goes
//! to `<dir>/evidence/members.jsonl` as it happens: the control's counterpart of the
//! operator run's status history (it has no operator, no events and no RedlockCluster).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};
use nix::sys::signal::Signal;
use redlock_safety::clock::mono_ns;
use redlock_safety::report::FaultRecord;
use redlock_safety::schedule::{Fault, FaultKind};
use redlock_testenv::operator::{faketime_env, set_clock_offset};
use redlock_testenv::procs::{ManagedChild, free_port};

use super::clock_jump;

/// How long "the kubelet" waits before restarting a crashed member (the envtest kubelet's
/// first restart is immediate; a little delay keeps the port free for the new process).
const RESTART_DELAY: Duration = Duration::from_millis(200);

pub struct NaiveSet {
    ports: Vec<u16>,
    procs: Vec<Option<ManagedChild>>,
    user: String,
    password: String,
    dir: PathBuf,
    /// A redis-server that runs under libfaketime, when members' clocks can be stepped.
    faketime_redis: Option<PathBuf>,
    /// `evidence/members.jsonl`.
    history: std::fs::File,
}

/// The control's member history file, under its directory.
pub const MEMBER_HISTORY: &str = "evidence/members.jsonl";

impl NaiveSet {
    /// `faketime_redis`: a redis-server that runs under libfaketime; each member then runs it
    /// with its own clock (`set_clock`), true at first.
    pub async fn start(
        n: usize,
        user: &str,
        password: &str,
        dir: &Path,
        faketime_redis: Option<PathBuf>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir.join("evidence"))?;
        let mut set = NaiveSet {
            ports: (0..n).map(|_| free_port()).collect::<Result<_>>()?,
            procs: (0..n).map(|_| None).collect(),
            user: user.to_owned(),
            password: password.to_owned(),
            dir: dir.to_owned(),
            faketime_redis,
            history: std::fs::File::create(dir.join(MEMBER_HISTORY))?,
        };
        for i in 0..n {
            if set.faketime_redis.is_some() {
                set.set_clock(i, "+0")?;
            }
            set.launch(i)?;
        }
        for i in 0..n {
            set.wait_serving(i).await?;
        }
        Ok(set)
    }

    /// Appends what happened to member `i` to the member history.
    fn note(&self, i: usize, event: &str, extra: serde_json::Value) {
        let clock = super::evidence::wall_clock();
        let mut line = serde_json::json!({
            "t": redlock_safety::violation::utc(clock.unix_ns),
            "mono_ns": clock.mono_ns,
            "member": i,
            "port": self.ports[i],
            "event": event,
        });
        if let (Some(l), Some(e)) = (line.as_object_mut(), extra.as_object()) {
            l.extend(e.clone());
        }
        if let Err(e) = writeln!(&self.history, "{line}") {
            eprintln!("control member history: {e}");
        }
    }

    fn clock_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("naive-{i}.clock"))
    }

    /// Steps member `i`'s wall clock to `offset` from true time (a libfaketime offset such as
    /// "+30s"); its process sees it within about two seconds (libfaketime re-reads the file).
    fn set_clock(&self, i: usize, offset: &str) -> Result<()> {
        if self.faketime_redis.is_none() {
            bail!("the control's members do not run under libfaketime");
        }
        set_clock_offset(&self.clock_file(i), offset)?;
        self.note(i, "clock set", serde_json::json!({"offset": offset}));
        Ok(())
    }

    fn launch(&mut self, i: usize) -> Result<()> {
        let mut cmd = match &self.faketime_redis {
            Some(redis) => {
                let mut cmd = Command::new(redis);
                cmd.envs(faketime_env(&self.clock_file(i)));
                cmd
            }
            None => Command::new("redis-server"),
        };
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.ports[i].to_string())
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
            ])
            .args(["--user", "default", "off"])
            .args([
                "--user",
                &self.user,
                "on",
                &format!(">{}", self.password),
                "~*",
                "&*",
                "+@all",
            ]);
        let log = self.dir.join(format!("naive-{i}.log"));
        let child = ManagedChild::spawn(&format!("naive-{i}"), cmd, &log)?;
        self.note(i, "started", serde_json::json!({"pid": child.pid()}));
        self.procs[i] = Some(child);
        Ok(())
    }

    async fn wait_serving(&self, i: usize) -> Result<()> {
        let url = format!(
            "redis://{}:{}@127.0.0.1:{}",
            self.user, self.password, self.ports[i]
        );
        for _ in 0..250 {
            if let Ok(client) = redis::Client::open(url.as_str())
                && let Ok(mut c) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut c).await.is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("naive member {i} does not serve on port {}", self.ports[i])
    }

    /// The `<name>-client` Secret and `<name>-endpoints` ConfigMap a user would write for it.
    pub fn published(&self, max_ttl_ms: u64) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let urls: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("redis://{}:{}@127.0.0.1:{p}", self.user, self.password))
            .collect();
        let servers: Vec<String> = self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let secret = BTreeMap::from([
            ("username".to_string(), self.user.clone()),
            ("password".to_string(), self.password.clone()),
            ("urls".to_string(), urls.join("\n")),
        ]);
        let config = BTreeMap::from([
            ("servers".to_string(), servers.join("\n")),
            ("quorum".to_string(), (self.ports.len() / 2 + 1).to_string()),
            ("maxLockTTLMillis".to_string(), max_ttl_ms.to_string()),
        ]);
        (secret, config)
    }

    fn signal(&self, i: usize, sig: Signal) -> Result<()> {
        match &self.procs[i] {
            Some(p) => {
                p.signal(sig)?;
                self.note(
                    i,
                    "signalled",
                    serde_json::json!({"signal": sig.as_str(), "pid": p.pid()}),
                );
                Ok(())
            }
            None => bail!("naive member {i} is not running"),
        }
    }

    async fn crash_and_restart(&mut self, members: &[usize], down: Duration) -> Result<()> {
        for &m in members {
            self.signal(m, Signal::SIGKILL)?;
        }
        for &m in members {
            if let Some(mut p) = self.procs[m].take() {
                p.stop(Duration::ZERO); // reaps the killed process
            }
        }
        tokio::time::sleep(RESTART_DELAY + down).await;
        for &m in members {
            self.launch(m)?;
        }
        Ok(())
    }

    /// The same fault as on the cluster, as it plays out without fencing: every loss of a
    /// process is a restart that serves at once, empty.
    pub async fn inject(&mut self, f: &Fault, keys: &[String]) -> Result<FaultRecord> {
        let mut seen = None;
        let injected = mono_ns();
        match f.kind {
            FaultKind::KillOne | FaultKind::KillMinority | FaultKind::KillMajority | FaultKind::DeletePod => {
                self.crash_and_restart(&f.members, Duration::ZERO).await?
            }
            // There is no operator to kill, no TTL to lower and no object to re-create; what
            // the fault does to the members remains.
            // A naive scale-down and scale-up (a StatefulSet's) deletes the removed members and
            // starts them again empty, serving at once.
            FaultKind::OperatorKill
            | FaultKind::HandFence
            | FaultKind::WritesRefused
            | FaultKind::TwoOperators
            | FaultKind::TtlLower
            | FaultKind::Recreate
            | FaultKind::OperatorSkew
            | FaultKind::Resize => self.crash_and_restart(&f.members, Duration::ZERO).await?,
            // Without an operator nothing fences the old process: the control models the
            // partition as what a naive restart does (an empty process serving at once).
            FaultKind::NodeLoss | FaultKind::Partition | FaultKind::PartitionDeleteNode => {
                self.crash_and_restart(&f.members, Duration::from_millis(f.duration_ms))
                    .await?
            }
            FaultKind::StopCont => {
                self.signal(f.members[0], Signal::SIGSTOP)?;
                tokio::time::sleep(Duration::from_millis(f.duration_ms)).await;
                self.signal(f.members[0], Signal::SIGCONT)?;
            }
            // Nothing notices the jump: the member serves on, its locks expired, until its
            // clock is stepped back (which only makes the locks taken meanwhile expire late).
            FaultKind::MemberClockJump => {
                let m = f.members[0];
                let jumped = std::time::Instant::now();
                let mut conns = Vec::new();
                for port in &self.ports {
                    let url = format!("redis://{}:{}@127.0.0.1:{port}", self.user, self.password);
                    conns.push(
                        redis::Client::open(url)?
                            .get_multiplexed_async_connection()
                            .await?,
                    );
                }
                let jump = Duration::from_secs(f.clock_jump_s);
                seen = Some(
                    clock_jump::step_and_watch(&mut conns, m, keys, jump, || {
                        self.set_clock(m, &format!("+{}s", f.clock_jump_s))
                    })
                    .await?,
                );
                let ahead = Duration::from_millis(f.duration_ms);
                tokio::time::sleep(ahead.saturating_sub(jumped.elapsed())).await;
                self.set_clock(m, "+0")?;
                // Healed once the member's clock shows true time again.
                clock_jump::wait_stepped_back(&mut conns[m], jump).await?;
            }
        }
        let healed = match f.kind {
            FaultKind::StopCont | FaultKind::NodeLoss | FaultKind::MemberClockJump => mono_ns(),
            _ => injected,
        };
        for &m in &f.members {
            self.wait_serving(m).await?;
        }
        Ok(FaultRecord {
            index: f.index,
            kind: f.kind,
            members: f.members.clone(),
            injected,
            healed,
            recovered: mono_ns(),
            clock_jump_s: (f.kind == FaultKind::MemberClockJump).then_some(f.clock_jump_s),
            clock_jump_visible: seen.as_ref().map(|j| j.visible),
            detected: None,
            exposed: seen.as_ref().map(|j| j.exposed),
        })
    }
}
