//! Write-ahead: the decided status goes on record before anything acts on it. `OnRecord` is
//! the proof: only `persist` makes one, and `act` needs one, so acting on a decision whose
//! holds and releases are not on record does not compile.
//!
//! One exception, with a proof of its own: a release whose hold is on record in this
//! process's own last status write, with nothing newer in the cache, may go before its `Ready`
//! write ([`AheadOfWrite`], docs/design.md §2 "Releasing ahead of the write"): the write would
//! only confirm what that record already says, and waiting for it made releases late by the
//! API server's write latency.
//!
//! Fences need no record first (`act::fence_ahead`, docs/design.md §6 "Fences ahead of the
//! write"): a fence only shuts clients out. What a fence whose write does not land needs is
//! that nothing undoes it before its hold is on record (`crate::hold::fence_ahead`).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::children::names::FIELD_MANAGER;
use crate::crd::model::Slot;
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::decide::Decision;
use crate::error::Result;
use crate::hold::release_ahead;
use crate::reconcile::context::Context;

/// A decision whose status is stored (or was already).
pub(crate) struct OnRecord {
    decision: Decision,
}

impl OnRecord {
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
}

/// `must_write`: write even an unchanged status (the stored one differs from the `cluster`
/// planned from: releases whose write did not land, `release_ahead::as_released`).
pub(crate) async fn persist(
    ctx: &Context,
    api: &Api<RedlockCluster>,
    cluster: &RedlockCluster,
    decision: Decision,
    must_write: bool,
) -> Result<OnRecord> {
    // A release that changes no status (one repeated after a crash left its process fenced)
    // is confirmed against the stored object all the same: the same status, applied on the
    // condition of the version it was planned from, is refused if the watch cache showed an
    // older version than the stored one (a lagging cache after a leader change), and costs
    // no write otherwise. Fences (sent before this write), creates and deletes need no such
    // check: none can let a client in.
    let unchanged = cluster.status.as_ref() == Some(&decision.status);
    if must_write || !unchanged || !decision.plan.releases.is_empty() {
        ctx.leadership.check()?;
        let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
        let skipped = ctx.clock.now().skipped;
        let mut written = api
            .patch_status(
                &cluster.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&status_patch(cluster, &decision.status)),
            )
            .await
            .inspect_err(|_| ctx.memory.status_writes.unknown(uid))?;
        // Kept until the cache shows it (what a reconcile plans its fences from meanwhile);
        // no plan reads managedFields.
        written.metadata.managed_fields = None;
        let version = written.metadata.resource_version.clone();
        ctx.memory.status_writes.wrote(
            uid,
            cluster.metadata.resource_version.as_deref(),
            version.as_deref(),
            skipped,
            Some(std::sync::Arc::new(written)),
        );
    }
    Ok(OnRecord { decision })
}

/// The status apply patch (the operator owns every status field, so fields it no longer sets
/// disappear), conditional on the resourceVersion the plan was made from: a write computed
/// from an older view (a second operator replica that has not yet noticed it lost the lease,
/// or a reconcile that raced with another write) is refused with 409 Conflict instead of
/// overwriting newer hold records; the reconcile then retries from the watch cache once it
/// shows the newer version.
pub fn status_patch(cluster: &RedlockCluster, status: &RedlockClusterStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": RedlockCluster::api_version(&()),
        "kind": RedlockCluster::kind(&()),
        "metadata": {"resourceVersion": cluster.metadata.resource_version},
        "status": status,
    })
}

/// Releases that may be sent before the decision's status write; only [`ahead_of_write`]
/// makes one.
pub(crate) struct AheadOfWrite {
    releases: Vec<(Slot, String)>,
}

impl AheadOfWrite {
    pub fn releases(&self) -> &[(Slot, String)] {
        &self.releases
    }
}

/// The decision's releases that may go before its status write: none unless the cache shows
/// exactly this process's own last status write (so the records planned from are its own and
/// nothing newer reached the cache: a user's edit of spec, metadata or status moves the
/// version, and falls back to write-ahead) with no forward step of its clock since (a
/// suspension); of those, the ones ending a hold recorded for the same process
/// (`release_ahead::ending_recorded_holds`).
///
/// What can still come between the record and the release is a write the cache does not show
/// yet. No other operator process writes: this one has led since its record (an operator that
/// loses its lease exits, and every write checks the lease), and an operator elected with
/// another Lease leaves a cluster whose status names this one alone until this Lease is free
/// (`crate::runtime::lease_owner`). A user's write in that moment
/// can only ask for more than the record: a raised maxLockTTL (clients use a raise only once
/// `status.hold` shows it, §8.1), a scale-down (the shorter list is published only after the
/// removed members are fenced again, §8.6), a maintenance fence (applied at the next
/// reconcile). None of those is a lock a client holds under this hold's terms.
pub(crate) fn ahead_of_write(ctx: &Context, cluster: &RedlockCluster, decision: &Decision) -> AheadOfWrite {
    let mut releases =
        release_ahead::ending_recorded_holds(cluster.recorded_members(), &decision.plan.releases);
    // Most reconciles release nothing: the clock is read and the memory locked only for those
    // that do.
    if !releases.is_empty() && !still_own(ctx, cluster) {
        releases.clear();
    }
    AheadOfWrite { releases }
}

/// Whether `cluster` (the snapshot planned from) is this process's own last status write of
/// it, with no forward step of its clock since (a suspension) that a successor could have
/// used: checked before the ahead releases are chosen and again before each is sent. The
/// second check reads only the clock afresh (the snapshot and the memory of own writes do not
/// change within a reconcile): it catches a suspension during the releases, not an edit.
pub(crate) fn still_own(ctx: &Context, cluster: &RedlockCluster) -> bool {
    ctx.leadership
        .no_successor_within(crate::reconcile::context::OWN_WRITE_STEP_LIMIT)
        && ctx.memory.status_writes.shows_own_last_write(
            cluster.metadata.uid.as_deref().unwrap_or_default(),
            cluster.metadata.resource_version.as_deref(),
            // A fresh reading: a suspension since the last one shows only in a new reading.
            ctx.clock.now().skipped,
        )
}
