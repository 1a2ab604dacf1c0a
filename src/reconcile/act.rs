//! Acting on a decision: its fences as soon as it is made ([`fence_ahead`]: a fence only shuts
//! clients out), then, once it is on record, events, the endpoints clients read, releases,
//! readiness gates and pods, in that order. A decision whose write did not land tells what its
//! fences did ([`fenced_unrecorded`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::inputs::Inputs;
use super::persist::{AheadOfWrite, OnRecord};
use crate::children::memo::Fingerprint;
use crate::children::names::{CLIENT_USER, slot_name};
use crate::children::{endpoints, pod};
use crate::crd::model::Slot;
use crate::crd::reasons::{ClusterReason, MemberReason};
use crate::crd::{MemberStatus, RedlockCluster};
use crate::decide::Decision;
use crate::decide::observe::SlotObservation;
use crate::decide::plan::MemberEvent;
use crate::decide::serving_gate;
use crate::error::Result;
use crate::hold::ledger::Ledger;
use crate::hold::release_ahead::Released;
use crate::reconcile::apply;
use crate::reconcile::context::Context;
use crate::redis::admin::AdminAccess;
use crate::runtime::events;
use crate::runtime::metrics::EndedHold;

/// What acting came to.
pub(crate) struct Acted {
    /// Some process was released: its readiness is worth a look soon.
    pub released: bool,
    /// A pod create or delete, or the endpoints ConfigMap, was refused: when to try again.
    pub retry: Option<Duration>,
}

/// How soon a refused endpoints ConfigMap is written again.
const ENDPOINTS_RETRY: Duration = Duration::from_secs(2);

/// Sends the releases `ahead` allows before the decision's status write (`persist::ahead_of_write`
/// says which may); returns those done. One not done is sent again after the write, as any other.
/// Their events wait for the write (`act`): an event is a request too.
/// `ledger`: the ledger the cache shows (a cache shows only what was written), which must name
/// each process released.
pub(crate) async fn release_ahead(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
    observed: &BTreeMap<Slot, SlotObservation>,
    ledger: Option<&Ledger>,
    ahead: &AheadOfWrite,
) -> Result<Vec<Released>> {
    release_each(ctx, cluster, ns, inputs, observed, ledger, ahead.releases(), true).await
}

/// Acts on `on_record`, the one input only `persist` can produce: nothing here happens before
/// the decision's status is on record. Each step below takes it too, for the same reason.
/// `released_ahead`: releases already sent before the write (`release_ahead`); `ledger`: the
/// ledger the cache shows.
#[allow(clippy::too_many_arguments)] // the pipeline's stages, each named where it is used
pub(crate) async fn act(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
    observed: &BTreeMap<Slot, SlotObservation>,
    ledger: Option<&Ledger>,
    on_record: OnRecord,
    released_ahead: &[Released],
    now: Timestamp,
) -> Result<Acted> {
    // The decision's fences were sent before its write (`fence_ahead`).
    report(ctx, cluster, ns, &on_record, now).await;
    publish_released(ctx, cluster, released_ahead).await;
    // The ledger before any release: a release needs it to name the process on the server.
    let (ledger, ledger_retry) =
        record_ledger(ctx, cluster, ns, ledger, on_record.decision().ledger.as_ref()).await;
    let endpoints_retry = if inputs.accepted() {
        publish_endpoints(ctx, cluster, ns, observed, &on_record).await
    } else {
        None
    };
    let released_now = release(
        ctx,
        cluster,
        ns,
        inputs,
        observed,
        ledger,
        &on_record,
        released_ahead,
    )
    .await?;
    let all_released: Vec<Released> = released_ahead.iter().chain(&released_now).cloned().collect();
    let released = !all_released.is_empty();
    // Readiness gates after the fences and releases they report on: a gate opens only on a
    // process that lets clients in.
    let gates = serving_gate::writes(&on_record.decision().status.members, observed, &all_released);
    set_serving_gates(ctx, cluster, ns, gates).await?;
    // Pod changes last: a failed create (quota, a name taken meanwhile) must not keep the
    // fences and releases above from happening.
    let pod_retry = change_pods(ctx, cluster, ns, &on_record.decision().plan, observed).await?;
    let retry = [endpoints_retry, ledger_retry, pod_retry]
        .into_iter()
        .flatten()
        .min();
    Ok(Acted { released, retry })
}

/// Shuts out of each process the plan fences both client users, where it runs (a process
/// that outlived its pod: where it was last seen): as soon as the decision is made, before
/// its status write and whether or not that lands. A fence only ever shuts clients out;
/// what must not happen to one whose write does not land is a release that undoes it before
/// its hold is on record, which `crate::hold::fence_ahead` rules out. Only the run id probed is
/// fenced, on a connection that reads it first, so a fence never reaches a newer process.
pub(crate) async fn fence_ahead(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    access: &AdminAccess,
    observed: &BTreeMap<Slot, SlotObservation>,
    d: &Decision,
) -> Result<FencesSent> {
    let mut sent = FencesSent::default();
    for (slot, run_id) in &d.plan.fences {
        let unstopped = d
            .status
            .members
            .iter()
            .find(|m| m.slot == *slot)
            .and_then(|m| m.unstopped.as_ref())
            .filter(|u| &u.run_id == run_id)
            .and_then(|u| Some((u, u.pod_ip.parse().ok()?)));
        let pod = observed.get(slot);
        let Some(ip) = unstopped.map(|(_, ip)| ip).or_else(|| pod.and_then(|o| o.pod_ip)) else {
            continue;
        };
        // As its pod was built; a process that outlived its pod every way it may be reached,
        // its recorded mode first (a fence shuts out both users lock clients could log in as).
        let accesses = match (unstopped, pod) {
            (Some((u, _)), _) => super::inputs::accesses_for_unstopped(ctx, cluster, ns, access, u).await,
            (None, Some(o)) => vec![access.for_slot(o)],
            (None, None) => vec![std::borrow::Cow::Borrowed(access)],
        };
        // A fence only ever shuts clients out; no leadership check could make it unsafe, but
        // a replica that lost the lease should not act at all.
        ctx.leadership.check()?;
        let mut failure = None;
        for access in accesses {
            match access.fence(ip, run_id).await {
                Ok(()) => {
                    tracing::warn!(slot = slot.index(), %run_id, user = access.client_user, "fenced again");
                    failure = None;
                    break;
                }
                Err(e) => {
                    tracing::warn!(slot = slot.index(), error = %e, "fence not done");
                    failure = Some(e.to_string());
                }
            }
        }
        match failure {
            Some(why) => {
                sent.failed = true;
                fence_failed(ctx, cluster, *slot, run_id, ip, &why).await;
            }
            None => sent.landed = true,
        }
    }
    if sent.landed && !sent.failed {
        ctx.memory.failed_fences.succeeded(&ObjectRef::from_obj(cluster));
    }
    Ok(sent)
}

/// What [`fence_ahead`] came to.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FencesSent {
    /// A fence was sent and answered.
    pub landed: bool,
    /// A fence could not be sent or was refused: the process may still serve.
    pub failed: bool,
}

/// A fence that did not land (safety review 3, N5). The kept probe connection to that address
/// is closed, so the next probe logs in afresh as the fence did, and probe and fence agree:
/// one whose fresh login fails gets no answer (nothing is released on it, and it is not
/// "found serving" again and again while nothing can fence it); one that answers shows
/// whether the process serves, and is fenced again. The Warning tells whoever asked for the
/// fence, at most once per backoff step (1 s doubling to 5 min) while fences keep failing.
async fn fence_failed(
    ctx: &Context,
    cluster: &RedlockCluster,
    slot: Slot,
    run_id: &str,
    ip: std::net::IpAddr,
    why: &str,
) {
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    ctx.memory.probe_connections.close_to(uid, ip);
    let gate = &ctx.memory.failed_fences;
    let (obj, now) = (ObjectRef::from_obj(cluster), Instant::now());
    if !gate.open(&obj, now) {
        return;
    }
    let quiet = gate.failed(obj, now);
    let note = format!(
        "{}: process {run_id} could not be fenced: {why}. It may still serve lock clients; the operator tries again every probe period (this Warning again in {}s at the earliest if it keeps failing)",
        crate::children::names::slot_name(&cluster.name_any(), slot),
        quiet.as_secs()
    );
    events::publish_for_slot(
        &ctx.recorder,
        cluster,
        slot,
        MemberReason::FenceFailed,
        note,
        true,
    )
    .await;
}

/// Metrics, condition changes and events of the decision.
async fn report(ctx: &Context, cluster: &RedlockCluster, ns: &str, on_record: &OnRecord, now: Timestamp) {
    let d = on_record.decision();
    let name = cluster.name_any();
    ctx.metrics
        .observe_members(ns, &name, &d.status, cluster.spec.instances, now);
    if let Some(keys) = d.ttl_violations {
        ctx.metrics.ttl_violations(ns, &name, keys);
    }
    super::publish_condition_changes(ctx, cluster, &d.status).await;
    for (change, message) in &d.cluster_events {
        tracing::info!(reason = change.reason().as_str(), "{message}");
        events::publish_for_cluster(&ctx.recorder, cluster, change.reason(), message.clone(), false).await;
    }
    publish_member_events(ctx, cluster, ns, &d.plan.events).await;
}

/// What the fences of a decision whose status write did not land (or was not made: the cache
/// lags) did: their slots' events (`Refenced`, `ClockJump`, …) now, since the next decisions
/// are planned from the records these made (`crate::hold::fence_ahead::as_fenced`) and do not tell
/// them again; and the readiness gates of the fenced pods closed (a gate only ever closes
/// here: one opens only after a write).
pub(crate) async fn fenced_unrecorded(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    observed: &BTreeMap<Slot, SlotObservation>,
    d: &Decision,
) -> Result<()> {
    if d.plan.fences.is_empty() {
        return Ok(());
    }
    let fenced = |slot: Slot| d.plan.fences.iter().any(|(s, _)| *s == slot);
    let told: Vec<MemberEvent> = d.plan.events.iter().filter(|e| fenced(e.slot)).cloned().collect();
    publish_member_events(ctx, cluster, ns, &told).await;
    let shut: Vec<_> = serving_gate::writes(&d.status.members, observed, &[])
        .into_iter()
        .filter(|w| !w.serving && fenced(w.slot))
        .collect();
    set_serving_gates(ctx, cluster, ns, shut).await
}

/// Member events: logged, counted and published.
async fn publish_member_events(ctx: &Context, cluster: &RedlockCluster, ns: &str, told: &[MemberEvent]) {
    let name = cluster.name_any();
    for e in told {
        if e.reason.is_loss() {
            ctx.metrics.instance_lost(ns, &name);
        }
        if e.reason == MemberReason::ClockJump {
            ctx.metrics.member_clock_jump(ns, &name);
        }
        tracing::info!(slot = e.slot.index(), reason = e.reason.as_str(), "{}", e.message);
        events::publish_for_slot(
            &ctx.recorder,
            cluster,
            e.slot,
            e.reason,
            e.message.clone(),
            e.warning,
        )
        .await;
    }
}

/// The endpoints ConfigMap clients read (which members serve). A refused write is reported
/// (event, error metric) and tried again soon (the returned delay), while the fences and
/// releases must still happen now.
async fn publish_endpoints(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    observed: &BTreeMap<Slot, SlotObservation>,
    on_record: &OnRecord,
) -> Option<Duration> {
    let d = on_record.decision();
    let serving = crate::decide::observe::serving_slots(&d.status.members, observed, cluster.spec.instances);
    let published = d.status.published_instances.unwrap_or(cluster.spec.instances);
    let confirmed = d.status.confirmed_instances.unwrap_or(published);
    let hold_ttl: Duration = d
        .status
        .hold
        .as_ref()
        .map_or(cluster.spec.max_lock_ttl, |h| h.max_lock_ttl)
        .into();
    // Not built again while nothing it is built from or compared with changed (`children_memo`).
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    let fingerprint = Fingerprint::of(cluster, &(&serving, published, confirmed, hold_ttl));
    let version = ctx.caches.child_versions.of(ns, &cluster.name_any());
    if ctx.memory.endpoints.current(uid, fingerprint, version) {
        return None;
    }
    let desired_cm = endpoints::endpoints_config_map(cluster, published, confirmed, &serving, hold_ttl);
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let e = match apply::apply_if_changed(&cm_api, &ctx.caches.config_maps, desired_cm).await {
        Ok(apply::Applied::InCache) => {
            ctx.memory.endpoints.found_current(uid, fingerprint, version);
            return None;
        }
        Ok(written) => {
            ctx.memory.endpoints.unsettled(uid);
            if written == apply::Applied::Restored {
                let name = crate::children::names::endpoints_config_map_name(&cluster.name_any());
                let report = super::children::ChildrenReport {
                    restored: vec![format!("ConfigMap {name}")],
                    ..Default::default()
                };
                super::children::publish_restored(ctx, cluster, &report).await;
            }
            return None;
        }
        Err(e) => {
            ctx.memory.endpoints.unsettled(uid);
            e
        }
    };
    ctx.metrics.reconcile_failed(&e);
    let msg = format!(
        "{}: cannot publish the endpoints clients read: {e}; tried again in {}s",
        crate::children::names::endpoints_config_map_name(&cluster.name_any()),
        ENDPOINTS_RETRY.as_secs()
    );
    tracing::warn!("{msg}");
    events::publish_for_cluster(
        &ctx.recorder,
        cluster,
        ClusterReason::EndpointsNotPublished,
        msg,
        true,
    )
    .await;
    Some(ENDPOINTS_RETRY)
}

/// Brings each pod's readiness gate to its member's record (`serving_gate::writes`). A refused
/// write is logged and made again by the next reconcile: a cluster does not rest while a pod is
/// not Ready or a member is not `Ready` (`at_rest`), which a gate that differs from its record
/// implies. The fences and releases it follows are already done.
async fn set_serving_gates(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    writes: Vec<serving_gate::GateWrite>,
) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let name = cluster.name_any();
    for w in writes {
        // Opening a gate routes clients: not once the lease may have passed to another
        // process (checked before each write, as before each release).
        ctx.leadership.check()?;
        let condition = PodCondition {
            type_: serving_gate::SERVING_CONDITION.into(),
            status: if w.serving { "True" } else { "False" }.into(),
            reason: Some(w.reason.into()),
            message: Some(w.message),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                ctx.clock.now().wall,
            )),
            ..Default::default()
        };
        let pod = slot_name(&name, w.slot);
        match apply::set_pod_condition(&pods, &pod, &w.pod_uid, &condition).await {
            Ok(true) => tracing::debug!(slot = w.slot.index(), serving = w.serving, "readiness gate set"),
            Ok(false) => tracing::debug!(
                slot = w.slot.index(),
                "readiness gate not set: the pod is gone or replaced"
            ),
            Err(e) => {
                ctx.metrics.reconcile_failed(&e);
                tracing::warn!(slot = w.slot.index(), serving = w.serving, error = %e, "readiness gate not set");
            }
        }
    }
    Ok(())
}

/// How soon a refused ledger is written again.
const LEDGER_RETRY: Duration = Duration::from_secs(2);

/// Writes the decision's ledger (`desired`), conditional on the version the cache showed
/// (`observed` was read from it), so that a reconcile planned from an older ledger cannot undo
/// a newer entry. Returns the ledger now on the API server as far as this process knows it
/// (the one written, else the one the cache shows), which releases are checked against, and
/// when to try again if the write was refused (reported: event, error metric, log).
async fn record_ledger<'a>(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    observed: Option<&'a Ledger>,
    desired: Option<&'a Ledger>,
) -> (Option<&'a Ledger>, Option<Duration>) {
    let Some(desired) = desired else {
        return (observed, None);
    };
    let name = crate::children::names::ledger_config_map_name(&cluster.name_any());
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let cached = ctx
        .caches
        .config_maps
        .get(&ObjectRef::<ConfigMap>::new(&name).within(ns));
    // The cache moved on since the observation `desired` was planned from: planned again.
    if cached
        .as_deref()
        .and_then(|cm| crate::children::ledger::read(cm).ok())
        .as_ref()
        != observed
    {
        return (observed, Some(LEDGER_RETRY));
    }
    let read_at = cached.and_then(|cm| cm.metadata.resource_version.clone());
    let built = crate::children::ledger::ledger_config_map(cluster, desired);
    let e =
        match apply::apply_if_changed_at(&cm_api, &ctx.caches.config_maps, built, read_at.as_deref()).await {
            Ok(_) => return (Some(desired), None),
            Err(e) => e,
        };
    ctx.metrics.reconcile_failed(&e);
    let msg = format!(
        "{name}: cannot write the ledger of the processes each slot ran: {e}; no process it does not name is released; tried again in {}s",
        LEDGER_RETRY.as_secs()
    );
    tracing::warn!("{msg}");
    events::publish_for_cluster(&ctx.recorder, cluster, ClusterReason::LedgerNotWritten, msg, true).await;
    (observed, Some(LEDGER_RETRY))
}

/// Lets lock clients into each process whose hold has run and was not released ahead of the
/// write; those released.
#[allow(clippy::too_many_arguments)] // the pipeline's stages, each named where it is used
async fn release(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
    observed: &BTreeMap<Slot, SlotObservation>,
    ledger: Option<&Ledger>,
    on_record: &OnRecord,
    released_ahead: &[Released],
) -> Result<Vec<Released>> {
    let due: Vec<(Slot, String)> = on_record
        .decision()
        .plan
        .releases
        .iter()
        .filter(|(slot, run_id)| {
            !released_ahead
                .iter()
                .any(|r| r.slot == *slot && &r.run_id == run_id)
        })
        .cloned()
        .collect();
    let done = release_each(ctx, cluster, ns, inputs, observed, ledger, &due, false).await?;
    publish_released(ctx, cluster, &done).await;
    Ok(done)
}

/// The `InstanceReleased` events of releases that are done.
pub(crate) async fn publish_released(ctx: &Context, cluster: &RedlockCluster, released: &[Released]) {
    for r in released {
        let msg = format!(
            "{}: released process {} to lock clients",
            slot_name(&cluster.name_any(), r.slot),
            r.run_id
        );
        tracing::info!(slot = r.slot.index(), "{msg}");
        events::publish_for_slot(
            &ctx.recorder,
            cluster,
            r.slot,
            MemberReason::InstanceReleased,
            msg,
            false,
        )
        .await;
    }
}

/// Releases each of `releases` (`ahead`: before the status write) that `ledger` names
/// (`crate::hold::ledger`: a process may serve only once a record outside the status names
/// it); returns those done, and when each was answered. One the ledger does not name is not
/// sent, as if it had failed: it stays owed, and the next reconcile, with the ledger written,
/// sends it.
#[allow(clippy::too_many_arguments)] // the pipeline's stages, each named where it is used
async fn release_each(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
    observed: &BTreeMap<Slot, SlotObservation>,
    ledger: Option<&Ledger>,
    releases: &[(Slot, String)],
    ahead: bool,
) -> Result<Vec<Released>> {
    let name = cluster.name_any();
    let mut done = Vec::new();
    for (slot, run_id) in releases {
        if !crate::hold::ledger::names(ledger, *slot, run_id) {
            tracing::info!(slot = slot.index(), %run_id, ahead, "release waits for the ledger to name the process");
            continue;
        }
        let Some(o) = observed.get(slot) else {
            continue;
        };
        let Some(ip) = o.pod_ip else {
            continue;
        };
        // Ahead of the write, only while no suspension since this process's own last write
        // shows (each release takes a connection and a round trip, in which the process can be
        // stopped and a successor elected): the rest go after the write. Only the clock is
        // read afresh here; the version compared is the snapshot's the reconcile planned from,
        // so a user's edit that reached the cache since is not seen. None is needed: what such
        // an edit can ask for never makes a recorded hold's release unsafe
        // (`persist::ahead_of_write`), and the write after it is conditional on the snapshot.
        if ahead && !super::persist::still_own(ctx, cluster) {
            break;
        }
        // No release once the lease may have passed to another process. The check is a point
        // in time: a release already under way can still land a little later. That is safe on
        // its own, because a release names the run_id whose hold ended and is sent on the
        // connection that just read that run_id, so it can never free a newer process.
        ctx.leadership.check()?;
        let access = inputs.access.for_slot(o);
        // With auth on, the passwords on record (as a password sync sets them).
        let passwords = if access.client_user == CLIENT_USER {
            inputs.credentials.accepted_client_hashes()
        } else {
            Vec::new()
        };
        match access.release(ip, run_id, o.pod_uid.as_deref(), &passwords).await {
            Ok(()) => {
                // Lateness as clients see it: when the release was answered, not when it was
                // planned.
                let released_at = ctx.clock.now().wall;
                let previous = cluster.recorded_members();
                ctx.metrics
                    .released(ns, &name, ended_hold(previous, *slot, released_at), ahead);
                tracing::debug!(slot = slot.index(), %run_id, ahead, "released");
                done.push(Released {
                    slot: *slot,
                    run_id: run_id.clone(),
                    at: released_at,
                });
            }
            // Not an error of the reconcile: the next observation decides (a lost process
            // becomes a hold; an unreachable one is retried).
            Err(e) => tracing::warn!(slot = slot.index(), ahead, error = %e, "release not done"),
        }
    }
    Ok(done)
}

/// The plan's pod creates and deletes. A refused one is reported (event `PodChangeFailed`,
/// the reconcile error metric) and waits out its own backoff (`Memory::pod_creates`,
/// `Memory::pod_deletes`), while the reconcile goes on at its pace: failing it would delay
/// every probe and release. Deletes go first and apart: one may free what a create needs
/// (quota), and a create refused for good must not keep a scale-down's deletes from happening.
async fn change_pods(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    plan: &crate::decide::plan::Plan,
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Result<Option<Duration>> {
    let deletes = change_pods_of_kind(ctx, cluster, ns, &plan.delete_pods, PodChange::Delete, observed);
    let deleted = deletes.await?;
    let created = change_pods_of_kind(
        ctx,
        cluster,
        ns,
        &plan.create_pods,
        PodChange::Create(&plan.predecessors),
        observed,
    )
    .await?;
    Ok([deleted, created].into_iter().flatten().min())
}

#[derive(Clone, Copy)]
enum PodChange<'a> {
    /// With the records of the processes the replaced pods left behind.
    Create(&'a BTreeMap<Slot, crate::crd::UnstoppedProcess>),
    Delete,
}

/// One kind of pod change for `slots`, behind that kind's retry gate; stops at the first
/// refusal (the others would most likely be refused alike) and returns when to try again.
async fn change_pods_of_kind(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    slots: &[Slot],
    kind: PodChange<'_>,
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Result<Option<Duration>> {
    if slots.is_empty() {
        return Ok(None);
    }
    let (gate, verb) = match kind {
        PodChange::Create(_) => (&ctx.memory.pod_creates, "create"),
        PodChange::Delete => (&ctx.memory.pod_deletes, "delete"),
    };
    let key = ObjectRef::from_obj(cluster);
    if !gate.open(&key, Instant::now()) {
        tracing::debug!("pod {verb}s wait for their retry backoff");
        return Ok(None);
    }
    let name = cluster.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    ctx.leadership.check()?;
    for &slot in slots {
        let done = match kind {
            PodChange::Create(predecessors) => {
                let built = pod::replacement(cluster, slot, predecessors.get(&slot));
                apply::create_pod(&pods, &built).await
            }
            PodChange::Delete => {
                let uid = observed.get(&slot).and_then(|o| o.pod_uid.as_deref());
                apply::delete(&pods, &slot_name(&name, slot), uid)
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = done {
            let retry = gate.failed(key, Instant::now());
            ctx.metrics.reconcile_failed(&e);
            let msg = format!(
                "{}: cannot {verb} the pod: {e}; tried again in {}s, while holds, probes and releases go on",
                slot_name(&name, slot),
                retry.as_secs()
            );
            tracing::warn!(slot = slot.index(), "{msg}");
            events::publish_for_slot(
                &ctx.recorder,
                cluster,
                slot,
                MemberReason::PodChangeFailed,
                msg,
                true,
            )
            .await;
            return Ok(Some(retry));
        }
    }
    gate.succeeded(&key);
    Ok(None)
}

/// The hold a release of `slot` ends: how long it lasted, from its (last) start to now, and
/// how late the release comes after its recorded end.
fn ended_hold(previous: &[MemberStatus], slot: Slot, now: Timestamp) -> Option<EndedHold> {
    let m = previous.iter().find(|m| m.slot == slot && m.state.is_holding())?;
    let started = m.hold_started_at.as_ref()?.0;
    let until = m.held_until.as_ref()?.0;
    Some(EndedHold {
        length: now.duration_since(started).as_secs_f64().max(0.0),
        lateness: now.duration_since(until).as_secs_f64().max(0.0),
    })
}
