//! What exists now for one cluster: its pods (watch cache, then by name for slots the cache
//! does not show), what each Redis process says, the TTL audit, placement, and what clients
//! are told. Reads only.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use crate::children::endpoints::MAX_LOCK_TTL_MILLIS;
use crate::children::names::{client_secret_name, endpoints_config_map_name, slot_name};
use crate::clock::member::{ClockKey, ClockTrack};
use crate::clock::record;
use crate::crd::ClockRecord;
use crate::crd::model::Slot;
use crate::crd::{FailureDomains, RedlockCluster};
use crate::decide::Observation;
use crate::decide::failure_domains;
use crate::decide::observe::{self, PodState, Probe, SlotObservation};
use crate::decide::silences::Heard;
use crate::error::Result;
use crate::hold::ttl_audit;
use crate::reconcile::context::Context;
use crate::reconcile::ttl_sampling;
use crate::redis::admin::{AdminAccess, ProbeFailure};

pub(crate) async fn observe(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &AdminAccess,
    max_lock_ttl: Duration,
) -> Result<Observation> {
    let mut slots = observe::pods_by_slot(cluster, &ctx.caches.pods_of(ns, &cluster.name_any()));
    let published = published(ctx, cluster, ns);
    let told = told_by(&published, ctx, cluster, ns);
    look_up_missing_by_name(ctx, cluster, ns, told.longest(), &mut slots).await?;
    find_tls_cas(ctx, cluster, ns, access, &mut slots).await?;
    // Side by side: an address that never answers (a partition that also cuts the operator
    // off) costs each reconcile one probe timeout, which must not delay the members' probes.
    let (clock_tracks, unstopped) = tokio::join!(
        probe_all(ctx, cluster, access, max_lock_ttl, &mut slots),
        look_for_unstopped(ctx, cluster, ns, access)
    );
    for (slot, result) in unstopped {
        slots.entry(slot).or_default().unstopped = Some(result);
    }
    let (ttl, next_audit) = audit_ttls(ctx, cluster, access, &slots, max_lock_ttl).await;
    Ok(Observation {
        failure_domains: placement(ctx, cluster, &slots),
        published_ttl: published.max_lock_ttl,
        published_hold_ttl: published.hold_ttl,
        told,
        slots,
        ttl,
        next_audit,
        clock_tracks,
        ledger: ledger(ctx, cluster, ns),
    })
}

/// The cluster's ledger as the operator's cache shows it (`crate::hold::ledger`); `None` when
/// there is none yet, or it does not read (said in the log: it is then written afresh from
/// the records).
fn ledger(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Option<crate::hold::ledger::Ledger> {
    let name = crate::children::names::ledger_config_map_name(&cluster.name_any());
    let cm = ctx
        .caches
        .config_maps
        .get(&ObjectRef::<ConfigMap>::new(&name).within(ns))?;
    crate::children::ledger::read(&cm)
        .inspect_err(|e| tracing::warn!(configmap = %name, error = %e, "the ledger does not read; written afresh from the records"))
        .ok()
}

/// "Pod missing" is decided by name, not by the label-filtered cache: every slot that should
/// exist or has a record, and that the cache does not show, is looked up with a GET. This costs
/// requests only while a slot has no pod of ours (creation, replacement, a conflict).
async fn look_up_missing_by_name(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    published_servers: Option<i32>,
    slots: &mut BTreeMap<Slot, SlotObservation>,
) -> Result<()> {
    let name = cluster.name_any();
    let recorded = cluster
        .status
        .iter()
        .flat_map(|s| s.members.iter().map(|m| m.slot));
    // Every slot clients may be told about, too: a removed member of a longer published list
    // (also one a wiped status no longer records) must be found to be fenced or removed.
    let told = cluster
        .status
        .as_ref()
        .and_then(|s| s.published_instances)
        .max(published_servers)
        .unwrap_or(0);
    let unseen: BTreeSet<Slot> = Slot::all(cluster.spec.instances.max(told))
        .chain(recorded)
        .filter(|s| !slots.contains_key(s))
        .collect();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for slot in unseen {
        let pod = api.get_opt(&slot_name(&name, slot)).await?;
        if let Some(o) = observe::by_name(cluster, pod.as_ref()) {
            slots.insert(slot, o);
        }
    }
    Ok(())
}

/// The CA of each TLS pod's certificate Secret, so each process is reached as its pod was
/// built: the spec's (already read) for pods of the spec's Secret, others read once per
/// Secret (`inputs::read_ca`). Other Secrets are met only during a rollout that turns TLS off
/// or changes the Secret; a Secret that is gone or has no CA leaves the CA unknown, and the
/// connection fails (nothing is released through it).
async fn find_tls_cas(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &AdminAccess,
    slots: &mut BTreeMap<Slot, SlotObservation>,
) -> Result<()> {
    let spec_secret = cluster.spec.tls.as_ref().map(|t| t.secret_name.as_str());
    // Once per Secret: a missing one is not kept in `tls_cas`, and would be read per pod.
    let mut read: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    for o in slots.values_mut() {
        let Some(secret) = o.tls_secret.clone() else {
            continue;
        };
        o.tls_ca = if Some(secret.as_str()) == spec_secret {
            access.tls_ca.clone()
        } else {
            if !read.contains_key(&secret) {
                let ca = super::inputs::read_ca(ctx, ns, &secret).await?;
                read.insert(secret.clone(), ca);
            }
            read[&secret].clone()
        };
    }
    Ok(())
}

/// A connection to a TLS member failed: the CA it trusted may have been rotated, so the next
/// reconcile reads each Secret involved again (`tls_cas`, at most once per period).
pub(crate) fn distrust_failed_cas(ctx: &Context, ns: &str, slots: &BTreeMap<Slot, SlotObservation>) {
    for o in slots.values().filter(|o| o.probe.failure().is_some()) {
        if let Some(secret) = &o.tls_secret {
            ctx.memory.tls_cas.distrust(ns, secret);
        }
    }
}

/// How long a kubelet (through the API server's node proxy) gets to list its running pods: two
/// hops and a runtime listing, longer than a Redis probe; a kubelet that does not answer in
/// time proves nothing, so this only delays a release that has no other evidence.
const KUBELET_TIMEOUT: Duration = Duration::from_secs(2);

/// Looks for every recorded process that was never seen to stop (`unstopped`, not yet seen
/// fenced) at its last address, and asks its node's kubelet whether a container of its pod
/// still runs, in parallel; by slot. Every reconcile, also long after its slot was released
/// and while nothing answers there: the time from its return (a partition healing) to its
/// fence is the time two processes of one slot grant locks, and one connection attempt per
/// probe period is all it costs (docs/design.md §9.5).
async fn look_for_unstopped(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &AdminAccess,
) -> Vec<(Slot, observe::UnstoppedSearch)> {
    let members = cluster.recorded_members();
    let probes = members.iter().filter_map(|m| {
        let u = m.unstopped.as_ref().filter(|u| !u.fenced)?;
        let slot = m.slot;
        Some(async move {
            let timeout = access.timeout.max(KUBELET_TIMEOUT);
            let (answer, kubelet, out_of_service) = tokio::join!(
                answer_at(ctx, cluster, ns, access, u),
                super::kubelet_pods::ask(&ctx.client, u, timeout),
                super::kubelet_pods::out_of_service(&ctx.client, u, timeout)
            );
            (
                slot,
                observe::UnstoppedSearch {
                    answer,
                    kubelet,
                    out_of_service,
                },
            )
        })
    });
    futures::future::join_all(probes).await
}

/// What answers at the last address of `u`, each way to reach it in turn; refused only when
/// every way was refused.
async fn answer_at(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &AdminAccess,
    u: &crate::crd::UnstoppedProcess,
) -> std::result::Result<observe::RedisInfo, ProbeFailure> {
    let ip = match u.pod_ip.parse::<std::net::IpAddr>() {
        Ok(ip) => ip,
        Err(e) => {
            return Err(ProbeFailure {
                why: format!("bad address {}: {e}", u.pod_ip),
                refused: false,
            });
        }
    };
    // Its client user is not known (an auth toggle may have been under way): the probe reads
    // both users lock clients could log in as.
    let mut failures = vec![];
    for access in super::inputs::accesses_for_unstopped(ctx, cluster, ns, access, u).await {
        match access.probe(ip).await {
            Ok((info, _)) => return Ok(info),
            Err(e) => failures.push(e),
        }
    }
    Err(ProbeFailure {
        refused: !failures.is_empty() && failures.iter().all(|f| f.refused),
        why: failures
            .iter()
            .map(|f| f.why.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// Probes every running member in parallel; failures are recorded, not raised. Each answer's
/// `TIME` is judged against the member's last one (docs/design.md §9.3); returns what to
/// remember of the clocks, which the caller keeps only once the verdicts are on record.
async fn probe_all(
    ctx: &Context,
    cluster: &RedlockCluster,
    access: &AdminAccess,
    max_lock_ttl: Duration,
    observed: &mut BTreeMap<Slot, SlotObservation>,
) -> Vec<(ClockKey, ClockTrack)> {
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let kept = &ctx.memory.probe_connections;
    let probes = observed.iter().filter_map(|(slot, o)| {
        let running = matches!(o.pod, PodState::Running { .. });
        let ip = o.pod_ip.filter(|_| running)?;
        let access = access.for_slot(o);
        let uid = uid.as_str();
        Some(async move {
            let key = access.connection_key(ip);
            let result = access.probe_kept(ip, kept, uid).await;
            (*slot, key, result)
        })
    });
    let results: Vec<_> = futures::future::join_all(probes).await;
    kept.retain(
        &uid,
        &results.iter().map(|(_, key, _)| key.clone()).collect::<Vec<_>>(),
    );
    let results = results.into_iter().map(|(slot, _, result)| (slot, result));
    let clocks = ctx
        .memory
        .member_clocks
        .lock()
        .expect("clock lock is never poisoned");
    let mut tracks = Vec::new();
    for (slot, result) in results {
        let o = observed.get_mut(&slot).expect("probed slots were observed");
        match result {
            Ok((info, _)) if let Some(why) = observe::foreign_process(o, &info) => {
                o.probe = Probe::ForeignProcess(why);
            }
            Ok((info, time)) => {
                let key = (uid.clone(), slot);
                let prev = clocks.get(&key);
                let (across, track) = record::judge_sample(
                    prev,
                    recorded_clock(cluster, slot),
                    &info.run_id,
                    time,
                    ctx.clock.server_time(time.middle()),
                    cluster.spec.clock_drift_factor,
                    max_lock_ttl,
                );
                tracks.push((key, track));
                o.clock = Some(across.verdict);
                o.clock_record = across.record;
                o.probe = Probe::Answered(info);
            }
            Err(e) if e.refused => o.probe = Probe::Refused(e.why),
            Err(e) => o.probe = Probe::Failed(e.why),
        }
    }
    let now = std::time::Instant::now();
    for (slot, o) in observed.iter_mut() {
        let heard = match o.probe {
            Probe::Answered(_) => Heard::Answered,
            Probe::Failed(_) => Heard::Silent,
            _ => Heard::Other,
        };
        let container = match &o.pod {
            PodState::Running { container_id, .. } => container_id.clone().unwrap_or_default(),
            _ => String::new(),
        };
        o.silent_for = ctx.memory.silences.heard(&uid, *slot, &container, heard, now);
    }
    tracks
}

/// The clock reading on record for `slot` (any process: the comparison checks whose).
fn recorded_clock(cluster: &RedlockCluster, slot: Slot) -> Option<&ClockRecord> {
    cluster
        .status
        .as_ref()?
        .members
        .iter()
        .find(|m| m.slot == slot)?
        .clock
        .as_ref()
}

/// What `<name>-endpoints` and `<name>-client` tell clients (the operator's caches): the
/// resize's second record, read by the children step too, before it writes `<name>-client`.
pub(crate) fn told(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> crate::decide::resize::Told {
    told_by(&published(ctx, cluster, ns), ctx, cluster, ns)
}

fn told_by(
    published: &Published,
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
) -> crate::decide::resize::Told {
    crate::decide::resize::Told {
        servers: published.servers,
        confirmed: published.confirmed,
        client_servers: client_servers(ctx, cluster, ns),
    }
}

/// What the cluster's `<name>-endpoints` ConfigMap tells clients (the operator's cache).
#[derive(Default)]
struct Published {
    servers: Option<i32>,
    confirmed: Option<i32>,
    max_lock_ttl: Option<Duration>,
    hold_ttl: Option<Duration>,
}

fn published(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Published {
    let cm = ctx
        .caches
        .config_maps
        .get(&ObjectRef::<ConfigMap>::new(&endpoints_config_map_name(&cluster.name_any())).within(ns));
    let Some(data) = cm.as_ref().and_then(|cm| cm.data.as_ref()) else {
        return Published::default();
    };
    Published {
        servers: data.get("servers").map(|s| listed(s)),
        confirmed: data
            .get(crate::children::endpoints::CONFIRMED_INSTANCES)
            .and_then(|c| c.trim().parse().ok()),
        max_lock_ttl: data.get(MAX_LOCK_TTL_MILLIS).and_then(|m| published_ttl(m)),
        hold_ttl: data
            .get(crate::children::endpoints::HOLD_MAX_LOCK_TTL_MILLIS)
            .and_then(|m| published_ttl(m)),
    }
}

/// How many `urls` the cluster's `<name>-client` Secret lists (the operator's cache).
fn client_servers(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Option<i32> {
    let secret = ctx
        .caches
        .secrets
        .get(&ObjectRef::<Secret>::new(&client_secret_name(&cluster.name_any())).within(ns))?;
    let urls = secret.data.as_ref()?.get("urls")?;
    Some(listed(&String::from_utf8_lossy(&urls.0)))
}

/// How many entries a published list (one per line) has.
fn listed(lines: &str) -> i32 {
    lines.lines().filter(|l| !l.trim().is_empty()).count() as i32
}

/// The maxLockTTL a `<name>-endpoints` ConfigMap tells clients. The operator never publishes
/// more than the spec allows (24 h); a larger value can only be a hand edit, and is read as
/// that maximum (holds then last up to 24 h and more, never an absurd or unrepresentable
/// time).
fn published_ttl(millis: &str) -> Option<Duration> {
    let ttl = Duration::from_millis(millis.trim().parse::<u64>().ok()?);
    Some(ttl.min(crate::crd::MAX_LOCK_TTL_LIMIT))
}

/// Members per node and zone, from the pods' nodes and the nodes' zone labels.
fn placement(
    ctx: &Context,
    cluster: &RedlockCluster,
    observed: &BTreeMap<Slot, SlotObservation>,
) -> FailureDomains {
    let member_nodes: BTreeMap<Slot, String> = observed
        .iter()
        .filter_map(|(slot, o)| Some((*slot, o.node.clone()?)))
        .collect();
    let node_zones: BTreeMap<String, String> = ctx
        .caches
        .nodes
        .state()
        .iter()
        .filter(|n| member_nodes.values().any(|m| Some(m) == n.metadata.name.as_ref()))
        .filter_map(|n| {
            let zone = n.labels().get(failure_domains::ZONE_LABEL)?;
            Some((n.name_any(), zone.clone()))
        })
        .collect();
    failure_domains::compute(cluster.spec.instances, &member_nodes, &node_zones)
}

/// One TTL audit period, when due: continues each serving member's `SCAN` for a bounded
/// number of keys. Returns the cluster's report and when the next period starts. Keys are
/// checked against the maxLockTTL in force (during a lowering, clients may still use the old
/// one legitimately).
async fn audit_ttls(
    ctx: &Context,
    cluster: &RedlockCluster,
    access: &AdminAccess,
    observed: &BTreeMap<Slot, SlotObservation>,
    max_lock_ttl: Duration,
) -> (Option<ttl_audit::Report>, Duration) {
    let name = cluster.name_any();
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    let key = ttl_sampling::audit_key(&cluster.namespace().unwrap_or_default(), &name, uid);
    // Addressed as its pod was built (TLS or plain, that pod's CA), as the probe is: during a
    // TLS toggle's rollout the spec's mode reaches only the pods already replaced.
    let accesses: BTreeMap<Slot, std::borrow::Cow<'_, AdminAccess>> = observed
        .iter()
        .map(|(slot, o)| (*slot, access.for_slot(o)))
        .collect();
    let serving = serving_members(cluster, observed, &accesses);
    let now = std::time::Instant::now();
    let cursors = match ttl_sampling::take_due(ctx, &key, &serving, now) {
        Ok(cursors) => cursors,
        Err(not_due) => return not_due,
    };
    let results = ttl_sampling::sample(ctx, uid, &serving, cursors).await;
    let report = ttl_sampling::absorb(ctx, &key, &name, results, max_lock_ttl, now);
    (report, ctx.settings.ttl_audit_period)
}

/// The members the audit reads: slots of the spec whose process answered and lets lock
/// clients in, with its run id (a new process starts a new sweep) and address.
fn serving_members<'a>(
    cluster: &RedlockCluster,
    observed: &BTreeMap<Slot, SlotObservation>,
    accesses: &'a BTreeMap<Slot, std::borrow::Cow<'_, AdminAccess>>,
) -> Vec<ttl_sampling::Serving<'a>> {
    observed
        .iter()
        .filter(|(slot, _)| slot.within(cluster.spec.instances))
        .filter_map(|(slot, o)| {
            let info = o.probe.answered().filter(|i| i.client_enabled)?;
            Some(ttl_sampling::Serving {
                slot: *slot,
                run_id: info.run_id.clone(),
                ip: o.pod_ip?,
                access: accesses.get(slot)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_ttl_beyond_what_the_spec_allows_is_read_as_the_maximum() {
        assert_eq!(published_ttl("30000"), Some(Duration::from_secs(30)));
        assert_eq!(published_ttl(" 1500\n"), Some(Duration::from_millis(1500)));
        assert_eq!(
            published_ttl("250000000000000"),
            Some(crate::crd::MAX_LOCK_TTL_LIMIT)
        );
        assert_eq!(published_ttl("30s"), None);
    }
}
