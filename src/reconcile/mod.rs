//! One reconcile of one RedlockCluster, as a pipeline in the order the safety argument needs:
//!
//! 1. guards: caches synced, not being deleted, the watch cache not behind this process's own
//!    last status write (behind it for longer than a probe period: planned from that write's
//!    reply, for fences only, below);
//! 2. [`inputs`]: spec validity, credentials, the TLS CA;
//! 3. [`children`]: Secrets, redis.conf, Services, PDB, NetworkPolicy (failures reported,
//!    never fatal);
//! 4. [`observation`]: pods (by name when the cache shows none), probes, TTL audit;
//!    then [`passwords`]: a client password rotation's next step (Secrets first, then the
//!    processes' passwords; never `on`/`off`);
//! 5. [`crate::decide::decide`]: pure: status, pod changes, fences, releases, events, when to look again;
//! 6. fences, at once (`act::fence_ahead`): nothing waits for a status write or the watch;
//! 7. [`persist`]: the status goes on record (write-ahead) and yields an `OnRecord`; only a
//!    release whose hold is on record in this process's own last write, with nothing newer,
//!    goes before it (`persist::AheadOfWrite`). A write that fails does not back off the
//!    reconcile: probes and fences go on every probe period;
//! 8. [`act`]: needs that `OnRecord`: events, endpoints, releases, readiness gates, pods.
//!
//! **Fences ahead of the write** (docs/design.md §6). A fence only shuts clients out, so no
//! refused status write (an admission policy, a 409 storm) and no stalled watch may delay it.
//! What it needs instead is that nothing undoes it before the hold it starts is on record:
//! `crate::hold::fence_ahead` keeps each fence whose write did not land, plans its slot from the
//! record the fence's decision made while the stored record is still the one it was planned
//! from, and no rule releases its process until a write that holds it lands (a `Ready` record
//! of it, written by someone else, is held in full instead of "released again"). The
//! interleavings an attacker could use:
//!
//! - fence, write refused, next reconcile from the stored record (`Ready`, or `Held` with an
//!   earlier end): planned as the fence's hold, its process not released, neither "again" nor
//!   at the stored end;
//! - fence, then a user's unfence before the hold is on record: the probe finds it serving
//!   inside the planned hold and fences again (`Refenced`);
//! - fence, then a crash or a new leader before the write: the memory is gone and the
//!   successor plans from the stored record, exactly as if the fence had never been sent, the
//!   only outcome a crash before the write had when fences waited for it. It times a `Held`
//!   record's hold again in full from when it first sees it (§9.1), after the fence; a `Ready`
//!   one it releases again, which leaves the process as it was before the fence;
//! - a write that fails after it was sent but landed: the stored record is the new hold, and
//!   the guard holds until the next write lands;
//! - a stale cache: never a version older than this process's own write (the guard in 1); one
//!   behind it for longer than a probe period is replaced by that write's reply, which plans
//!   fences only: nothing is written, released, created or deleted from it;
//! - releases are untouched: ahead of the write only from a hold on record in this process's
//!   own last write (`persist::ahead_of_write` never sees the fences' records), else after it.

pub mod apply;
pub(crate) mod context;
pub(crate) mod rest_watch;
pub(crate) mod ttl_sampling;

mod act;
mod children;
mod inputs;
mod kubelet_pods;
mod observation;
mod ownership;
mod passwords;
pub(crate) mod persist;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

pub use persist::status_patch;

use crate::crd::conditions::{self, ConditionType};
use crate::crd::reasons::ClusterReason;
use crate::crd::{MemberStatus, RedlockCluster, RedlockClusterStatus};
use crate::decide::at_rest;
use crate::error::{Error, Result};
use crate::hold::fence_ahead;
use crate::hold::release_ahead;
use crate::reconcile::context::Context;
use crate::runtime::events;

/// How soon a reconcile that found the watch cache behind this process's own status write
/// looks again (the watch event is normally a few milliseconds away).
const CACHE_LAG_RETRY: Duration = Duration::from_millis(50);

/// Why a reconcile planned from this process's own last write (the cache lags it) releases
/// nothing.
const CACHE_LAGS: &str = "the watch cache does not show the operator's last status write yet";

/// One reconcile: read → observe → decide (pure) → persist → act. Longer than the other
/// functions on purpose: it is the one place where the whole pipeline and its order are seen.
pub(crate) async fn reconcile(cached: Arc<RedlockCluster>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx
        .caches
        .caches_synced
        .load(std::sync::atomic::Ordering::Acquire)
    {
        // An unsynced pod cache looks like "every pod deleted": never plan from it.
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let _timer = ctx.metrics.reconcile_started();
    let uid = cached.metadata.uid.clone().unwrap_or_default();
    // Whatever woke this reconcile (an event, the rest watch, a requeue), the cluster's rest
    // ends before anything is read: its watch stops, and stores nothing after this.
    ctx.memory.resting.wake(&uid);
    let ns = cached
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(cached.name_any()))?;
    let api: Api<RedlockCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // Another operator, elected with another Lease, leads this cluster while that Lease may be
    // held: nothing here may act next to it (`crate::runtime::lease_owner`).
    if let Some(wait) = ownership::led_by_another(&ctx, &cached).await {
        return Ok(wait);
    }
    // Plan from the watch cache: no request per reconcile (steady state costs the API server
    // nothing per cluster). Until the cache shows this process's last status write, planning
    // from the older version could mistake the operator's own new pods or holds for unknown
    // ones: wait for it. (Anyone else's newer write is caught by the conditional status write.)
    //
    // But not for long with the fences: a cache behind for longer than a probe period (a
    // stalled watch; normally the event is milliseconds away) is replaced by the object that
    // write produced, as the API server answered it, and the reconcile only probes and fences
    // (`fences_only`): nothing is written, released, created or deleted until the cache shows
    // the write. That object, not a quorum GET: it costs no request, and it is exactly the
    // version the cache is about to show (no other operator writes, docs/design.md §2), so
    // what is planned from it is what the cache would give, only sooner. A GET could return a
    // newer version the cache has not reached, and a write planned from it would break the
    // rule the guard rests on (any version but the one planned from is newer). What neither
    // shows, someone else's write since (a maintenance request), waits for the watch as it did.
    let lag = ctx
        .memory
        .status_writes
        .lag(&uid, cached.metadata.resource_version.as_deref());
    let fences_only = lag.is_some();
    let cached = match lag {
        None => cached,
        Some(lag) => match lag.written {
            Some(written) if lag.age >= ctx.settings.probe_period => written,
            _ => return Ok(Action::requeue(CACHE_LAG_RETRY)),
        },
    };
    // Releases sent ahead of a status write that did not land: planned as the `Ready` records
    // they made (a released process serves, whatever the stored `Held` says).
    let unrecorded = ctx.memory.unrecorded_releases.of(&uid);
    let with_releases = with_members(&cached, !unrecorded.is_empty(), |m| {
        release_ahead::as_released(m, &unrecorded)
    });
    // Fences sent ahead of a status write that did not land: planned as the records their
    // decisions made (the holds they started), their processes released by no rule until a
    // write holds them (`crate::hold::fence_ahead`). Releases ahead of the write are chosen from
    // `with_releases` only: never from a record that is not on record.
    let fences = ctx.memory.unrecorded_fences.of(&uid);
    let fenced_processes = fence_ahead::processes(&fences);
    let planned = with_members(&with_releases, !fences.is_empty(), |m| {
        fence_ahead::as_fenced(m, &fences)
    });
    let cluster: &RedlockCluster = &planned;
    if cluster.metadata.deletion_timestamp.is_some() {
        // Children go with the owner (garbage collection by owner references).
        forget(&ctx, &ns, &cluster.name_any(), cluster.metadata.uid.as_deref());
        return Ok(Action::await_change());
    }

    let mut inputs = inputs::read(&ctx, cluster, &ns).await?;
    let children = children::apply(&ctx, cluster, &ns, &inputs).await?;
    // The TTL audit compares keys with the maxLockTTL in force before this reconcile.
    let in_force = cluster
        .status
        .as_ref()
        .and_then(|s| s.hold.as_ref())
        .map_or(cluster.spec.max_lock_ttl, |h| {
            h.max_lock_ttl.max(cluster.spec.max_lock_ttl)
        });
    let mut observation = observation::observe(&ctx, cluster, &ns, &inputs.access, in_force.into()).await?;
    observation::distrust_failed_cas(&ctx, &ns, &observation.slots);
    let mut password_rotation = Vec::new();
    // A rotation's steps are recorded by the status write that follows them: none without one.
    if !fences_only {
        password_rotation
            .extend(passwords::rotate(&ctx, cluster, &ns, &mut inputs, &children, &observation.slots).await?);
        password_rotation.extend(
            passwords::rotate_admin(&ctx, cluster, &ns, &mut inputs, &children, &observation.slots).await?,
        );
    }
    // A rotation under way (status True) has steps to take; one done (or refused because
    // auth is off) says so for good, and waits for nothing.
    let rotation_quiet = password_rotation.iter().all(|c| !c.status);
    let clock = ctx.clock.now();
    // Deadlines decided below (a hold's end) count from here: what persisting and acting take
    // comes off them (a status write at a loaded API server would otherwise make the next hold
    // end's reconcile, and its release, late by the write's time).
    let decided_at = std::time::Instant::now();
    let now = clock.wall;
    let timers = ctx.memory.timers.get(&uid);
    let release_blocked = match fences_only {
        true => Some(CACHE_LAGS.to_owned()),
        false => ctx.clock.release_blocked(),
    };
    let spec_hash = ctx.memory.spec_hashes.of(cluster);
    // Releases decided earlier that the probes have not seen serving yet: a `Ready` process
    // of one found fenced is released again; any other is held in full (N1).
    let owed = crate::decide::plan::still_owed(&ctx.memory.owed_releases.of(&uid), &observation.slots);
    ctx.memory.owed_releases.settle(&uid, owed.clone());
    let nonce = crate::decide::resize::new_nonce();
    let decision = crate::decide::decide(
        cluster,
        &crate::decide::Facts {
            rejections: &inputs.rejections,
            children: &children,
            observation: &observation,
            probe_period: ctx.settings.probe_period,
            timers: &timers,
            release_blocked: release_blocked.as_deref(),
            fenced_unrecorded: &fenced_processes,
            owed_releases: &owed,
            lease: ctx.settings.lease.as_deref(),
            password_rotation,
            spec_hash: &spec_hash,
            nonce: &nonce,
            gate_writes_refused: ctx.memory.gate_writes_refused.get().and_then(Option::as_deref),
        },
        clock,
    );
    ctx.memory.owed_releases.owe(&uid, &decision.plan.releases);
    let rest = at_rest::rest_of(
        cluster,
        &inputs.access,
        &decision.plan,
        &decision.status,
        &at_rest::Settled {
            instances: cluster.spec.instances,
            observed: &observation.slots,
            quiet: inputs.rejections.is_empty()
                && children.problems.is_empty()
                && children.conflicts.is_empty()
                && !children.unsettled
                && rotation_quiet
                && passwords::in_sync(&inputs.credentials, &observation.slots)
                && decision.cluster_events.is_empty(),
            release_blocked: release_blocked.is_some(),
            clocks_compared: observation.clock_tracks.iter().all(|(_, t)| t.compared),
            ttl: observation.ttl.clone(),
        },
        in_force.into(),
    );
    let mut after = decision.requeue;
    let deadline = decision.deadline;
    let next_timers = decision.timers.clone();
    // Fences at once, before the status write and whether or not it lands (module doc).
    let sent = act::fence_ahead(&ctx, cluster, &ns, &inputs.access, &observation.slots, &decision).await?;
    if sent.failed {
        // Not the 100 ms of a fence just sent, whose effect the next probe confirms: one that
        // failed is tried again at the probe period's pace, not in a loop of probes, fences
        // and status writes (safety review 3, N5).
        after = after.max(ctx.settings.probe_period);
    }
    let fenced = fence_ahead::unrecorded(
        cluster.recorded_members(),
        &decision.status.members,
        &decision.plan.fences,
    );
    if fences_only {
        // Nothing else from a plan the cache does not show yet; the holds the fences started
        // are planned from memory until a write puts them on record, and were first seen by
        // this process now (their timers).
        ctx.memory.unrecorded_fences.keep(&uid, fenced);
        ctx.memory.timers.keep(&uid, next_timers.merged(&timers));
        act::fenced_unrecorded(&ctx, cluster, &ns, &observation.slots, &decision).await?;
        tracing::debug!(cluster = %cluster.name_any(), "the watch cache lags this operator's last status write: probed and fenced only");
        return Ok(Action::requeue(ctx.settings.probe_period));
    }
    let ahead = persist::ahead_of_write(&ctx, &with_releases, &decision);
    let released_ahead = act::release_ahead(
        &ctx,
        &with_releases,
        &ns,
        &inputs,
        &observation.slots,
        observation.ledger.as_ref(),
        &ahead,
    )
    .await?;
    let pending = release_ahead::unrecorded(
        with_releases.recorded_members(),
        &decision.status.members,
        &released_ahead,
    );
    let fence_report = (!decision.plan.fences.is_empty()).then(|| decision.clone());
    let must_write = !unrecorded.is_empty() || !fences.is_empty();
    let on_record = match persist::persist(&ctx, &api, cluster, decision, must_write).await {
        Ok(on_record) => {
            ctx.memory.unrecorded_releases.recorded(&uid);
            ctx.memory.unrecorded_fences.recorded(&uid);
            on_record
        }
        Err(e) => {
            // Planned as released, and as fenced, from now on, until a write lands; the
            // releases and fences happened, so their events are told all the same.
            ctx.memory.unrecorded_releases.keep(&uid, pending);
            ctx.memory.unrecorded_fences.keep(&uid, fenced);
            ctx.memory.timers.keep(&uid, next_timers.merged(&timers));
            act::publish_released(&ctx, cluster, &released_ahead).await;
            if let Some(d) = &fence_report {
                act::fenced_unrecorded(&ctx, cluster, &ns, &observation.slots, d).await?;
            }
            let Error::Kube(_) = &e else {
                return Err(e);
            };
            // Refused (an admission policy, a conflict) or failed: no backoff of the
            // reconcile, whose probes and fences go on every probe period; the write is
            // tried again with them.
            ctx.metrics.reconcile_failed(&e);
            let retry = after.min(ctx.settings.probe_period);
            tracing::warn!(cluster = %cluster.name_any(), %ns, error = %e, retry_in = ?retry, "status write failed: fences were sent, releases wait for a write");
            return Ok(Action::requeue(retry));
        }
    };
    // The timers, and the clock samples the verdicts were judged from, belong to the status
    // now on record.
    ctx.memory.timers.keep(&uid, next_timers);
    ctx.memory
        .member_clocks
        .lock()
        .expect("clock lock is never poisoned")
        .extend(std::mem::take(&mut observation.clock_tracks));
    let acted = act::act(
        &ctx,
        cluster,
        &ns,
        &inputs,
        &observation.slots,
        observation.ledger.as_ref(),
        on_record,
        &released_ahead,
        now,
    )
    .await?;
    if let Some(deadline) = deadline {
        after = after.min(deadline.saturating_sub(decided_at.elapsed()));
    }

    ctx.memory.backoff.succeeded(&ObjectRef::from_obj(cluster));
    if acted.released {
        // Pick up the released pods' readiness soon.
        after = after.min(Duration::from_millis(300));
    }
    if let Some(retry) = acted.retry {
        after = after.min(retry);
    }
    match rest {
        Ok(rest) if acted.retry.is_none() && !acted.released => {
            // Nothing to do but watch: the rest watch probes every period and runs the TTL
            // audit, and a reconcile comes when it sees a change, an event arrives, or the
            // resync is due.
            after = rest.until_reconcile;
            let rest = Arc::new(rest);
            let generation = ctx.memory.resting.rest(&uid, rest.clone());
            rest_watch::spawn(ctx.clone(), uid, generation, rest);
        }
        Ok(_) => tracing::trace!(cluster = %cluster.name_any(), "not at rest: acting left something to do"),
        Err(why) => tracing::trace!(cluster = %cluster.name_any(), why, "not at rest"),
    }
    Ok(Action::requeue(after))
}

/// `c` with its members replaced by `f` of them, when `apply`.
fn with_members(
    c: &Arc<RedlockCluster>,
    apply: bool,
    f: impl FnOnce(&[MemberStatus]) -> Vec<MemberStatus>,
) -> Arc<RedlockCluster> {
    if !apply {
        return c.clone();
    }
    let mut c = (**c).clone();
    if let Some(s) = c.status.as_mut() {
        s.members = f(&s.members);
    }
    Arc::new(c)
}

/// Drops what is kept in memory about a cluster that is gone (by UID where known; else the
/// UID it rested under, if it did).
pub(crate) fn forget(ctx: &Context, ns: &str, name: &str, uid: Option<&str>) {
    // By name only when the UID is not known: a cluster re-created under the same name meanwhile
    // has a rest of its own, under its own UID.
    let rested = uid
        .is_none()
        .then(|| ctx.memory.resting.wake_cluster(ns, name))
        .flatten();
    let uid = uid.or(rested.as_deref());
    ctx.metrics.forget_cluster(ns, name);
    // Backoffs are kept by namespace and name: a cluster re-created under the same name must
    // not wait out its predecessor's (up to 5 min before its first pods).
    let key = ObjectRef::<RedlockCluster>::new(name).within(ns);
    ctx.memory.backoff.succeeded(&key);
    ctx.memory.pod_creates.succeeded(&key);
    ctx.memory.pod_deletes.succeeded(&key);
    if let Some(uid) = uid {
        ctx.memory.resting.wake(uid);
        ctx.memory.timers.forget(uid);
        ctx.memory.status_writes.forget(uid);
        ctx.memory.unrecorded_releases.recorded(uid);
        ctx.memory.unrecorded_fences.recorded(uid);
        ctx.memory.children.forget(uid);
        ctx.memory.credentials.forget(uid);
        ctx.memory.spec_hashes.forget(uid);
        ctx.memory.silences.forget(uid);
        ctx.memory.endpoints.forget(uid);
        ctx.memory.probe_connections.forget(uid);
        ctx.memory
            .known_credentials
            .lock()
            .expect("credentials lock is never poisoned")
            .remove(uid);
        ctx.memory
            .member_clocks
            .lock()
            .expect("clock lock is never poisoned")
            .retain(|(u, _), _| u != uid);
    }
    // Every incarnation's (`ttl_sampling::audit_key`): a successor's audit merely starts over.
    let incarnations = format!("{ns}/{name}/");
    ctx.memory
        .ttl_audits
        .lock()
        .expect("audit lock is never poisoned")
        .retain(|key, _| !key.starts_with(&incarnations));
}

/// Events for conditions the user must act on, once per change (never once per reconcile:
/// repeating them would be an API write every period).
async fn publish_condition_changes(ctx: &Context, cluster: &RedlockCluster, desired: &RedlockClusterStatus) {
    let old = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    fn find(list: &[Condition], t: ConditionType) -> Option<&Condition> {
        list.iter().find(|c| c.type_ == t.as_str())
    }
    for (type_, bad_reason, good_reason) in [
        (
            ConditionType::SpecAccepted,
            ClusterReason::SpecRejected,
            ClusterReason::SpecAccepted,
        ),
        (
            ConditionType::TtlPolicy,
            ClusterReason::TtlPolicyViolated,
            ClusterReason::TtlPolicyRestored,
        ),
        (
            ConditionType::OwnershipConflict,
            ClusterReason::OwnershipConflict,
            ClusterReason::OwnershipConflictResolved,
        ),
        (
            ConditionType::ChildrenApplied,
            ClusterReason::ChildApplyFailed,
            ClusterReason::ChildrenApplied,
        ),
    ] {
        let Some(new) = find(&desired.conditions, type_) else {
            continue;
        };
        let bad_status = conditions::status_str(type_.true_is_bad());
        let before = find(old, type_);
        let was_bad = before.map(|c| c.status == bad_status);
        let is_bad = new.status == bad_status;
        let (reason, warning) = match (was_bad, is_bad) {
            // A changed message of a rejected spec or a conflict is a new problem: tell again.
            (Some(true), true)
                if type_ != ConditionType::TtlPolicy && before.map(|c| &c.message) != Some(&new.message) =>
            {
                (bad_reason, true)
            }
            (Some(true), true) => continue,
            (_, true) => (bad_reason, true),
            (Some(true), false) => (good_reason, false),
            _ => continue,
        };
        tracing::info!(reason = reason.as_str(), "{}", new.message);
        events::publish_for_cluster(&ctx.recorder, cluster, reason, new.message.clone(), warning).await;
    }
}

/// Retry with per-object exponential backoff.
pub(crate) fn error_policy(cluster: Arc<RedlockCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(error);
    let delay = ctx.memory.backoff.failed(ObjectRef::from_obj(cluster.as_ref()));
    tracing::warn!(cluster = %cluster.name_any(), ns = ?cluster.namespace(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
