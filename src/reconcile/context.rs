//! The one shared context every reconcile receives.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::children::index::InstanceIndex;
use crate::children::versions::ChildVersions;
use crate::clock::member::ClockTrack;
use crate::clock::timers::HoldTimers;
use crate::crd::RedlockCluster;
use crate::crd::model::Slot;
use crate::hold::ttl_audit::ClusterAudit;
use crate::runtime::backoff::{Backoff, RetryGate};
use crate::runtime::clock_check::ClockCheck;
use crate::runtime::leader::Leadership;
use crate::runtime::metrics::Metrics;
use crate::runtime::recorder::Recorder;

pub(crate) struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// What the operator's watches show.
    pub caches: Caches,
    /// How the operator was told to run (flags), fixed for the life of the process.
    pub settings: Settings,
    /// Whether this process may write; checked before every group of writes.
    pub leadership: Leadership,
    /// The process's clock and its measured offset to the API server.
    pub clock: Arc<ClockCheck>,
    /// Where the watch of a resting cluster sends it when a probe shows a change
    /// ([`crate::reconcile::rest_watch`]): the controller reconciles it at once.
    pub wake: Wake,
    /// What the process remembers between reconciles (lost on restart, by design: each is
    /// rebuilt safely, see the fields).
    pub memory: Memory,
}

/// Where a rest watch sends the cluster it wakes: the controller's `reconcile_on` stream.
/// Here, not in rest_watch.rs, so that the context (which every reconcile and watch reads)
/// depends on no watch: rest_watch.rs and ttl_sampling.rs read the context.
pub(crate) type Wake = futures::channel::mpsc::UnboundedSender<ObjectRef<RedlockCluster>>;

/// Caches of the objects this operator manages (selected by `managed-by`), fed by the
/// controller's own watches.
pub(crate) struct Caches {
    pub pods: Store<Pod>,
    /// The names of each cluster's pods in `pods` (`Caches::pods_of`).
    pub pod_index: Arc<InstanceIndex>,
    /// Counts the watch events of every cache of children other than pods (Secrets,
    /// ConfigMaps, Services, PDBs, NetworkPolicies) per cluster: while a cluster's version
    /// stands still, none of its children changed (`children_memo`).
    pub child_versions: Arc<ChildVersions>,
    pub secrets: Store<Secret>,
    pub config_maps: Store<ConfigMap>,
    pub services: Store<Service>,
    pub pod_disruption_budgets: Store<PodDisruptionBudget>,
    pub network_policies: Store<NetworkPolicy>,
    /// Node metadata (labels: zones), for failure-domain reporting. Only a changed zone is a
    /// trigger (`node_zones`): node heartbeats must not cause reconciles.
    pub nodes: Store<PartialObjectMeta<Node>>,
    /// Set once every cache above has its first full list. kube's controller only waits for
    /// its own store; planning from an empty pod cache would read every member as lost.
    pub caches_synced: Arc<AtomicBool>,
}

impl Caches {
    /// The pods in `ns` labelled as the cluster `instance`'s, as the cache shows them.
    pub fn pods_of(&self, ns: &str, instance: &str) -> Vec<Arc<Pod>> {
        self.pod_index
            .names(ns, instance)
            .iter()
            .filter_map(|name| self.pods.get(&ObjectRef::new(name).within(ns)))
            .collect()
    }
}

/// The operator's settings.
pub(crate) struct Settings {
    /// Namespace of the operator's own pods, which every cluster's NetworkPolicy admits;
    /// `None` when the operator runs outside the cluster.
    pub operator_namespace: Option<String>,
    /// How often every member's Redis is probed when nothing else happens.
    pub probe_period: Duration,
    /// Connect and reply timeout of admin connections.
    pub probe_timeout: Duration,
    /// From the publication of a rotated client password to the earliest removal of the old.
    pub password_rotation_grace: Duration,
    pub ttl_audit_period: Duration,
    /// Keys read per member per audit period.
    pub ttl_audit_keys: u64,
    /// The Lease this operator is elected with (`<namespace>/<name>`, `status.lease`), `None`
    /// without election (`crate::runtime::lease_owner`).
    pub lease: Option<String>,
}

/// In-memory state kept between reconciles.
#[derive(Default)]
pub(crate) struct Memory {
    /// Per-cluster retry backoff.
    pub backoff: Backoff,
    /// Per-cluster backoff of pod creates, which wait alone when refused.
    pub pod_creates: RetryGate,
    /// Per-cluster backoff of pod deletes, apart from creates: a create refused for good (a
    /// quota, a webhook) must not hold up the deletes of a scale-down or a rollout.
    pub pod_deletes: RetryGate,
    /// Per-cluster backoff of the `FenceFailed` Warning while fences keep failing.
    pub failed_fences: RetryGate,
    /// Why the readiness gates cannot be written, found at start ([`crate::runtime::permissions`]).
    pub gate_writes_refused: std::sync::OnceLock<Option<String>>,
    /// TTL audit state per cluster (`ttl_sampling::audit_key`); after a restart the audit
    /// simply sweeps again.
    pub ttl_audits: Mutex<HashMap<String, ClusterAudit>>,
    /// Deadlines this process has timed itself, per cluster UID; after a restart every running
    /// hold is timed again (longer, never shorter).
    pub timers: HoldTimers,
    /// Each member process's clock as last probed, by (cluster UID, slot); after a restart the
    /// first probe is a new baseline.
    pub member_clocks: Mutex<HashMap<(String, Slot), ClockTrack>>,
    /// This process's last status writes, which the watch cache must show before the next plan.
    pub status_writes: StatusWrites,
    /// Per cluster UID, releases sent ahead of a status write that did not land.
    pub unrecorded_releases: crate::hold::release_ahead::Unrecorded,
    /// Per cluster UID, fences sent ahead of a status write that did not land: planned as the
    /// records their decisions made, and their processes not released, until a write lands.
    pub unrecorded_fences: crate::hold::fence_ahead::UnrecordedFences,
    /// Per cluster UID, releases this process decided and has not yet seen serving.
    pub owed_releases: crate::hold::release_ahead::OwedReleases,
    /// Other operators' Leases named by clusters' status, as first seen (`crate::runtime::lease_owner`).
    pub foreign_leases: crate::runtime::lease_owner::ForeignLeases,
    /// Per cluster UID, its spec hash as of the cluster object's last version.
    pub spec_hashes: crate::children::spec_hashes::SpecHashes,
    /// Per cluster UID, the credentials last recovered from its cached Secrets.
    pub credentials: crate::credentials::memo::CredentialsMemo,
    /// Per cluster UID, what its children were last all found current from.
    pub children: crate::children::memo::ChildrenMemo,
    /// The same for its endpoints ConfigMap (written after the status, from what serves).
    pub endpoints: crate::children::memo::ChildrenMemo,
    /// The clusters at rest, watched by probes instead of reconciled every period
    /// ([`crate::decide::at_rest`]); after a restart every cluster is reconciled, and rests again.
    pub resting: crate::decide::at_rest::Resting,
    /// How long each member's process has gone without answering ([`crate::decide::silences`]).
    pub silences: crate::decide::silences::Silences,
    /// Admin connections kept for probes, per cluster UID (only ever used to read).
    pub probe_connections: crate::redis::probe_connections::ProbeConnections,
    /// The CAs of users' TLS Secrets, read once and again after a connection fails.
    pub tls_cas: crate::redis::tls_cas::TlsCas,
    /// The credentials last recovered per cluster UID: a `<name>-admin` deleted or edited
    /// while this process runs is written back from them (`secrets::recover_or_restore`).
    /// Only ever this leadership's: an operator that loses its lease exits.
    pub known_credentials: Mutex<HashMap<String, crate::children::secrets::Credentials>>,
}

/// The resourceVersions of this process's last status write per cluster UID: the one the
/// write was planned from and the one it produced. Reconciles plan from the watch cache (no
/// GET per reconcile); until the cache shows the write, it still holds the version that write
/// was planned from, and planning from it could mistake the operator's own new pods or holds
/// for unknown ones. Any other version is newer (the cache of one object only moves forward).
///
/// The version the last write produced is kept for as long as the cluster is known: a cache
/// showing exactly it shows this process's own last write and nothing newer
/// ([`StatusWrites::shows_own_last_write`]). With it, the sum of the operator's wall-clock
/// forward steps at that write (`clock::Reading::skipped`).
///
/// Until the cache shows the last write, the object that write produced (the API server's
/// reply) is kept too: a reconcile that finds the cache behind for longer than the watch
/// normally takes still probes and fences, planned from it ([`StatusWrites::lag`]).
#[derive(Default)]
pub(crate) struct StatusWrites {
    by_uid: Mutex<HashMap<String, OwnWrite>>,
    produced: Mutex<HashMap<String, (String, Duration)>>,
}

/// This process's last status write of one cluster, until the cache shows it.
struct OwnWrite {
    from: String,
    to: String,
    at: Instant,
    reply: Option<Arc<RedlockCluster>>,
}

/// The cache behind this process's own last status write ([`StatusWrites::lag`]).
pub(crate) struct Lag {
    /// Since the write was answered.
    pub age: Duration,
    /// The object the write produced, as the API server answered it.
    pub written: Option<Arc<RedlockCluster>>,
}

/// Forward steps of the operator's wall clock since its own last write beyond which that write
/// no longer counts as "its own, with nothing newer". A process whose OS was suspended with its
/// monotonic clock stopped passes its lease check on resume (docs/design.md §9.4); the kernel
/// adds the sleep to the wall clock, so the suspension shows as a forward step. Another replica
/// could have led and written meanwhile only after the takeover margin (lease duration minus
/// renew deadline, 5 s by default; `Leadership::no_successor_within` refuses a margin this
/// small).
pub(crate) const OWN_WRITE_STEP_LIMIT: Duration = Duration::from_secs(1);

impl StatusWrites {
    /// Records a write planned from `planned_from` that produced `written` (the object:
    /// `reply`), sent when the clock's forward steps summed to `skipped` (read before sending:
    /// a suspension during the request counts).
    pub fn wrote(
        &self,
        uid: &str,
        planned_from: Option<&str>,
        written: Option<&str>,
        skipped: Duration,
        reply: Option<Arc<RedlockCluster>>,
    ) {
        if let (Some(from), Some(to)) = (planned_from, written) {
            self.by_uid
                .lock()
                .expect("status write lock is never poisoned")
                .insert(
                    uid.to_owned(),
                    OwnWrite {
                        from: from.to_owned(),
                        to: to.to_owned(),
                        at: Instant::now(),
                        reply: reply.filter(|r| r.metadata.resource_version.as_deref() == Some(to)),
                    },
                );
        }
        let mut produced = self.produced.lock().expect("status write lock is never poisoned");
        match written {
            Some(to) => produced.insert(uid.to_owned(), (to.to_owned(), skipped)),
            // A reply without a version: nothing on record is known to be this process's.
            None => produced.remove(uid),
        };
    }

    /// Whether the cache, showing `cached`, shows exactly the object this process's last
    /// status write produced: no other write (a user's edit, another process's status) has
    /// reached the cache since. An operator that loses its lease exits, so within one process
    /// "own" means "this leadership's" — unless the process was suspended, which `skipped`
    /// (the clock's forward steps now) tells: beyond [`OWN_WRITE_STEP_LIMIT`] since that write,
    /// it is not trusted as own.
    pub fn shows_own_last_write(&self, uid: &str, cached: Option<&str>, skipped: Duration) -> bool {
        let produced = self.produced.lock().expect("status write lock is never poisoned");
        cached.is_some_and(|c| {
            produced
                .get(uid)
                .is_some_and(|(p, at)| p == c && skipped.saturating_sub(*at) <= OWN_WRITE_STEP_LIMIT)
        })
    }

    /// While the cache, showing `cached`, has yet to show this process's last write: for how
    /// long, and the object that write produced.
    pub fn lag(&self, uid: &str, cached: Option<&str>) -> Option<Lag> {
        let mut by_uid = self.by_uid.lock().expect("status write lock is never poisoned");
        match by_uid.get(uid) {
            Some(w) if Some(w.from.as_str()) == cached && w.from != w.to => Some(Lag {
                age: w.at.elapsed(),
                written: w.reply.clone(),
            }),
            Some(_) => {
                by_uid.remove(uid);
                None
            }
            None => None,
        }
    }

    /// A write whose result is unknown (an error after sending: it may have landed): nothing
    /// on record is known to be this process's until its next write.
    pub fn unknown(&self, uid: &str) {
        self.produced
            .lock()
            .expect("status write lock is never poisoned")
            .remove(uid);
    }

    pub fn forget(&self, uid: &str) {
        self.by_uid
            .lock()
            .expect("status write lock is never poisoned")
            .remove(uid);
        self.produced
            .lock()
            .expect("status write lock is never poisoned")
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{OWN_WRITE_STEP_LIMIT, StatusWrites};

    const NO_STEP: Duration = Duration::ZERO;

    #[test]
    fn the_cache_shows_the_own_last_write_only_at_exactly_its_version() {
        let w = StatusWrites::default();
        let own = |cached: Option<&str>| w.shows_own_last_write("u", cached, NO_STEP);
        assert!(!own(Some("5")), "nothing written yet");
        w.wrote("u", Some("5"), Some("7"), NO_STEP, None);
        assert!(w.lag("u", Some("5")).is_some());
        assert!(!own(Some("5")), "the cache still shows the older version");
        assert!(own(Some("7")));
        // Caught up: the lag memo goes, the version produced stays.
        assert!(w.lag("u", Some("7")).is_none());
        assert!(own(Some("7")));
        // Someone else's write (a user's edit) since: not ours.
        assert!(!own(Some("9")));
        assert!(!own(None));
        assert!(!w.shows_own_last_write("other", Some("7"), NO_STEP));
        // A reply without a version leaves nothing known as ours.
        w.wrote("u", Some("9"), None, NO_STEP, None);
        assert!(!own(Some("7")));
        // A write that failed after it was sent may have landed: nothing known as ours.
        w.wrote("u", Some("9"), Some("11"), NO_STEP, None);
        assert!(own(Some("11")));
        w.unknown("u");
        assert!(!own(Some("11")));
        w.wrote("u", Some("11"), Some("13"), NO_STEP, None);
        w.forget("u");
        assert!(!own(Some("11")));
    }

    /// While the cache lags the own last write, that write's reply is at hand (what a reconcile
    /// plans its fences from after a probe period); once the cache shows it, it is dropped.
    #[test]
    fn the_reply_of_the_last_write_is_kept_while_the_cache_lags_it() {
        let w = StatusWrites::default();
        let reply = |version: &str| {
            let mut c = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
            c.metadata.resource_version = Some(version.into());
            std::sync::Arc::new(c)
        };
        w.wrote("u", Some("5"), Some("7"), NO_STEP, Some(reply("7")));
        let lag = w.lag("u", Some("5")).expect("lags");
        assert!(lag.age < Duration::from_secs(5));
        assert_eq!(
            lag.written.unwrap().metadata.resource_version.as_deref(),
            Some("7")
        );
        assert!(w.lag("u", Some("7")).is_none(), "caught up");
        assert!(w.lag("u", Some("5")).is_none(), "forgotten once caught up");
        // A reply of another version than the one recorded is not kept.
        w.wrote("u", Some("7"), Some("9"), NO_STEP, Some(reply("8")));
        assert!(w.lag("u", Some("7")).unwrap().written.is_none());
    }

    /// A process suspended with its monotonic clock stopped passes its lease check on resume;
    /// the suspension shows as a forward step of its wall clock, and its own last write no
    /// longer counts as current.
    #[test]
    fn a_forward_step_since_the_own_write_makes_it_not_current() {
        let w = StatusWrites::default();
        let at = Duration::from_millis(300);
        w.wrote("u", Some("1"), Some("2"), at, None);
        assert!(w.shows_own_last_write("u", Some("2"), at));
        assert!(w.shows_own_last_write("u", Some("2"), at + OWN_WRITE_STEP_LIMIT));
        assert!(!w.shows_own_last_write(
            "u",
            Some("2"),
            at + OWN_WRITE_STEP_LIMIT + Duration::from_millis(1)
        ));
        assert!(!w.shows_own_last_write("u", Some("2"), at + Duration::from_secs(20)));
    }
}
