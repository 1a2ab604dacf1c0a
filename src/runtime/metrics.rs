//! Prometheus metrics: the operator's own (reconciles, errors, durations) and per cluster
//! (members by state, seconds left on each hold, losses, releases, actual hold lengths, TTL
//! audit findings).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::crd::conditions::ConditionType;
use crate::crd::{MemberState, RedlockClusterStatus};
use crate::error::Error;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    namespace: String,
    cluster: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    namespace: String,
    cluster: String,
    member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    namespace: String,
    cluster: String,
    condition: &'static str,
    status: &'static str,
}

/// The values a condition's status takes: its series are 1 for the one it has, 0 for the others
/// (as kube-state-metrics shows conditions), so an alert reads `== 1` for the case it is about.
const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    arch: &'static str,
}

const STATES: [(MemberState, &str); 4] = [
    (MemberState::Starting, "starting"),
    (MemberState::Held, "held"),
    (MemberState::Ready, "ready"),
    (MemberState::Lost, "lost"),
];

/// Per-cluster series, so they can be removed with the cluster.
struct ClusterSeries {
    members: Family<StateLabels, Gauge>,
    hold_remaining: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    losses: Family<ClusterLabels, Counter>,
    clock_jumps: Family<ClusterLabels, Counter>,
    releases: Family<ClusterLabels, Counter>,
    releases_ahead: Family<ClusterLabels, Counter>,
    hold_length: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    ttl_violations: Family<ClusterLabels, Gauge>,
    quorum: Family<ClusterLabels, Gauge>,
    instances: Family<ClusterLabels, Gauge>,
    in_maintenance: Family<ClusterLabels, Gauge>,
    release_overdue: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    release_lateness: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    conditions: Family<ConditionLabels, Gauge>,
    /// Member names with a hold-remaining series, per (namespace, cluster).
    known_members: Mutex<BTreeMap<(String, String), BTreeSet<String>>>,
    /// What `observe_members` last set, per namespace and cluster, while none of it depended
    /// on the time (no member held): setting the same again is skipped (it builds a label set
    /// per series, once a probe period per cluster).
    observed: Mutex<HashMap<String, HashMap<String, u64>>>,
}

/// What `observe_members` sets from a status with no member held: the members' names, slots,
/// states and maintenance, the instances and quorum, and the conditions.
fn series_fingerprint(status: &RedlockClusterStatus, instances: i32) -> u64 {
    let mut h = DefaultHasher::new();
    (instances, status.quorum).hash(&mut h);
    for c in &status.conditions {
        (&c.type_, &c.status).hash(&mut h);
    }
    for m in &status.members {
        (
            &m.name,
            m.slot,
            std::mem::discriminant(&m.state),
            m.maintenance.is_some(),
        )
            .hash(&mut h);
    }
    h.finish()
}

fn hold_length_histogram() -> Histogram {
    // 250 ms .. ~36 h: holds are maxLockTTL plus drift and margin.
    Histogram::new(exponential_buckets(0.25, 2.0, 20))
}

/// Release lateness bounds, 1 ms .. 30 s: a release is due the moment a hold ends. The
/// decimal steps put a bound at 100 ms, the lateness objective (p99 <= 100 ms), so a quantile
/// read from the buckets says whether it is met.
const RELEASE_LATENESS_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn release_lateness_histogram() -> Histogram {
    Histogram::new(RELEASE_LATENESS_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    reason: &'static str,
}

/// The operator's metrics and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    clusters: ClusterSeries,
    clock_offset: Gauge<f64, AtomicU64>,
    clock_offset_uncertainty: Gauge<f64, AtomicU64>,
    clock_steps: Counter<f64, AtomicU64>,
    clock_offset_limit: Gauge<f64, AtomicU64>,
    leader: Gauge,
}

impl Default for Metrics {
    // Long on purpose: one registration per metric family, in one place, so the registry and
    // the struct's fields can be read side by side.
    fn default() -> Self {
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        // 1 ms .. ~16 s: a reconcile is a few API calls plus Redis probes.
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let mut registry = Registry::with_prefix("redlock");
        registry.register(
            "reconciles",
            "Reconciles of RedlockCluster objects",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            duration.clone(),
        );
        let clusters = ClusterSeries {
            members: Family::default(),
            hold_remaining: Family::default(),
            losses: Family::default(),
            clock_jumps: Family::default(),
            releases: Family::default(),
            releases_ahead: Family::default(),
            hold_length: Family::new_with_constructor(hold_length_histogram),
            ttl_violations: Family::default(),
            quorum: Family::default(),
            instances: Family::default(),
            in_maintenance: Family::default(),
            release_overdue: Family::default(),
            release_lateness: Family::new_with_constructor(release_lateness_histogram),
            conditions: Family::default(),
            known_members: Mutex::default(),
            observed: Mutex::default(),
        };
        registry.register(
            "members",
            "Members of each RedlockCluster by state (starting, held, ready, lost)",
            clusters.members.clone(),
        );
        registry.register(
            "hold_remaining_seconds",
            "Seconds left on each member's hold (0 when not held)",
            clusters.hold_remaining.clone(),
        );
        registry.register(
            "instance_losses",
            "Released instances observed to lose their keys (crash, restart, deletion, eviction)",
            clusters.losses.clone(),
        );
        registry.register(
            "member_clock_jumps",
            "Serving members whose clock was seen to jump forward (each fenced and held in full)",
            clusters.clock_jumps.clone(),
        );
        registry.register(
            "instance_releases",
            "Instances released to lock clients",
            clusters.releases.clone(),
        );
        registry.register(
            "instance_releases_ahead_of_status",
            "Releases sent before their Ready status write: the hold they ended was on record in the operator's own last status write, with nothing newer (docs/design.md section 2)",
            clusters.releases_ahead.clone(),
        );
        registry.register(
            "hold_length_seconds",
            "Actual length of completed holds, from the loss to the release",
            clusters.hold_length.clone(),
        );
        registry.register(
            "ttl_policy_violations",
            "Keys found by the TTL audit without expiry or with a TTL above maxLockTTL",
            clusters.ttl_violations.clone(),
        );
        registry.register(
            "cluster_quorum",
            "Instances a lock client must lock in each RedlockCluster (N/2+1 of the published list)",
            clusters.quorum.clone(),
        );
        registry.register(
            "cluster_instances",
            "Instances asked for in each RedlockCluster (spec.instances)",
            clusters.instances.clone(),
        );
        registry.register(
            "members_in_maintenance",
            "Members fenced on purpose (kubectl redlock fence) in each RedlockCluster",
            clusters.in_maintenance.clone(),
        );
        registry.register(
            "member_release_overdue_seconds",
            "Seconds since a member's hold ended while it still does not serve (0 otherwise, and while fenced for maintenance)",
            clusters.release_overdue.clone(),
        );
        registry.register(
            "release_lateness_seconds",
            "Release time minus the end of the hold it ended",
            clusters.release_lateness.clone(),
        );
        registry.register(
            "cluster_condition",
            "Each condition of each RedlockCluster: 1 on the status it has (True, False or Unknown), 0 on the others",
            clusters.conditions.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                arch: std::env::consts::ARCH,
            })
            .set(1);
        registry.register(
            "build_info",
            "The operator's version and CPU architecture (always 1)",
            build,
        );
        let clock_offset = Gauge::<f64, AtomicU64>::default();
        let clock_offset_uncertainty = Gauge::<f64, AtomicU64>::default();
        let clock_steps = Counter::<f64, AtomicU64>::default();
        registry.register(
            "operator_clock_offset_seconds",
            "The operator's wall clock minus the API server's (middle of the measured interval)",
            clock_offset.clone(),
        );
        registry.register(
            "operator_clock_offset_uncertainty_seconds",
            "Half the width of the interval the clock offset is known to lie in",
            clock_offset_uncertainty.clone(),
        );
        registry.register(
            "operator_clock_forward_steps_seconds",
            "Sum of the forward steps of the operator's wall clock since it started (each lengthens running holds)",
            clock_steps.clone(),
        );
        let clock_offset_limit = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "operator_clock_offset_limit_seconds",
            "Bound on the clock offset plus its uncertainty beyond which no member is released",
            clock_offset_limit.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 on the operator replica that holds the leader Lease (the only one that reconciles), 0 on a standby",
            leader.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            duration,
            clusters,
            clock_offset,
            clock_offset_uncertainty,
            clock_steps,
            clock_offset_limit,
            leader,
        }
    }
}

impl Metrics {
    /// Counts a reconcile and records its duration when the returned guard drops, so early
    /// returns and errors are measured too.
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: &self.duration,
            start: Instant::now(),
        }
    }

    pub fn clock_offset(&self, estimate: f64, uncertainty: f64) {
        self.clock_offset.set(estimate);
        self.clock_offset_uncertainty.set(uncertainty);
    }

    pub fn clock_offset_limit(&self, limit: f64) {
        self.clock_offset_limit.set(limit);
    }

    pub fn leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The sum of the wall clock's forward steps since the start (`skipped`, which only grows):
    /// the counter goes up by what is new.
    pub fn clock_steps(&self, skipped: f64) {
        let new = skipped - self.clock_steps.get();
        if new > 0.0 {
            self.clock_steps.inc_by(new);
        }
    }

    pub fn reconcile_failed(&self, error: &Error) {
        self.errors
            .get_or_create(&ErrorLabels {
                reason: error.metric_label(),
            })
            .inc();
    }

    /// Sets the member gauges of one cluster from the status just computed.
    pub fn observe_members(
        &self,
        ns: &str,
        cluster: &str,
        status: &RedlockClusterStatus,
        instances: i32,
        now: Timestamp,
    ) {
        let c = &self.clusters;
        let members = status.members.as_slice();
        // Hold-remaining and overdue seconds change with the time only for held members.
        let timeless = !members
            .iter()
            .any(|m| m.state.is_holding() && m.held_until.is_some());
        let fingerprint = timeless.then(|| series_fingerprint(status, instances));
        {
            let observed = c.observed.lock().expect("metrics lock is never poisoned");
            if fingerprint.is_some() && observed.get(ns).and_then(|o| o.get(cluster)) == fingerprint.as_ref()
            {
                return;
            }
        }
        for (state, label) in STATES {
            let n = members
                .iter()
                .filter(|m| m.slot.within(instances) && m.state == state)
                .count();
            c.members
                .get_or_create(&StateLabels {
                    namespace: ns.into(),
                    cluster: cluster.into(),
                    state: label,
                })
                .set(n as i64);
        }
        let labels = cluster_labels(ns, cluster);
        if let Some(q) = status.quorum {
            c.quorum.get_or_create(&labels).set(i64::from(q));
        }
        c.instances.get_or_create(&labels).set(i64::from(instances));
        for condition in ConditionType::ALL {
            let has = status
                .conditions
                .iter()
                .find(|c| c.type_ == condition.as_str())
                .map(|c| c.status.as_str());
            for value in CONDITION_STATUSES {
                let series = condition_labels(ns, cluster, condition, value);
                match has {
                    Some(status) => {
                        c.conditions
                            .get_or_create(&series)
                            .set(i64::from(status == value));
                    }
                    // Not (or no longer) on the cluster: no series rather than a made-up value.
                    None => {
                        c.conditions.remove(&series);
                    }
                }
            }
        }
        let in_maintenance = members.iter().filter(|m| m.maintenance.is_some()).count();
        c.in_maintenance.get_or_create(&labels).set(in_maintenance as i64);
        let mut known = c.known_members.lock().expect("metrics lock is never poisoned");
        let names = known.entry((ns.into(), cluster.into())).or_default();
        let current: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
        for gone in names.difference(&current) {
            c.hold_remaining.remove(&member_labels(ns, cluster, gone));
            c.release_overdue.remove(&member_labels(ns, cluster, gone));
        }
        for m in members {
            let until = m
                .held_until
                .as_ref()
                .filter(|_| m.state.is_holding())
                .map(|t| t.0);
            let left = until.map_or(0.0, |u| u.duration_since(now).as_secs_f64().max(0.0));
            // A removed slot's record (slot >= N) only waits out its hold; it is never released.
            // A member unfenced after its hold ended is due from the unfencing (its `since`).
            let due = until.map(|u| m.since.as_ref().map_or(u, |s| u.max(s.0)));
            let overdue = due
                .filter(|_| m.maintenance.is_none() && m.slot.within(instances))
                .map_or(0.0, |u| now.duration_since(u).as_secs_f64().max(0.0));
            c.hold_remaining
                .get_or_create(&member_labels(ns, cluster, &m.name))
                .set(left);
            c.release_overdue
                .get_or_create(&member_labels(ns, cluster, &m.name))
                .set(overdue);
        }
        *names = current;
        drop(known);
        let mut observed = c.observed.lock().expect("metrics lock is never poisoned");
        match fingerprint {
            Some(f) => {
                observed
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(cluster.to_owned(), f);
            }
            None => {
                if let Some(o) = observed.get_mut(ns) {
                    o.remove(cluster);
                }
            }
        }
    }

    pub fn member_clock_jump(&self, ns: &str, cluster: &str) {
        self.clusters
            .clock_jumps
            .get_or_create(&ClusterLabels {
                namespace: ns.to_owned(),
                cluster: cluster.to_owned(),
            })
            .inc();
    }

    pub fn instance_lost(&self, ns: &str, cluster: &str) {
        self.clusters
            .losses
            .get_or_create(&cluster_labels(ns, cluster))
            .inc();
    }

    /// Counts a release of `ended`, the hold it ended if it ended one; `ahead`: sent before
    /// its status write.
    pub fn released(&self, ns: &str, cluster: &str, ended: Option<EndedHold>, ahead: bool) {
        let labels = cluster_labels(ns, cluster);
        self.clusters.releases.get_or_create(&labels).inc();
        if ahead {
            self.clusters.releases_ahead.get_or_create(&labels).inc();
        }
        if let Some(h) = ended {
            self.clusters.hold_length.get_or_create(&labels).observe(h.length);
            self.clusters
                .release_lateness
                .get_or_create(&labels)
                .observe(h.lateness);
        }
    }

    pub fn ttl_violations(&self, ns: &str, cluster: &str, keys: u64) {
        self.clusters
            .ttl_violations
            .get_or_create(&cluster_labels(ns, cluster))
            .set(keys as i64);
    }

    /// Drops every series of a deleted cluster.
    pub fn forget_cluster(&self, ns: &str, cluster: &str) {
        let c = &self.clusters;
        if let Some(o) = c
            .observed
            .lock()
            .expect("metrics lock is never poisoned")
            .get_mut(ns)
        {
            o.remove(cluster);
        }
        for (_, label) in STATES {
            c.members.remove(&StateLabels {
                namespace: ns.into(),
                cluster: cluster.into(),
                state: label,
            });
        }
        let names = c
            .known_members
            .lock()
            .expect("metrics lock is never poisoned")
            .remove(&(ns.into(), cluster.into()))
            .unwrap_or_default();
        for name in names {
            c.hold_remaining.remove(&member_labels(ns, cluster, &name));
            c.release_overdue.remove(&member_labels(ns, cluster, &name));
        }
        let labels = cluster_labels(ns, cluster);
        c.losses.remove(&labels);
        c.clock_jumps.remove(&labels);
        c.releases.remove(&labels);
        c.releases_ahead.remove(&labels);
        c.hold_length.remove(&labels);
        c.ttl_violations.remove(&labels);
        c.quorum.remove(&labels);
        c.instances.remove(&labels);
        c.in_maintenance.remove(&labels);
        c.release_lateness.remove(&labels);
        for condition in ConditionType::ALL {
            for value in CONDITION_STATUSES {
                c.conditions
                    .remove(&condition_labels(ns, cluster, condition, value));
            }
        }
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

fn cluster_labels(ns: &str, cluster: &str) -> ClusterLabels {
    ClusterLabels {
        namespace: ns.into(),
        cluster: cluster.into(),
    }
}

fn condition_labels(
    ns: &str,
    cluster: &str,
    condition: ConditionType,
    status: &'static str,
) -> ConditionLabels {
    ConditionLabels {
        namespace: ns.into(),
        cluster: cluster.into(),
        condition: condition.as_str(),
        status,
    }
}

fn member_labels(ns: &str, cluster: &str, member: &str) -> MemberLabels {
    MemberLabels {
        namespace: ns.into(),
        cluster: cluster.into(),
        member: member.into(),
    }
}

/// A hold ended by a release, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndedHold {
    /// From the loss to the release.
    pub length: f64,
    /// From the hold's end (`heldUntil`) to the release.
    pub lateness: f64,
}

/// Records the elapsed time of a reconcile on drop.
pub struct ReconcileTimer<'a> {
    histogram: &'a Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::MemberStatus;

    fn status(members: &[MemberStatus], quorum: i32) -> RedlockClusterStatus {
        RedlockClusterStatus {
            members: members.to_vec(),
            quorum: Some(quorum),
            ..RedlockClusterStatus::default()
        }
    }

    #[test]
    fn renders_counts_errors_and_durations() {
        let m = Metrics::default();
        drop(m.reconcile_started());
        drop(m.reconcile_started());
        m.reconcile_failed(&Error::CrdNotInstalled);
        let text = m.render();
        assert!(text.contains("redlock_reconciles_total 2"), "{text}");
        assert!(
            text.contains("redlock_reconcile_errors_total{reason=\"CrdNotInstalled\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("redlock_reconcile_duration_seconds_count 2"),
            "{text}"
        );
    }

    fn member(slot: i32, state: MemberState, held_until: Option<i64>) -> MemberStatus {
        MemberStatus {
            held_until: held_until.map(|s| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::from_second(s).unwrap())
            }),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    #[test]
    fn per_cluster_series_follow_the_members_and_go_with_the_cluster() {
        let m = Metrics::default();
        let now = Timestamp::from_second(100).unwrap();
        let members = [
            member(0, MemberState::Ready, None),
            member(1, MemberState::Held, Some(130)),
            member(2, MemberState::Lost, Some(110)),
            member(3, MemberState::Held, Some(40)),
            MemberStatus {
                maintenance: Some("kernel upgrade".into()),
                ..member(4, MemberState::Held, Some(70))
            },
            member(5, MemberState::Held, Some(50)), // retired slot: not counted, never overdue
        ];
        m.observe_members("ns", "locks", &status(&members, 3), 5, now);
        m.instance_lost("ns", "locks");
        m.released(
            "ns",
            "locks",
            Some(EndedHold {
                length: 31.5,
                lateness: 0.02,
            }),
            true,
        );
        m.released("ns", "locks", None, false);
        m.ttl_violations("ns", "locks", 2);
        let text = m.render();
        for line in [
            r#"redlock_members{namespace="ns",cluster="locks",state="ready"} 1"#,
            r#"redlock_members{namespace="ns",cluster="locks",state="held"} 3"#,
            r#"redlock_members{namespace="ns",cluster="locks",state="lost"} 1"#,
            r#"redlock_members{namespace="ns",cluster="locks",state="starting"} 0"#,
            r#"redlock_hold_remaining_seconds{namespace="ns",cluster="locks",member="locks-1"} 30.0"#,
            r#"redlock_hold_remaining_seconds{namespace="ns",cluster="locks",member="locks-0"} 0.0"#,
            r#"redlock_instance_losses_total{namespace="ns",cluster="locks"} 1"#,
            r#"redlock_instance_releases_total{namespace="ns",cluster="locks"} 2"#,
            r#"redlock_instance_releases_ahead_of_status_total{namespace="ns",cluster="locks"} 1"#,
            r#"redlock_hold_length_seconds_count{namespace="ns",cluster="locks"} 1"#,
            r#"redlock_ttl_policy_violations{namespace="ns",cluster="locks"} 2"#,
            r#"redlock_release_lateness_seconds_sum{namespace="ns",cluster="locks"} 0.02"#,
            r#"redlock_cluster_quorum{namespace="ns",cluster="locks"} 3"#,
            r#"redlock_cluster_instances{namespace="ns",cluster="locks"} 5"#,
            r#"redlock_members_in_maintenance{namespace="ns",cluster="locks"} 1"#,
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-0"} 0.0"#,
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-1"} 0.0"#,
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-3"} 60.0"#,
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-4"} 0.0"#,
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-5"} 0.0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // A member that goes away loses its series.
        m.observe_members("ns", "locks", &status(&members[..1], 1), 1, now);
        assert!(!m.render().contains(r#"member="locks-1""#));
        m.forget_cluster("ns", "locks");
        assert!(!m.render().contains(r#"cluster="locks""#), "{}", m.render());
    }

    fn condition(type_: &str, status: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    /// Conditions alert only as metrics: a rejected spec, a conflict or shared failure domains
    /// show as `redlock_cluster_condition{...} 1` on their status, and go with the cluster.
    #[test]
    fn conditions_are_series_one_on_their_status_and_go_with_the_cluster() {
        let m = Metrics::default();
        let mut st = status(&[], 1);
        st.conditions = vec![condition("SpecAccepted", "False"), condition("Available", "True")];
        m.observe_members("ns", "locks", &st, 1, Timestamp::now());
        let text = m.render();
        let series = |c: &str, s: &str| {
            format!(
                "redlock_cluster_condition{{namespace=\"ns\",cluster=\"locks\",condition=\"{c}\",status=\"{s}\"}}"
            )
        };
        for (c, s, v) in [
            ("SpecAccepted", "False", 1),
            ("SpecAccepted", "True", 0),
            ("SpecAccepted", "Unknown", 0),
            ("Available", "True", 1),
            ("Available", "False", 0),
        ] {
            assert!(
                text.contains(&format!("{} {v}\n", series(c, s))),
                "{c} {s} {v}:\n{text}"
            );
        }
        assert!(
            !text.contains("condition=\"Degraded\""),
            "a condition the cluster lacks: {text}"
        );
        // The spec fixed: the same series flip (the memo must not keep the old ones).
        st.conditions = vec![condition("SpecAccepted", "True"), condition("Available", "True")];
        m.observe_members("ns", "locks", &st, 1, Timestamp::now());
        let text = m.render();
        assert!(
            text.contains(&format!("{} 1\n", series("SpecAccepted", "True"))),
            "{text}"
        );
        assert!(
            text.contains(&format!("{} 0\n", series("SpecAccepted", "False"))),
            "{text}"
        );
        m.forget_cluster("ns", "locks");
        assert!(
            !m.render().contains("redlock_cluster_condition{"),
            "{}",
            m.render()
        );
    }

    #[test]
    fn build_info_and_the_clock_step_counter() {
        let m = Metrics::default();
        let text = m.render();
        let info = format!(
            "redlock_build_info{{version=\"{}\",arch=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        );
        assert!(text.contains(&info), "{text}");
        // The clock check reports the growing sum; the counter follows it and never falls.
        m.clock_steps(0.0);
        m.clock_steps(1.5);
        m.clock_steps(4.0);
        m.clock_steps(4.0);
        let text = m.render();
        assert!(
            text.contains("# TYPE redlock_operator_clock_forward_steps_seconds counter"),
            "{text}"
        );
        assert!(
            text.contains("redlock_operator_clock_forward_steps_seconds_total 4.0\n"),
            "{text}"
        );
    }

    /// The lateness objective (p99 <= 100 ms) is a bucket bound, so the histogram tells
    /// 90 ms from 110 ms (with powers of two from 1 ms the bounds were 64 and 128 ms).
    #[test]
    fn release_lateness_has_a_bound_at_the_100_ms_objective() {
        let m = Metrics::default();
        for lateness in [0.09, 0.11] {
            m.released(
                "ns",
                "locks",
                Some(EndedHold {
                    length: 2.0,
                    lateness,
                }),
                false,
            );
        }
        let text = m.render();
        for line in [
            r#"redlock_release_lateness_seconds_bucket{le="0.05",namespace="ns",cluster="locks"} 0"#,
            r#"redlock_release_lateness_seconds_bucket{le="0.1",namespace="ns",cluster="locks"} 1"#,
            r#"redlock_release_lateness_seconds_bucket{le="0.25",namespace="ns",cluster="locks"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    /// The member series are set again, despite the memo of what was last set, whenever
    /// anything they show changed: a state, maintenance, the instances, the quorum, the
    /// members' names; a held member's hold (it changes with the time) every time; and after
    /// the cluster was forgotten.
    #[test]
    fn member_series_follow_every_change_despite_the_memo() {
        let m = Metrics::default();
        let at = |s| Timestamp::from_second(s).unwrap();
        let line = |state: &str, n: i32| {
            format!(r#"redlock_members{{namespace="ns",cluster="locks",state="{state}"}} {n}"#)
        };
        let has = |m: &Metrics, l: &str| m.render().contains(l);
        let ready = [
            member(0, MemberState::Ready, None),
            member(1, MemberState::Ready, None),
        ];
        m.observe_members("ns", "locks", &status(&ready, 2), 2, at(100));
        m.observe_members("ns", "locks", &status(&ready, 2), 2, at(101));
        assert!(has(&m, &line("ready", 2)));
        let starting = [
            member(0, MemberState::Ready, None),
            member(1, MemberState::Starting, None),
        ];
        m.observe_members("ns", "locks", &status(&starting, 2), 2, at(102));
        assert!(
            has(&m, &line("ready", 1)) && has(&m, &line("starting", 1)),
            "a state changed"
        );
        let maintained = [
            member(0, MemberState::Ready, None),
            MemberStatus {
                maintenance: Some("kernel".into()),
                ..member(1, MemberState::Starting, None)
            },
        ];
        m.observe_members("ns", "locks", &status(&maintained, 2), 2, at(103));
        assert!(has(
            &m,
            r#"redlock_members_in_maintenance{namespace="ns",cluster="locks"} 1"#
        ));
        m.observe_members("ns", "locks", &status(&maintained, 1), 2, at(104));
        assert!(has(
            &m,
            r#"redlock_cluster_quorum{namespace="ns",cluster="locks"} 1"#
        ));
        m.observe_members("ns", "locks", &status(&maintained, 1), 3, at(105));
        assert!(has(
            &m,
            r#"redlock_cluster_instances{namespace="ns",cluster="locks"} 3"#
        ));
        let renamed = [
            member(0, MemberState::Ready, None),
            member(2, MemberState::Starting, None),
        ];
        m.observe_members("ns", "locks", &status(&renamed, 1), 3, at(106));
        assert!(
            !has(&m, r#"member="locks-1""#) && has(&m, r#"member="locks-2""#),
            "names"
        );
        let held = [
            member(0, MemberState::Ready, None),
            member(2, MemberState::Held, Some(130)),
        ];
        m.observe_members("ns", "locks", &status(&held, 1), 3, at(110));
        m.observe_members("ns", "locks", &status(&held, 1), 3, at(120));
        let left = r#"redlock_hold_remaining_seconds{namespace="ns",cluster="locks",member="locks-2"} 10.0"#;
        assert!(has(&m, left), "a hold counts down with the time\n{}", m.render());
        m.observe_members("ns", "locks", &status(&ready, 2), 2, at(130));
        m.forget_cluster("ns", "locks");
        m.observe_members("ns", "locks", &status(&ready, 2), 2, at(131));
        assert!(
            has(&m, &line("ready", 2)),
            "set again after the cluster was forgotten"
        );
    }

    #[test]
    fn a_member_unfenced_after_its_hold_is_overdue_from_the_unfencing() {
        let m = Metrics::default();
        let unfenced = MemberStatus {
            since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                Timestamp::from_second(90).unwrap(),
            )),
            ..member(0, MemberState::Held, Some(40))
        };
        m.observe_members(
            "ns",
            "locks",
            &status(&[unfenced], 1),
            1,
            Timestamp::from_second(100).unwrap(),
        );
        let line =
            r#"redlock_member_release_overdue_seconds{namespace="ns",cluster="locks",member="locks-0"} 10.0"#;
        assert!(m.render().contains(line), "{}", m.render());
    }
}
