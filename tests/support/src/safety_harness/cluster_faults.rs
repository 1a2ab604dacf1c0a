//! Faults against the RedlockCluster on the control plane, and the wait until it serves
//! fully again. Each fault is injected the way it happens in a cluster: a signal to the pod's
//! redis-server on its node, a pod deletion through the API, the operator process killed, a
//! node that stops reporting, a node's wall clock stepped.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nix::sys::signal::Signal;
use redlock_operator::crd::{MemberState, MemberStatus};
use redlock_safety::clock::mono_ns;
use redlock_safety::report::FaultRecord;
use redlock_safety::rng::Rng;
use redlock_safety::schedule::{Fault, FaultKind};
use serde_json::json;

use super::clock_jump;
use super::mounts::{self, Mounts};
use super::workers::{self, ClientKind, Group, OpShape, Workload};
use crate::{Env, start_operator, start_operator_env, wait_for, wait_held};

/// What a fault needs to start lock clients of its own, next to the run's workers: clients
/// that read the list of servers published during the fault (a resize's shorter list).
pub struct ListClients<'a> {
    pub bins: &'a workers::Bins,
    pub workload: &'a Workload,
    /// The run's mounts: their hosts file and counter server are shared.
    pub base: &'a Mounts,
    pub shape: OpShape,
    pub rng: Rng,
    /// Where each group's mounts and logs go.
    pub dir: PathBuf,
}

impl ListClients<'_> {
    /// One worker of every client kind on the list `secret` and `config` publish.
    async fn start(
        &mut self,
        group: &str,
        secret: &std::collections::BTreeMap<String, String>,
        config: &std::collections::BTreeMap<String, String>,
    ) -> Result<Group> {
        let dir = self.dir.join(group);
        let m = mounts::write_beside(&dir, secret, config, self.base)?;
        let mut started = Vec::new();
        for client in ClientKind::ALL {
            let name = format!("{group}-{}", client.name());
            let log = dir.join(format!("{name}.log"));
            started.push(workers::spawn(self.bins, client, &name, &m, &log).await?);
        }
        Ok(self.workload.join(started, &self.shape, &mut self.rng))
    }
}

/// How long a resize keeps clients of both lists locking in each of its steady moments (the
/// shorter list published with the removed pods gone; the longer list back, its new members
/// waiting for the confirmation), beyond the time the operator takes anyway.
const BOTH_LISTS: Duration = Duration::from_secs(3);

/// A clock jump as it went (CLOCK_MONOTONIC ns): what the harness saw when the member's clock
/// showed it, when the operator had it on record, and when the clock was stepped back.
struct ClockJumpRecord {
    seen: clock_jump::Jumped,
    detected: u64,
    healed: u64,
}

pub struct ClusterTarget<'a> {
    pub env: &'a mut Env,
    pub name: String,
    pub members: usize,
    operator_restarts: usize,
    clients: ListClients<'a>,
}

impl<'a> ClusterTarget<'a> {
    pub fn new(env: &'a mut Env, name: &str, members: usize, clients: ListClients<'a>) -> Self {
        Self {
            env,
            name: name.to_owned(),
            members,
            operator_restarts: 0,
            clients,
        }
    }

    fn pod(&self, slot: usize) -> String {
        format!("{}-{slot}", self.name)
    }

    async fn run_ids(&self) -> Vec<Option<String>> {
        let status = self.env.cluster(&self.name).await.status.unwrap_or_default();
        (0..self.members)
            .map(|slot| {
                status
                    .members
                    .iter()
                    .find(|m| m.slot == slot as i32)
                    .and_then(|m| m.run_id.clone())
            })
            .collect()
    }

    async fn kill(&self, slot: usize, sig: Signal) -> Result<()> {
        self.env
            .cp
            .nodes()
            .signal_pod(&self.env.ns, &self.pod(slot), sig)
            .await
    }

    pub async fn inject(&mut self, f: &Fault) -> Result<FaultRecord> {
        let before = self.run_ids().await;
        let injected = mono_ns();
        // Members whose process this fault replaces: recovery means a new run id there.
        let mut replaced = f.members.clone();
        let mut clock_jump = None;
        match f.kind {
            FaultKind::KillOne | FaultKind::KillMinority | FaultKind::KillMajority => {
                for &m in &f.members {
                    self.kill(m, Signal::SIGKILL).await?;
                }
            }
            FaultKind::DeletePod => {
                self.env
                    .pods()
                    .delete(&self.pod(f.members[0]), &DeleteParams::default())
                    .await?;
            }
            FaultKind::StopCont => {
                self.kill(f.members[0], Signal::SIGSTOP).await?;
                tokio::time::sleep(Duration::from_millis(f.duration_ms)).await;
                // A frozen process keeps its keys and its run id: nothing is replaced.
                self.kill(f.members[0], Signal::SIGCONT).await?;
                replaced.clear();
            }
            FaultKind::OperatorKill => {
                let slot = f.members[0];
                self.kill(slot, Signal::SIGKILL).await?;
                let old = before[slot].clone().unwrap_or_default();
                let (_, until) = wait_held(self.env, &self.name, slot as i32, &old).await;
                self.env.operator.kill()?;
                // Down until past the hold's end: the hold must survive the operator's absence.
                let left = until.duration_since(Timestamp::now()).as_millis().max(0) as u64;
                tokio::time::sleep(Duration::from_millis(left + f.duration_ms)).await;
                self.operator_restarts += 1;
                let log = format!("operator-{}.log", self.operator_restarts);
                self.env.operator = start_operator(&self.env.cp, &log).await;
            }
            FaultKind::TtlLower => {
                let spec = self.env.cluster(&self.name).await.spec;
                let ttl: Duration = spec.max_lock_ttl.into();
                let lower = kube::core::Duration::from(ttl / 4);
                self.env
                    .patch_spec(&self.name, json!({"maxLockTTL": lower.to_string()}))
                    .await;
                self.wait_hold("lowering published", |h| h.published_max_lock_ttl == Some(lower))
                    .await;
                self.kill(f.members[0], Signal::SIGKILL).await?;
                self.wait_recovered(&replaced, &before).await;
                self.env
                    .patch_spec(&self.name, json!({"maxLockTTL": spec.max_lock_ttl.to_string()}))
                    .await;
                self.wait_hold("raised back", |h| {
                    h.max_lock_ttl == spec.max_lock_ttl && h.published_max_lock_ttl == Some(spec.max_lock_ttl)
                })
                .await;
            }
            FaultKind::Recreate => {
                let old = self.env.cluster(&self.name).await;
                self.env
                    .clusters()
                    .delete(&self.name, &DeleteParams::default())
                    .await?;
                let env = &*self.env;
                wait_for("old object gone", Duration::from_secs(30), async || {
                    Ok(env.clusters().get_opt(&self.name).await?.is_none().then_some(()))
                })
                .await;
                self.env
                    .create_cluster(&self.name, serde_json::to_value(&old.spec)?)
                    .await;
                let selector = format!("app.kubernetes.io/instance={}", self.name);
                self.env
                    .kubectl(&[
                        "delete",
                        "pod",
                        "-l",
                        &selector,
                        "--grace-period=0",
                        "--force",
                        "--wait=false",
                    ])
                    .await;
            }
            FaultKind::OperatorSkew => {
                let slot = f.members[0];
                self.kill(slot, Signal::SIGKILL).await?;
                let old = before[slot].clone().unwrap_or_default();
                wait_held(self.env, &self.name, slot as i32, &old).await;
                self.env.operator.kill()?;
                self.env.operator.wait_exit(Duration::from_secs(5)).await?;
                self.operator_restarts += 1;
                let clock = self
                    .env
                    .cp
                    .dir()
                    .join(format!("operator-{}.clock", self.operator_restarts));
                redlock_testenv::operator::set_clock_offset(&clock, "+20s")?;
                let log = format!("operator-{}-skewed.log", self.operator_restarts);
                self.env.operator = start_operator_env(
                    &self.env.cp,
                    &log,
                    &["--max-clock-offset-ms=60000"],
                    &redlock_testenv::operator::faketime_env(&clock),
                )
                .await;
                self.wait_recovered(&replaced, &before).await;
                self.env.operator.terminate(Duration::from_secs(10)).await?;
                let log = format!("operator-{}.log", self.operator_restarts);
                self.env.operator = start_operator(&self.env.cp, &log).await;
            }
            FaultKind::Partition => {
                let node = self.env.node_of(&self.name, f.members[0] as i32).await;
                let nodes: Api<Node> = Api::all(self.env.cp.client());
                let cordon = |on: bool| Patch::Merge(json!({"spec": {"unschedulable": on}}));
                self.env.cp.nodes().partition_node(&node)?;
                nodes.patch(&node, &PatchParams::default(), &cordon(true)).await?;
                self.env
                    .pods()
                    .delete(&self.pod(f.members[0]), &DeleteParams::default().grace_period(0))
                    .await?;
                self.wait_recovered(&replaced, &before).await;
                self.env.cp.nodes().heal_node(&node).await?;
                nodes
                    .patch(&node, &PatchParams::default(), &cordon(false))
                    .await?;
            }
            FaultKind::PartitionDeleteNode => {
                let node = self.env.node_of(&self.name, f.members[0] as i32).await;
                self.env.cp.nodes().partition_node(&node)?;
                Api::<Node>::all(self.env.cp.client())
                    .delete(&node, &DeleteParams::default())
                    .await?;
                self.wait_recovered(&replaced, &before).await;
                self.env.cp.nodes().rejoin_node(&node).await?;
            }
            FaultKind::Resize => self.resize(f.index, &f.members).await?,
            FaultKind::NodeLoss => {
                let node = self.env.node_of(&self.name, f.members[0] as i32).await;
                self.env.cp.nodes().lose_node(&node).await?;
                tokio::time::sleep(Duration::from_millis(f.duration_ms)).await;
                self.env.cp.nodes().restore_node(&node).await?;
            }
            FaultKind::MemberClockJump => {
                // The same process serves on: nothing is replaced.
                replaced.clear();
                clock_jump = Some(self.clock_jump(f, &before).await?);
            }
            FaultKind::HandFence => {
                // The same process keeps its keys: nothing is replaced.
                replaced.clear();
                self.hand_fence(f, &before).await?;
            }
            FaultKind::WritesRefused => {
                let refusal = crate::admission::refuse_status_writes(
                    self.env.cp.client(),
                    &self.env.ns,
                    &format!("safety-refuse-status-{}", f.index),
                    "status writes refused by the safety suite",
                )
                .await;
                self.kill(f.members[0], Signal::SIGKILL).await?;
                tokio::time::sleep(Duration::from_millis(f.duration_ms)).await;
                refusal.lift().await;
            }
            FaultKind::TwoOperators => self.two_operators(f, &replaced, &before).await?,
        }
        // Kills and deletions need no undoing: they are healed the moment they happen.
        let healed = match f.kind {
            FaultKind::StopCont
            | FaultKind::OperatorKill
            | FaultKind::NodeLoss
            | FaultKind::TtlLower
            | FaultKind::OperatorSkew
            | FaultKind::Partition
            | FaultKind::PartitionDeleteNode
            | FaultKind::Resize
            | FaultKind::HandFence
            | FaultKind::WritesRefused
            | FaultKind::TwoOperators => mono_ns(),
            FaultKind::MemberClockJump => clock_jump.as_ref().map_or(injected, |j| j.healed),
            _ => injected,
        };
        self.wait_recovered(&replaced, &before).await;
        Ok(FaultRecord {
            index: f.index,
            kind: f.kind,
            members: f.members.clone(),
            injected,
            healed,
            recovered: mono_ns(),
            clock_jump_s: (f.kind == FaultKind::MemberClockJump).then_some(f.clock_jump_s),
            clock_jump_visible: clock_jump.as_ref().map(|j| j.seen.visible),
            detected: clock_jump.as_ref().map(|j| j.detected),
            exposed: clock_jump.as_ref().map(|j| j.seen.exposed),
        })
    }

    /// One member's host clock steps `clock_jump_s` forward while its process serves (every
    /// lock on it expires once the process sees the step). The operator must find the jump at a
    /// probe and hold the same process (fenced, docs/operations.md "Clocks"). Healed once the member serves
    /// again after that hold, and at least `duration_ms` after the jump, by stepping the clock
    /// back to true time: a backward step only makes the locks taken meanwhile expire late, and
    /// the operator reports it (`ClockStepBack`) without fencing, so healing is no second
    /// jump; checked.
    async fn clock_jump(&self, f: &Fault, before: &[Option<String>]) -> Result<ClockJumpRecord> {
        let slot = f.members[0];
        let pod = self.pod(slot);
        let run_id = before[slot]
            .clone()
            .with_context(|| format!("{pod} has no run id on record"))?;
        let node = self.env.node_of(&self.name, slot as i32).await;
        // The harness reads every member's locks as the operator's admin user.
        let admin = self.env.admin_login(&self.name).await;
        let mut conns = Vec::new();
        for s in 0..self.members {
            let ip = self.env.pod_ip(&self.name, s as i32).await;
            conns.push(crate::connect(ip, &admin).await?);
        }
        let jumped = std::time::Instant::now();
        let nodes = self.env.cp.nodes();
        let seen = clock_jump::step_and_watch(
            &mut conns,
            slot,
            &self.clients.shape.keys,
            Duration::from_secs(f.clock_jump_s),
            || nodes.set_node_clock(&node, &format!("+{}s", f.clock_jump_s)),
        )
        .await?;
        let same_process = |m: &MemberStatus| m.run_id.as_deref() == Some(run_id.as_str());
        // The next probe (every second) finds it.
        self.env
            .wait_member(
                &self.name,
                slot as i32,
                "member held for its clock jump",
                Duration::from_secs(20),
                |m| {
                    m.state == MemberState::Held
                        && same_process(m)
                        && m.message.as_deref().is_some_and(|t| t.contains("clock jumped"))
                },
            )
            .await;
        let detected = mono_ns();
        self.env
            .wait_member(
                &self.name,
                slot as i32,
                "member serving again after its clock-jump hold",
                Duration::from_secs(60),
                |m| m.state == MemberState::Ready && same_process(m),
            )
            .await;
        let ahead = Duration::from_millis(f.duration_ms);
        tokio::time::sleep(ahead.saturating_sub(jumped.elapsed())).await;

        let jumps = self.slot_events("ClockJump", &pod).await?;
        let steps_back = self.slot_events("ClockStepBack", &pod).await?;
        self.env.cp.nodes().set_node_clock(&node, "+0")?;
        clock_jump::wait_stepped_back(&mut conns[slot], Duration::from_secs(f.clock_jump_s)).await?;
        let healed = mono_ns();
        let env = &*self.env;
        wait_for("the step back reported", Duration::from_secs(30), async || {
            Ok((self.slot_events("ClockStepBack", &pod).await? > steps_back).then_some(()))
        })
        .await;
        let m = env
            .member(&self.name, slot as i32)
            .await
            .with_context(|| format!("{pod} not on record"))?;
        let jumps_after = self.slot_events("ClockJump", &pod).await?;
        if m.state != MemberState::Ready || !same_process(&m) || jumps_after != jumps {
            bail!(
                "{pod}: its clock stepped back to true time after a jump, which must be reported, not fenced; now {:?} (run id {:?}, was {run_id}), ClockJump events {jumps} -> {jumps_after}: {:?}",
                m.state,
                m.run_id,
                m.message
            );
        }
        Ok(ClockJumpRecord {
            seen,
            detected,
            healed,
        })
    }

    /// How often the operator published `reason` about pod `pod` (events of one slot with the
    /// same reason are one series while they repeat within minutes).
    async fn slot_events(&self, reason: &str, pod: &str) -> Result<u32> {
        self.events(reason, Some(pod)).await
    }

    /// How often the operator published `reason`, about any pod or only `pod`.
    async fn events(&self, reason: &str, pod: Option<&str>) -> Result<u32> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.env.cp.client(), &self.env.ns);
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && pod.is_none_or(|p| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(p))
            })
            .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u32))
            .sum())
    }

    /// What the operator said about members' clocks over the run: every event of
    /// `ClockJump`, `ClockStepBack` and `ClockDrift` (a run whose Redis processes run under
    /// libfaketime should have none beyond its `member-clock-jump` faults).
    pub async fn clock_events(&self) -> Result<String> {
        let mut out = Vec::new();
        for reason in ["ClockJump", "ClockStepBack", "ClockDrift"] {
            out.push(format!("{reason} {}", self.events(reason, None).await?));
        }
        Ok(out.join(", "))
    }

    /// Scale-down by `removed` (the highest slots) with every worker on the full list until
    /// the removed pods are gone; from when the shorter list is published, clients on it (one
    /// of each kind) lock next to them. Then scale-up back to the full list, the one the run's
    /// workers have, while the shorter list's clients go on; they stop, and only then is the
    /// scale-up confirmed with its token, once the operator asks. So both directions have
    /// clients on the old and the new list at once.
    async fn resize(&mut self, index: usize, removed: &[usize]) -> Result<()> {
        let full = self.members as i32;
        let smaller = full - removed.len() as i32;
        self.env
            .patch_spec(&self.name, json!({"instances": smaller}))
            .await;
        let (secret, config) = self.published_list(smaller).await;
        let shorter_list = self
            .clients
            .start(&format!("resize-{index}"), &secret, &config)
            .await?;
        let env = &*self.env;
        wait_for("removed pods gone", Duration::from_secs(120), async || {
            for &slot in removed {
                if env.pods().get_opt(&self.pod(slot)).await?.is_some() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })
        .await;
        // Both lists in use on the shorter list's members alone.
        tokio::time::sleep(BOTH_LISTS).await;
        let grown = self.env.patch_spec(&self.name, json!({"instances": full})).await;
        // `<N>-<generation>-<nonce>`: the nonce is drawn by the operator, read from status.
        let prefix = format!("{full}-{}-", grown.metadata.generation.unwrap_or_default());
        let env = &*self.env;
        let token = wait_for("confirmation asked for", Duration::from_secs(120), async || {
            let asked = env
                .cluster(&self.name)
                .await
                .status
                .and_then(|s| s.confirmation_token);
            Ok(asked.filter(|t| t.starts_with(&prefix)))
        })
        .await;
        // Both lists in use while the new members are fenced, waiting for the confirmation.
        tokio::time::sleep(BOTH_LISTS).await;
        // The confirmation says no client uses the shorter list any more: make it true first.
        shorter_list.finish().await?;
        self.env
            .kubectl(&[
                "annotate",
                "--overwrite",
                "rlc",
                &self.name,
                &format!(
                    "{}={token}",
                    redlock_operator::decide::resize::CLIENTS_USE_INSTANCES
                ),
            ])
            .await;
        Ok(())
    }

    /// The client Secret and the endpoints ConfigMap once both publish the list of
    /// `instances` (each is one object with its list and quorum; a pod mounting both may see
    /// one updated before the other, so the clients start when they agree).
    async fn published_list(
        &self,
        instances: i32,
    ) -> (
        std::collections::BTreeMap<String, String>,
        std::collections::BTreeMap<String, String>,
    ) {
        let env = &*self.env;
        let count = |v: Option<&String>| v.map_or(0, |l| l.split_whitespace().count() as i32);
        wait_for("shorter list published", Duration::from_secs(120), async || {
            let (secret, config) = mounts::read_published(env.cp.client(), &env.ns, &self.name).await?;
            let quorum = (instances / 2 + 1).to_string();
            let agree = count(secret.get("urls")) == instances
                && count(config.get("servers")) == instances
                && secret.get("quorum") == Some(&quorum)
                && config.get("quorum") == Some(&quorum);
            Ok(agree.then_some((secret, config)))
        })
        .await
    }

    /// An insider with the operator's admin login fences the member by hand, keys intact; once
    /// the operator has found the fence and holds the member (in full from then: the fence may
    /// hide a flush), the insider switches it back on `duration_ms` later, within or just after
    /// that hold, which the operator must answer with a fence and a hold again while one runs.
    async fn hand_fence(&self, f: &Fault, before: &[Option<String>]) -> Result<()> {
        let slot = f.members[0];
        let ip = self.env.pod_ip(&self.name, slot as i32).await;
        let admin = self.env.admin_login(&self.name).await;
        let user = self.env.client_login(&self.name).await.user;
        let mut conn = crate::connect(ip, &admin)
            .await
            .context("the admin login, as an insider uses it")?;
        let acl = |on: &str| {
            let mut c = redis::cmd("ACL");
            c.arg("SETUSER").arg(&user).arg(on);
            c
        };
        let () = acl("off").query_async(&mut conn).await?;
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&user)
            .query_async(&mut conn)
            .await?;
        let fenced_at = Timestamp::now();
        let run = before[slot].clone().unwrap_or_default();
        let env = &*self.env;
        let name = &self.name;
        // Held for it (the same process), in full from no earlier than the fence.
        wait_for(
            "the hand fence found and held",
            Duration::from_secs(60),
            async || {
                let m = env.member(name, slot as i32).await;
                Ok(m.filter(|m| {
                    m.state.is_holding()
                        && m.run_id.as_deref() == Some(run.as_str())
                        && m.hold_started_at
                            .as_ref()
                            .is_some_and(|t| t.0 >= fenced_at - Duration::from_secs(1))
                })
                .map(|_| ()))
            },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(f.duration_ms)).await;
        let () = acl("on").query_async(&mut conn).await?;
        Ok(())
    }

    /// A second operator on another Lease beside the first; one member killed, then the first
    /// operator killed while it is held. The second takes the cluster over once the first's
    /// Lease lapses, and must keep the hold; then the first comes back, the second stops
    /// (SIGTERM gives its Lease up), and the first takes the cluster back.
    async fn two_operators(
        &mut self,
        f: &Fault,
        replaced: &[usize],
        before: &[Option<String>],
    ) -> Result<()> {
        let slot = f.members[0];
        self.operator_restarts += 1;
        let n = self.operator_restarts;
        let lease = format!("--lease-name=second-{n}");
        let mut second =
            crate::start_operator_with(&self.env.cp, &format!("operator-{n}-second-lease.log"), &[&lease])
                .await;
        self.kill(slot, Signal::SIGKILL).await?;
        let old = before[slot].clone().unwrap_or_default();
        wait_held(self.env, &self.name, slot as i32, &old).await;
        self.env.operator.kill()?;
        self.env.operator.wait_exit(Duration::from_secs(5)).await?;
        self.wait_recovered(replaced, before).await;
        self.env.operator = start_operator(&self.env.cp, &format!("operator-{n}.log")).await;
        second.terminate(Duration::from_secs(10)).await?;
        let env = &*self.env;
        let name = &self.name;
        wait_for(
            "the first operator's Lease on record again",
            Duration::from_secs(120),
            async || {
                let lease = env.cluster(name).await.status.and_then(|s| s.lease);
                Ok((lease == Some(format!("default/{}", crate::LEASE))).then_some(()))
            },
        )
        .await;
        Ok(())
    }

    async fn wait_hold(&self, what: &str, f: impl Fn(&redlock_operator::crd::HoldPolicy) -> bool) {
        self.env.wait_hold(&self.name, what, f).await;
    }

    /// Every member serves again (Ready, released, Available) and every replaced member runs
    /// a new process: the operator has seen the fault and its hold is over.
    async fn wait_recovered(&self, replaced: &[usize], before: &[Option<String>]) {
        let env = &*self.env;
        // A real kubelet restarts a container that keeps dying after a crash-loop backoff that
        // doubles from 10 s up to 5 min (it reached 2m40s for a pod killed five times in a
        // 39-fault run, past the 120 s that suffice on the process kubelet).
        let timeout = if env.cp.has_real_nodes() {
            Duration::from_secs(420)
        } else {
            Duration::from_secs(120)
        };
        wait_for("cluster recovered", timeout, async || {
            let c = env.cluster(&self.name).await;
            let s = c.status.unwrap_or_default();
            let all_ready = s.ready_instances == Some(self.members as i32)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True");
            let new_processes = replaced.iter().all(|&slot| {
                s.members
                    .iter()
                    .find(|m| m.slot == slot as i32)
                    .is_some_and(|m| m.run_id.is_some() && m.run_id != before[slot])
            });
            Ok((all_ready && new_processes).then_some(()))
        })
        .await;
    }
}
