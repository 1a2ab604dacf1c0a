//! Clusters at rest: every member serving, nothing planned, nothing pending. Such a cluster
//! is not reconciled once a probe period; the watch of [`crate::reconcile::rest_watch`] probes its
//! members instead and wakes a reconcile as soon as a probe reads anything a reconcile would
//! act on (issue 17: a reconcile of every cluster every second was most of an idle operator's
//! CPU).
//!
//! What may rest is decided here (pure, [`rest_of`]), and which rests are current
//! ([`Resting`]). The rule is narrow on purpose: anything time-driven (a hold running out, a
//! lowering of maxLockTTL, a process awaited, a retry) keeps the per-period reconcile, and a
//! change the API server sees (a pod, a child, the cluster, a node's zone) triggers a
//! reconcile through the watches as before. What only a probe can see (a restarted or stopped
//! process, a fence lifted behind the operator's back, changed passwords, a member clock's
//! jump) is what the rest watch compares, every probe period, as the reconcile would.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use crate::clock::member::Verdict;
use crate::crd::model::Slot;
use crate::crd::{ClockRecord, MemberState, RedlockCluster, RedlockClusterStatus};
use crate::decide::observe::{PodState, RedisInfo, SlotObservation};
use crate::decide::plan::Plan;
use crate::hold::ttl_audit;
use crate::redis::admin::AdminAccess;

/// What the reconcile that would let a cluster rest decided and saw, besides the plan and
/// the status.
pub(crate) struct Settled<'a> {
    pub instances: i32,
    pub observed: &'a BTreeMap<Slot, SlotObservation>,
    /// The spec was accepted, every child applied and shown current by the caches (no
    /// conflict), no password rotation is under way, every process accepts exactly the
    /// passwords on record, no event about the cluster is due, and acting left nothing to
    /// retry.
    pub quiet: bool,
    /// Releases may not happen now (the operator's clock): a state to leave soon, not rest in.
    pub release_blocked: bool,
    /// Every member's clock was compared with the reading on record by this leader
    /// (`clock_record::across_leaders`; it waits for the operator's own offset to the API
    /// server). Until then each reconcile tries again: a jump while no leader probed the
    /// member is found only so, and the rest watch judges only against its own samples.
    pub clocks_compared: bool,
    /// What the TTL audit reported (`None` until it has swept a member): the status shows it,
    /// and the rest watch wakes a reconcile when a period of its own reports other findings.
    pub ttl: Option<ttl_audit::Report>,
}

/// One member of a resting cluster, as the reconcile that let it rest probed it.
#[derive(Clone, Debug)]
pub(crate) struct RestingMember {
    pub slot: Slot,
    pub ip: IpAddr,
    /// How its process is reached when not as the cluster's access says (a pod built for
    /// another client user or TLS mode, `AdminAccess::for_slot`).
    pub access: Option<AdminAccess>,
    pub seen: Seen,
    /// Its clock reading as the reconcile put it on record (`clock_record`): the watch wakes
    /// a reconcile when the record is due to be written again, as a reconcile would write it.
    pub clock_record: Option<ClockRecord>,
}

/// What a probe read of a process, as far as a reconcile acts on it. The run id and the
/// fence exactly; the rest (version, pod tag, both users' password hashes) as a digest,
/// which is all a comparison needs and keeps a resting cluster small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub run_id: String,
    pub client_enabled: bool,
    digest: u64,
}

impl Seen {
    pub fn of(info: &RedisInfo) -> Self {
        let mut h = DefaultHasher::new();
        info.version.hash(&mut h);
        info.pod_uid.hash(&mut h);
        info.client_password_hashes.hash(&mut h);
        info.admin_password_hashes.hash(&mut h);
        Self {
            run_id: info.run_id.clone(),
            client_enabled: info.client_enabled,
            digest: h.finish(),
        }
    }
}

/// A cluster at rest: what its rest watch probes, and what it compares with.
#[derive(Debug)]
pub(crate) struct Rest {
    pub cluster: ObjectRef<RedlockCluster>,
    pub access: AdminAccess,
    pub members: Vec<RestingMember>,
    /// The spec's clock drift factor and the maxLockTTL in force: member clocks are judged
    /// as the reconcile judges them (`member_clock::judge`).
    pub drift_factor: f64,
    pub max_lock_ttl: Duration,
    /// The TTL audit's report the status shows.
    pub ttl: Option<ttl_audit::Report>,
    /// How long the cluster rests before it is reconciled anyway ([`RESYNC`]).
    pub until_reconcile: Duration,
}

/// How often a resting cluster is reconciled all the same: a net under the watches and the
/// rest watch, which between them see every change a reconcile acts on (the API server's
/// objects, each process, the TTL audit). It costs one reconcile per cluster per period.
pub(crate) const RESYNC: Duration = Duration::from_secs(300);

/// Why a cluster does not rest (for the debug log), or the rest it may take.
pub(crate) fn rest_of(
    cluster: &RedlockCluster,
    access: &AdminAccess,
    plan: &Plan,
    status: &RedlockClusterStatus,
    settled: &Settled<'_>,
    max_lock_ttl: Duration,
) -> Result<Rest, &'static str> {
    busy(plan, status, settled)?;
    let mut members = Vec::with_capacity(settled.instances.max(0) as usize);
    for (slot, o) in settled.observed {
        let info = o.probe.answered().ok_or("a member did not answer")?;
        let ip = o.pod_ip.ok_or("a member has no address")?;
        let for_slot = access.for_slot(o);
        let record = status.members.iter().find(|m| m.slot == *slot);
        members.push(RestingMember {
            slot: *slot,
            ip,
            access: match for_slot {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(a) => Some(a),
            },
            seen: Seen::of(info),
            clock_record: record.and_then(|m| m.clock.clone()),
        });
    }
    Ok(Rest {
        cluster: ObjectRef::from_obj(cluster),
        access: access.clone(),
        members,
        drift_factor: cluster.spec.clock_drift_factor,
        max_lock_ttl,
        ttl: settled.ttl.clone(),
        until_reconcile: RESYNC,
    })
}

/// Why the cluster must be reconciled again within a probe period, if it must.
fn busy(plan: &Plan, status: &RedlockClusterStatus, s: &Settled<'_>) -> Result<(), &'static str> {
    if !s.quiet {
        return Err("a rejection, an apply problem, a rotation, an event or a retry is pending");
    }
    if s.release_blocked {
        return Err("releases are blocked by the operator's clock");
    }
    if !s.clocks_compared {
        return Err("a member's clock is not yet compared with its record");
    }
    if !plan.create_pods.is_empty()
        || !plan.delete_pods.is_empty()
        || !plan.fences.is_empty()
        || !plan.releases.is_empty()
        || !plan.events.is_empty()
        || plan.awaiting_process
        || plan.next_hold_end.is_some()
    {
        return Err("the plan acts or waits");
    }
    if status.hold.as_ref().is_some_and(|h| h.lowers_at.is_some()) {
        return Err("a lowering of maxLockTTL is pending");
    }
    let n = Some(s.instances);
    if status.published_instances != n
        || status.confirmed_instances != n
        || status.updated_instances != n
        || status.ready_instances != n
    {
        return Err("a resize, a rollout or an unready member");
    }
    if status.members.len() != s.instances.max(0) as usize || s.observed.len() != status.members.len() {
        return Err("a member record or a pod beyond the spec");
    }
    for m in &status.members {
        let o = s.observed.get(&m.slot).ok_or("a member without a pod")?;
        let serving = m.state == MemberState::Ready
            && m.maintenance.is_none()
            && m.unstopped.is_none()
            && m.slot.within(s.instances);
        let running = matches!(
            o.pod,
            PodState::Running {
                ready: true,
                terminating: false,
                ..
            }
        );
        let answered = o
            .probe
            .answered()
            .is_some_and(|i| i.client_enabled && m.run_id.as_deref() == Some(i.run_id.as_str()));
        if !(serving && running && answered && matches!(o.clock, Some(Verdict::Steady))) {
            return Err("a member is not serving steadily");
        }
    }
    Ok(())
}

/// The clusters at rest now, by UID. Each rest has a generation: a rest watch acts only while
/// the rest it was started for is current, so a reconcile that ends a rest (and may start
/// another) is never raced by the watch of the old one.
#[derive(Default)]
pub(crate) struct Resting {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    by_uid: HashMap<String, (u64, Arc<Rest>)>,
}

impl Resting {
    /// Lets the cluster `uid` rest; returns the rest's generation.
    pub fn rest(&self, uid: &str, rest: Arc<Rest>) -> u64 {
        let mut inner = self.lock();
        inner.next += 1;
        let generation = inner.next;
        inner.by_uid.insert(uid.to_owned(), (generation, rest));
        generation
    }

    /// Ends the cluster's rest, whichever it is (a reconcile starts, the cluster is gone).
    pub fn wake(&self, uid: &str) {
        self.lock().by_uid.remove(uid);
    }

    /// Ends the rest of the cluster `ns/name`, for a cluster gone whose UID is not known;
    /// returns the UID it rested under.
    pub fn wake_cluster(&self, ns: &str, name: &str) -> Option<String> {
        let mut inner = self.lock();
        let uid = inner
            .by_uid
            .iter()
            .find(|(_, (_, r))| r.cluster.name == name && r.cluster.namespace.as_deref() == Some(ns))
            .map(|(uid, _)| uid.clone())?;
        inner.by_uid.remove(&uid);
        Some(uid)
    }

    /// Ends the rest `generation` if it is still current; whether it was.
    pub fn wake_if(&self, uid: &str, generation: u64) -> bool {
        let mut inner = self.lock();
        if inner.by_uid.get(uid).is_some_and(|(g, _)| *g == generation) {
            inner.by_uid.remove(uid);
            return true;
        }
        false
    }

    /// Runs `f` while the rest `generation` is current, under the lock a reconcile's
    /// [`Self::wake`] takes: what `f` stores is stored before that reconcile reads anything.
    pub fn while_current<T>(&self, uid: &str, generation: u64, f: impl FnOnce() -> T) -> Option<T> {
        let inner = self.lock();
        inner
            .by_uid
            .get(uid)
            .filter(|(g, _)| *g == generation)
            .map(|_| f())
    }

    /// How many clusters rest.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().by_uid.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("resting lock is never poisoned")
    }
}

/// What a rest watch's probe of one member means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// What the reconcile saw, and a steady clock.
    Same,
    /// Something a reconcile acts on: why, for the log.
    Changed(String),
}

/// Compares one member's probe with what the rest began with (pure). `clock` is the probe's
/// verdict on the member's clock (`member_clock::judge`), `record` the clock record a reconcile
/// would keep from it (`clock_record::across_leaders`), when a reading was possible.
pub(crate) fn look(
    member: &RestingMember,
    probe: &Result<RedisInfo, String>,
    clock: Option<&Verdict>,
    record: Option<&ClockRecord>,
) -> Look {
    let slot = member.slot.index();
    match probe {
        Err(e) => Look::Changed(format!("slot {slot}: probe failed: {e}")),
        Ok(info) if info.run_id != member.seen.run_id => Look::Changed(format!(
            "slot {slot}: process {} instead of {}",
            info.run_id, member.seen.run_id
        )),
        Ok(info) if !info.deviations.is_empty() => Look::Changed(format!(
            "slot {slot}: its settings changed: {}",
            info.deviations.join("; ")
        )),
        Ok(info) if info.client_enabled != member.seen.client_enabled => {
            Look::Changed(format!("slot {slot}: the client user's fence changed"))
        }
        Ok(info) if Seen::of(info) != member.seen => {
            Look::Changed(format!("slot {slot}: its version, pod tag or passwords changed"))
        }
        Ok(_) => match clock {
            Some(Verdict::Steady) if record.is_none_or(|r| Some(r) == member.clock_record.as_ref()) => {
                Look::Same
            }
            Some(Verdict::Steady) => Look::Changed(format!("slot {slot}: its clock record is due")),
            other => Look::Changed(format!("slot {slot}: its clock: {other:?}")),
        },
    }
}

#[cfg(test)]
mod tests;
