//! Leader election with a `coordination.k8s.io/v1` Lease, following client-go's rules.
//!
//! Only the leader reconciles. Two operators writing at once could both act on a lost
//! member (two holds, a release racing a delete), so leadership must be exclusive in time,
//! not just eventually. The rules that make it so:
//!
//! - A candidate never trusts the holder's `renewTime` (another host's clock). It remembers
//!   when *it* last saw the Lease record change and takes over only after the record has
//!   stayed unchanged for the holder's `leaseDurationSeconds` on its own clock.
//! - The leader counts its lease from the moment it *started* a successful renewal (the
//!   record can only change after that, so every candidate's clock starts later) and stops
//!   writing once `renew_deadline` (< lease duration) has passed without another one.
//!   [`Leadership::check`] guards every write; the renewal task ends the controller at the
//!   same deadline. So the old leader's last write precedes the earliest takeover by at least
//!   `lease_duration - renew_deadline`.
//! - Every Lease write carries the `resourceVersion` it was decided from: of two candidates
//!   only one update succeeds, the other gets a conflict and stays a candidate.
//! - On shutdown the leader releases the Lease (empty holder) after its controller stopped,
//!   so a successor starts at once instead of waiting out the lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Timing of the election; see [`LeaseTiming::new`] for the rules between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseTiming {
    /// How long candidates wait after the last change of the record before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// Pause between two attempts (to acquire or to renew).
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// The lease is published in whole seconds, so its duration must be whole seconds; the
    /// leader must give up strictly before anyone may take over, and must get more than one
    /// attempt at renewing before it gives up (client-go demands the same, with jitter 1.2).
    pub fn new(lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Result<Self> {
        let bad = |why: String| Err(Error::LeaseConfig(why));
        if lease_duration.subsec_nanos() != 0 || lease_duration.is_zero() {
            return bad(format!(
                "lease duration must be a whole number of seconds ≥ 1, got {lease_duration:?}"
            ));
        }
        if renew_deadline >= lease_duration {
            return bad(format!(
                "renew deadline {renew_deadline:?} must be shorter than the lease duration {lease_duration:?}"
            ));
        }
        if retry_period.mul_f64(1.2) >= renew_deadline {
            return bad(format!(
                "retry period {retry_period:?} × 1.2 must be shorter than the renew deadline {renew_deadline:?}"
            ));
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// Where the Lease lives and who we are.
#[derive(Debug, Clone)]
pub(crate) struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub timing: LeaseTiming,
}

/// The parts of a Lease the election reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LeaseRecord {
    pub holder: Option<String>,
    pub lease_duration_seconds: i32,
    pub transitions: i32,
    /// Part of the record so that every renewal is a change a candidate sees (the time
    /// itself is another clock's and is never compared with ours).
    pub renew_time: Option<Timestamp>,
}

impl LeaseRecord {
    pub fn from_lease(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            transitions: spec.lease_transitions.unwrap_or(0),
            renew_time: spec.renew_time.map(|t| t.0),
        }
    }
}

/// What a candidate or leader does next with the Lease it just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It is ours: write a new renewTime.
    Renew,
    /// Free or expired: take it (counts a transition).
    TakeOver,
    /// Someone else holds it and may still be alive.
    Wait { holder: String },
}

/// client-go's `tryAcquireOrRenew`, as a pure function: `unchanged_since` is when this
/// process (on its own clock) first saw `record` in its current form.
pub(crate) fn decide(
    identity: &str,
    record: &LeaseRecord,
    unchanged_since: Instant,
    now: Instant,
) -> Decision {
    match &record.holder {
        Some(holder) if holder == identity => Decision::Renew,
        None => Decision::TakeOver,
        Some(_) if expired(record, unchanged_since, now) => Decision::TakeOver,
        Some(holder) => Decision::Wait {
            holder: holder.clone(),
        },
    }
}

/// Whether a held Lease, unchanged since `unchanged_since` on this process's clock, has gone
/// unrenewed for its whole duration: its holder stopped acting by its renew deadline (the
/// times written in it are another clock's and are never compared with ours).
pub(crate) fn expired(record: &LeaseRecord, unchanged_since: Instant, now: Instant) -> bool {
    let duration = Duration::from_secs(record.lease_duration_seconds.max(0) as u64);
    now >= unchanged_since + duration
}

/// The spec this process writes when it creates (`previous: None`), takes or renews the
/// Lease. Transitions count every change of holder, a taken released lease included.
pub(crate) fn held_spec(
    identity: &str,
    timing: &LeaseTiming,
    previous: Option<&LeaseRecord>,
    now: Timestamp,
    acquired: Option<Timestamp>,
) -> LeaseSpec {
    let transitions = match previous {
        None => 0,
        Some(p) if p.holder.as_deref() == Some(identity) => p.transitions,
        Some(p) => p.transitions + 1,
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(timing.lease_duration.as_secs() as i32),
        acquire_time: Some(MicroTime(acquired.unwrap_or(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Whether this process may write, shared with every reconcile.
#[derive(Debug, Clone)]
pub(crate) struct Leadership {
    /// `None`: leader election is off (a single operator), writes are always allowed.
    valid_until: Option<Arc<Mutex<Instant>>>,
    /// How long after this process stops acting a successor may take over at the earliest:
    /// lease duration minus renew deadline (`None` without election: there is no successor).
    takeover_margin: Option<Duration>,
}

impl Leadership {
    /// For an operator that runs without leader election.
    pub fn unconditional() -> Self {
        Self {
            valid_until: None,
            takeover_margin: None,
        }
    }

    fn elected(valid_until: Instant, timing: LeaseTiming) -> Self {
        Self {
            valid_until: Some(Arc::new(Mutex::new(valid_until))),
            takeover_margin: Some(timing.lease_duration - timing.renew_deadline),
        }
    }

    /// Whether a time hidden from this process's monotonic clock of up to `hidden` (a
    /// suspension, as its wall clock shows it) is too short for a successor to have taken over
    /// and written: always without election, else when it is under the takeover margin.
    pub fn no_successor_within(&self, hidden: Duration) -> bool {
        self.takeover_margin.is_none_or(|margin| hidden < margin)
    }

    /// Ok while the lease is certainly ours; every write of the reconciler goes through here.
    pub fn check(&self) -> Result<()> {
        match &self.valid_until {
            None => Ok(()),
            Some(until) => {
                let until = *until.lock().expect("leadership lock is never poisoned");
                if Instant::now() < until {
                    Ok(())
                } else {
                    Err(Error::NotLeader)
                }
            }
        }
    }

    fn extend(&self, until: Instant) {
        if let Some(v) = &self.valid_until {
            *v.lock().expect("leadership lock is never poisoned") = until;
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.valid_until
            .as_ref()
            .map(|v| *v.lock().expect("leadership lock is never poisoned"))
    }
}

/// Role of this process, for `/readyz` and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// Still reading the Lease for the first time.
    Starting,
    /// Another live process leads; this one waits to take over.
    Standby { leader: String },
}

/// Runs the election against the API.
pub(crate) struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The record as last read and when it was first seen in that form.
    seen: Option<(LeaseRecord, Instant)>,
    acquired_at: Option<Timestamp>,
}

/// Outcome of one attempt.
enum Attempt {
    Held,
    Waiting(String),
}

impl Elector {
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            seen: None,
            acquired_at: None,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Tries every retry period until the Lease is ours (`Some`) or `shutdown` (`None`).
    /// `role` is told each time the standby leader changes.
    pub async fn acquire(&mut self, shutdown: &CancellationToken, role: impl Fn(Role)) -> Option<Leadership> {
        let timing = self.config.timing;
        let mut last_role = Role::Starting;
        loop {
            let started = Instant::now();
            match tokio::time::timeout(timing.renew_deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Held)) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired the leader lease");
                    return Some(Leadership::elected(started + timing.renew_deadline, timing));
                }
                Ok(Ok(Attempt::Waiting(leader))) => {
                    let now = Role::Standby { leader };
                    if now != last_role {
                        tracing::info!(role = ?now, "standing by for the leader lease");
                        role(now.clone());
                        last_role = now;
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader lease attempt failed"),
                Err(_) => tracing::warn!("leader lease attempt timed out"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = tokio::time::sleep(timing.retry_period) => {}
            }
        }
    }

    /// Renews every retry period; returns only when the lease is lost (taken by another
    /// process, or not renewed within the renew deadline). The caller must then stop writing
    /// at once; [`Leadership::check`] already refuses.
    pub async fn keep(&mut self, leadership: &Leadership) {
        let timing = self.config.timing;
        loop {
            // Never sleep past the deadline: after a failed renewal the deadline can come
            // before the next retry, and the in-flight reconciles must be dropped at it, not
            // up to a retry period later.
            let deadline = leadership.deadline().unwrap_or_else(Instant::now);
            tokio::time::sleep_until((Instant::now() + timing.retry_period).min(deadline)).await;
            let started = Instant::now();
            if started >= deadline {
                tracing::error!(lease = %self.config.name, "leader lease not renewed within the renew deadline; stopping");
                return;
            }
            let outcome = tokio::time::timeout(deadline - started, self.try_acquire_or_renew()).await;
            match outcome {
                Ok(Ok(Attempt::Held)) => leadership.extend(started + timing.renew_deadline),
                Ok(Ok(Attempt::Waiting(holder))) => {
                    tracing::error!(lease = %self.config.name, %holder, "leader lease taken by another process; stopping");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader lease renewal failed; retrying"),
                Err(_) => {
                    tracing::error!(lease = %self.config.name, "leader lease not renewed within the renew deadline; stopping");
                    return;
                }
            }
        }
    }

    /// Gives the Lease up (empty holder, 1 s duration, as client-go does) so a successor need
    /// not wait for it to expire. Only after the controller has stopped writing.
    pub async fn release(&mut self) {
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
                return Ok::<_, kube::Error>(false);
            };
            let record = LeaseRecord::from_lease(&lease);
            if record.holder.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            let now = Timestamp::now();
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: None,
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(record.transitions),
                ..Default::default()
            });
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await?;
            Ok(true)
        };
        match tokio::time::timeout(self.config.timing.renew_deadline, result).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.config.name, "released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "releasing the leader lease failed; it expires on its own")
            }
            Err(_) => tracing::warn!("releasing the leader lease timed out; it expires on its own"),
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt> {
        let name = self.config.name.clone();
        let identity = self.config.identity.clone();
        let (name, identity) = (name.as_str(), identity.as_str());
        let Some(mut lease) = self.api.get_opt(name).await? else {
            let now = Timestamp::now();
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(held_spec(identity, &self.config.timing, None, now, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.acquired_at = Some(now);
                    self.remember(LeaseRecord::from_lease(&created));
                    Ok(Attempt::Held)
                }
                // Another candidate created it first: read it next time.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Waiting(String::new())),
                Err(e) => Err(e.into()),
            };
        };
        let record = LeaseRecord::from_lease(&lease);
        let unchanged_since = self.remember(record.clone());
        match decide(identity, &record, unchanged_since, Instant::now()) {
            Decision::Wait { holder } => {
                self.acquired_at = None;
                Ok(Attempt::Waiting(holder))
            }
            decision => {
                let now = Timestamp::now();
                if decision == Decision::TakeOver || self.acquired_at.is_none() {
                    self.acquired_at = Some(now);
                }
                lease.spec = Some(held_spec(
                    identity,
                    &self.config.timing,
                    Some(&record),
                    now,
                    self.acquired_at,
                ));
                // `replace` sends the resourceVersion read above: a concurrent writer wins,
                // this one gets 409 and stays a candidate.
                match self.api.replace(name, &PostParams::default(), &lease).await {
                    Ok(updated) => {
                        self.remember(LeaseRecord::from_lease(&updated));
                        Ok(Attempt::Held)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        self.acquired_at = None;
                        Ok(Attempt::Waiting(record.holder.unwrap_or_default()))
                    }
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Records `record` as seen now unless it is what was seen before; returns since when it
    /// has been seen unchanged.
    fn remember(&mut self, record: LeaseRecord) -> Instant {
        match &self.seen {
            Some((seen, since)) if *seen == record => *since,
            _ => {
                let now = Instant::now();
                self.seen = Some((record, now));
                now
            }
        }
    }
}

/// Identity of a process that has no pod name: host name and a random suffix (two
/// processes on one host must never share an identity).
pub(crate) fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "redlock-operator".into());
    let mut suffix = [0u8; 4];
    getrandom::fill(&mut suffix).expect("the OS random source works");
    let hex: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    format!("{host}_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, secs: i32) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(str::to_owned),
            lease_duration_seconds: secs,
            transitions: 3,
            renew_time: None,
        }
    }

    #[test]
    fn decisions_follow_client_go() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let cases = [
            // (holder, seen unchanged for, expected)
            (Some("me"), s(100), Decision::Renew),
            (Some("me"), s(0), Decision::Renew),
            (None, s(0), Decision::TakeOver),
            (
                Some("other"),
                s(0),
                Decision::Wait {
                    holder: "other".into(),
                },
            ),
            (
                Some("other"),
                s(14),
                Decision::Wait {
                    holder: "other".into(),
                },
            ),
            (Some("other"), s(15), Decision::TakeOver),
            (Some("other"), s(60), Decision::TakeOver),
        ];
        for (holder, age, expected) in cases {
            assert_eq!(
                decide("me", &record(holder, 15), t0, t0 + age),
                expected,
                "holder {holder:?} unchanged for {age:?}"
            );
        }
    }

    #[test]
    fn expiry_uses_the_holders_declared_duration_not_ours() {
        let t0 = Instant::now();
        let r = record(Some("other"), 60);
        assert!(matches!(
            decide("me", &r, t0, t0 + Duration::from_secs(30)),
            Decision::Wait { .. }
        ));
        assert_eq!(
            decide("me", &r, t0, t0 + Duration::from_secs(60)),
            Decision::TakeOver
        );
    }

    /// The defaults: lease 15 s, renew deadline 10 s, retry 2 s.
    fn default_timing() -> LeaseTiming {
        LeaseTiming::new(
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2),
        )
        .unwrap()
    }

    #[test]
    fn held_spec_counts_transitions_only_on_takeover() {
        let timing = default_timing();
        let now = Timestamp::from_second(1_000).unwrap();
        let renewed = held_spec(
            "me",
            &timing,
            Some(&record(Some("me"), 15)),
            now,
            Some(Timestamp::UNIX_EPOCH),
        );
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        assert_eq!(renewed.lease_duration_seconds, Some(15));
        let taken = held_spec("me", &timing, Some(&record(Some("other"), 15)), now, None);
        assert_eq!(taken.lease_transitions, Some(4));
        let released = held_spec("me", &timing, Some(&record(None, 1)), now, None);
        assert_eq!(
            released.lease_transitions,
            Some(4),
            "taking a released lease is a transition"
        );
        let created = held_spec("me", &timing, None, now, None);
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
    }

    #[test]
    fn timing_rules() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert!(LeaseTiming::new(s(15), s(10), s(2)).is_ok());
        assert!(LeaseTiming::new(s(3), s(2), ms(500)).is_ok());
        assert!(
            LeaseTiming::new(ms(1500), ms(1000), ms(100)).is_err(),
            "fractional seconds"
        );
        assert!(LeaseTiming::new(s(0), ms(0), ms(0)).is_err());
        assert!(
            LeaseTiming::new(s(10), s(10), s(2)).is_err(),
            "deadline = duration"
        );
        assert!(
            LeaseTiming::new(s(15), s(10), ms(8400)).is_err(),
            "retry × 1.2 = deadline"
        );
    }

    #[test]
    fn released_lease_reads_as_free() {
        let lease = Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                ..Default::default()
            }),
        };
        let r = LeaseRecord::from_lease(&lease);
        assert_eq!(r.holder, None);
        assert_eq!(
            decide("me", &r, Instant::now(), Instant::now()),
            Decision::TakeOver
        );
    }

    #[test]
    fn leadership_expires_at_its_deadline() {
        assert!(Leadership::unconditional().check().is_ok());
        let timing = default_timing();
        let l = Leadership::elected(Instant::now() + Duration::from_secs(60), timing);
        assert!(l.check().is_ok());
        l.extend(Instant::now() - Duration::from_millis(1));
        assert!(matches!(l.check(), Err(Error::NotLeader)));
    }

    /// A successor may take over no earlier than lease duration minus renew deadline after
    /// this process stopped acting; without election there is none.
    #[test]
    fn a_successor_needs_the_takeover_margin() {
        let timing = default_timing();
        let l = Leadership::elected(Instant::now() + Duration::from_secs(10), timing);
        assert!(l.no_successor_within(Duration::from_millis(4_999)));
        assert!(!l.no_successor_within(Duration::from_secs(5)));
        let tight = LeaseTiming::new(
            Duration::from_secs(2),
            Duration::from_millis(1_500),
            Duration::from_millis(500),
        )
        .unwrap();
        let l = Leadership::elected(Instant::now() + Duration::from_secs(1), tight);
        assert!(!l.no_successor_within(Duration::from_millis(500)));
        assert!(Leadership::unconditional().no_successor_within(Duration::from_secs(3600)));
    }

    #[test]
    fn identities_without_a_pod_name_differ_per_process() {
        assert_ne!(default_identity(), default_identity());
    }

    #[test]
    fn a_renewal_is_a_change_candidates_see() {
        let mut a = record(Some("other"), 15);
        let b = LeaseRecord {
            renew_time: Some(Timestamp::from_second(5).unwrap()),
            ..a.clone()
        };
        assert_ne!(a, b);
        a.renew_time = b.renew_time;
        assert_eq!(a, b);
    }
}
