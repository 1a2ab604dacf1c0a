//! Write-ahead: the decided status goes on record before anything acts on it. `OnRecord` is
//! the proof: only `persist` makes one, and `act` needs one, so acting on a decision whose
//! holds and releases are not on record does not compile.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use super::decide::Decision;
use crate::context::Context;
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::error::Result;
use crate::resources::names::FIELD_MANAGER;

/// A decision whose status is stored (or was already).
pub struct OnRecord {
    decision: Decision,
}

impl OnRecord {
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
}

pub async fn persist(
    ctx: &Context,
    api: &Api<RedlockCluster>,
    cluster: &RedlockCluster,
    decision: Decision,
) -> Result<OnRecord> {
    // A release that changes no status (one repeated after a crash left its process fenced)
    // is confirmed against the stored object all the same: the same status, applied on the
    // condition of the version it was planned from, is refused if the watch cache showed an
    // older version than the stored one (a lagging cache after a leader change), and costs
    // no write otherwise. Fences, creates and deletes need no such check: none can let a
    // client in.
    let unchanged = cluster.status.as_ref() == Some(&decision.status);
    if !unchanged || !decision.plan.releases.is_empty() {
        ctx.leadership.check()?;
        let written = api
            .patch_status(
                &cluster.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&status_patch(cluster, &decision.status)),
            )
            .await?;
        ctx.memory.status_writes.wrote(
            cluster.metadata.uid.as_deref().unwrap_or_default(),
            cluster.metadata.resource_version.as_deref(),
            written.metadata.resource_version.as_deref(),
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
