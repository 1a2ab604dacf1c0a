//! One TTL audit period's I/O, shared by the reconcile (`reconcile::observation`) and the
//! watch over a resting cluster (`rest_watch`): which members' sweeps continue, their
//! samples (`SCAN` + `PTTL` on the kept probe connection), and the cluster's report once they
//! are absorbed. The bookkeeping itself is pure, in [`crate::hold::ttl_audit`]; the audit state is
//! the context's, by [`audit_key`], so whichever of the two runs a period, the other sees it as
//! taken.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::children::names::slot_name;
use crate::crd::model::Slot;
use crate::hold::ttl_audit::{self, ClusterAudit, Report};
use crate::reconcile::context::Context;
use crate::redis::admin::AdminAccess;

/// The key of a cluster's audit state: by name and UID, so the rest watch of a deleted
/// cluster (still running until it learns so) never takes the periods of a successor of the
/// same name, and by name first, so [`crate::reconcile::forget`] can drop every incarnation's
/// when it knows no UID.
pub(crate) fn audit_key(ns: &str, name: &str, uid: &str) -> String {
    format!("{ns}/{name}/{uid}")
}

/// A member the audit reads: a slot of the spec whose process answered and lets lock clients
/// in. A new run id starts a new sweep.
pub(crate) struct Serving<'a> {
    pub slot: Slot,
    pub run_id: String,
    pub ip: IpAddr,
    /// How its process is reached (TLS or plain, its pod's CA, its client user).
    pub access: &'a AdminAccess,
}

/// The audit's last report and when its next period starts: what a caller gets when no period
/// is due.
pub(crate) type NotDue = (Option<Report>, Duration);

/// One member's sample: the keys read and the cursor to continue from, or why it failed.
pub(crate) type Sample = (Slot, Result<(Vec<ttl_audit::SampledKey>, u64), String>);

/// Where each serving member's sweep continues, when a period is due (and takes it: the
/// next is a period on); otherwise the last report and when the next period starts. The
/// lock is not held across the samples' I/O.
pub(crate) fn take_due(
    ctx: &Context,
    key: &str,
    serving: &[Serving<'_>],
    now: Instant,
) -> Result<Vec<(Slot, u64)>, NotDue> {
    with_audit(ctx, key, now, |audit| {
        if !audit.take_due(now, ctx.settings.ttl_audit_period) {
            let next = audit.next_due.saturating_duration_since(now);
            return Err((ttl_audit::report(&audit.members), next));
        }
        let ids: Vec<(Slot, String)> = serving.iter().map(|m| (m.slot, m.run_id.clone())).collect();
        Ok(audit.retain(&ids))
    })
}

/// Each member's next batch from its cursor, side by side, on the connections kept for
/// probes of cluster `uid`.
pub(crate) async fn sample(
    ctx: &Context,
    uid: &str,
    serving: &[Serving<'_>],
    cursors: Vec<(Slot, u64)>,
) -> Vec<Sample> {
    let kept = &ctx.memory.probe_connections;
    let samples = cursors.into_iter().filter_map(|(slot, cursor)| {
        let m = serving.iter().find(|m| m.slot == slot)?;
        Some(async move {
            let found = m
                .access
                .sample_ttls(m.ip, kept, uid, cursor, ctx.settings.ttl_audit_keys)
                .await;
            (slot, found)
        })
    });
    futures::future::join_all(samples).await
}

/// Adds a period's samples to each member's sweep (keys checked against `max_lock_ttl`, the
/// maxLockTTL in force) and returns the cluster's report. A sample of a slot the audit no
/// longer has (its member stopped serving meanwhile) is dropped.
pub(crate) fn absorb(
    ctx: &Context,
    key: &str,
    cluster: &str,
    results: Vec<Sample>,
    max_lock_ttl: Duration,
    now: Instant,
) -> Option<Report> {
    let max_ms = max_lock_ttl.as_millis() as u64;
    with_audit(ctx, key, now, |audit| {
        for (slot, result) in results {
            match (result, audit.members.get_mut(&slot)) {
                (Ok((batch, next)), Some(m)) => m.absorb(&slot_name(cluster, slot), &batch, next, max_ms),
                (Err(e), _) => {
                    tracing::debug!(cluster, slot = slot.index(), error = %e, "TTL audit sample failed")
                }
                _ => {}
            }
        }
        ttl_audit::report(&audit.members)
    })
}

/// Runs `f` on the cluster's audit (`key`), made when it has none yet, under the audits' lock.
fn with_audit<T>(ctx: &Context, key: &str, now: Instant, f: impl FnOnce(&mut ClusterAudit) -> T) -> T {
    let mut audits = ctx
        .memory
        .ttl_audits
        .lock()
        .expect("audit lock is never poisoned");
    f(audits
        .entry(key.to_owned())
        .or_insert_with(|| ClusterAudit::new(now)))
}
