//! Step 1 of a reconcile, for an elected operator: whether the cluster is this operator's to
//! act on (`crate::runtime::lease_owner`, safety review 3, N6). A cluster whose status names another
//! operator's Lease is left alone — no write, no fence, no release, no pod change — while that
//! Lease may be held; this reads that Lease, times it as the election times its own, and says
//! why it waits (Warning `LedByAnotherOperator`, once per change) or that it took over
//! (`LeaseTakenOver`). The takeover itself is the next status write, which names this
//! operator's Lease and is conditional on the version planned from like every status write.

use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;

use crate::children::names::FIELD_MANAGER;
use crate::crd::RedlockCluster;
use crate::crd::reasons::ClusterReason;
use crate::reconcile::context::Context;
use crate::runtime::events;
use crate::runtime::leader::LeaseRecord;
use crate::runtime::lease_owner::{self, Owner, Verdict};

/// How often a cluster led by another operator's Lease reads that Lease again: a takeover
/// comes at most this long after the Lease is free (one GET per cluster per period, only
/// while two operators run).
const FOREIGN_LEASE_RECHECK: Duration = Duration::from_secs(2);

/// `Some(requeue)` when this reconcile must stop here: another operator leads `cluster`, or
/// it names no Lease and this one claimed it. `None` when it is this operator's (no election;
/// its own Lease named; the named one taken over).
pub(crate) async fn led_by_another(ctx: &Context, cluster: &RedlockCluster) -> Option<Action> {
    let own = ctx.settings.lease.as_deref()?;
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    let recorded = cluster.status.as_ref().and_then(|s| s.lease.as_deref());
    let (namespace, name) = match lease_owner::owner(recorded, own) {
        Owner::Ours => {
            ctx.memory.foreign_leases.forget_report(uid);
            return None;
        }
        Owner::Unclaimed => return Some(claim(ctx, cluster, own).await),
        Owner::Other { namespace, name } => (namespace, name),
    };
    let key = lease_owner::lease_key(namespace, name);
    let read = Api::<Lease>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await;
    let now = Instant::now();
    let note = match read {
        Err(e) => format!(
            "status.lease names the Lease {key}, which this operator ({own}) cannot read ({e}): it leaves the cluster alone while that Lease may be held; remove status.lease (kubectl patch --subresource=status) to hand the cluster over"
        ),
        Ok(lease) => {
            let record = lease.as_ref().map(LeaseRecord::from_lease);
            let since = ctx
                .memory
                .foreign_leases
                .unchanged_since(&key, record.as_ref(), now);
            match lease_owner::judge(record.as_ref(), since, now) {
                Verdict::Wait { holder } => format!(
                    "led by the operator holding the Lease {key} ({holder}); this operator ({own}) acts once that Lease is given up or goes unrenewed for its duration"
                ),
                Verdict::TakeOver => {
                    let why = match &record {
                        None => "does not exist",
                        Some(r) if r.holder.is_none() => "was given up",
                        Some(_) => "went unrenewed for its whole duration",
                    };
                    let note = format!(
                        "the Lease {key} that status.lease named {why}: this operator ({own}) takes the cluster over"
                    );
                    report_once(ctx, cluster, ClusterReason::LeaseTakenOver, note).await;
                    return None;
                }
            }
        }
    };
    report_once(ctx, cluster, ClusterReason::LedByAnotherOperator, note).await;
    Some(Action::requeue(FOREIGN_LEASE_RECHECK))
}

/// Logs and publishes `note` about `cluster` unless it is what was last reported about it
/// (a wait lasts many reconciles; a takeover is retried until its write lands). A wait is a
/// Warning: nothing is done for the cluster meanwhile.
async fn report_once(ctx: &Context, cluster: &RedlockCluster, reason: ClusterReason, note: String) {
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    if !ctx.memory.foreign_leases.first_report(uid, &note) {
        return;
    }
    let warning = reason == ClusterReason::LedByAnotherOperator;
    if warning {
        tracing::warn!(cluster = %cluster.name_any(), "{note}");
    } else {
        tracing::info!(cluster = %cluster.name_any(), "{note}");
    }
    events::publish_for_cluster(&ctx.recorder, cluster, reason, note, warning).await;
}

/// Names this operator's Lease in the status of a cluster that names none, conditional on the
/// version read (of two operators claiming at once, one write is refused with 409 and that
/// operator then finds the other's Lease). Nothing else is done for the cluster before: its
/// Secrets, pods and holds are one operator's from the start. The claim makes no record of
/// this process's own (`StatusWrites`): records it did not plan are never released from.
async fn claim(ctx: &Context, cluster: &RedlockCluster, own: &str) -> Action {
    let result = async {
        ctx.leadership.check()?;
        let api: Api<RedlockCluster> = Api::namespaced(
            ctx.client.clone(),
            cluster.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let mut status = serde_json::json!({"lease": own});
        // A status with no conditions reads as done to kstatus (Flux, Helm's --wait) until the
        // first reconcile writes its own, which under load came seconds later: the claim of a
        // new cluster says it is being taken up (`Reconciling`, not `Ready`).
        if cluster.status.as_ref().is_none_or(|s| s.conditions.is_empty()) {
            status["conditions"] = serde_json::to_value(crate::crd::conditions::merge(
                &[],
                &crate::decide::kstatus::conditions(&[]),
                cluster.metadata.generation,
                ctx.clock.now().wall,
            ))?;
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": cluster.metadata.resource_version},
            "status": status,
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.patch_status(&cluster.name_any(), &params, &Patch::Merge(&patch))
            .await?;
        Ok::<_, crate::error::Error>(())
    }
    .await;
    match result {
        Ok(()) => {
            tracing::info!(cluster = %cluster.name_any(), lease = own, "claimed for this operator's Lease")
        }
        // A 409: someone wrote first (another operator's claim, a user); the next reconcile
        // plans from what the cache shows then.
        Err(e) => tracing::warn!(cluster = %cluster.name_any(), error = %e, "claim not written"),
    }
    Action::requeue(CLAIM_RETRY)
}

/// How soon a reconcile looks again after a claim (the watch event is normally a few
/// milliseconds away and wakes it sooner).
const CLAIM_RETRY: Duration = Duration::from_millis(200);
