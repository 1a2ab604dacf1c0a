//! One reconcile of one RedlockCluster: observe → compute status → write it if it changed.
//! Orchestration only; every decision lives in a pure module.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::error::{Error, Result};
use crate::resources::names::FIELD_MANAGER;
use crate::{observe, status};

/// Safety net: look again even when no watch event arrives. Costs no writes when nothing
/// changed.
const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(cluster: Arc<RedlockCluster>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    let ns = cluster
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(cluster.name_any()))?;

    let observed = observe::observe(&cluster, &ctx.pods);
    let desired = status::compute(&cluster, &observed, Timestamp::now());
    if cluster.status.as_ref() != Some(&desired) {
        write_status(&Api::namespaced(ctx.client.clone(), &ns), &cluster, &desired).await?;
        tracing::info!(cluster = %cluster.name_any(), %ns, ready = ?desired.ready_instances, "status updated");
    }
    ctx.backoff
        .succeeded(&kube::runtime::reflector::ObjectRef::from_obj(cluster.as_ref()));
    Ok(Action::requeue(RESYNC))
}

/// Server-side apply of the whole status: the operator owns every status field, so fields it
/// no longer sets disappear.
async fn write_status(
    api: &Api<RedlockCluster>,
    cluster: &RedlockCluster,
    status: &RedlockClusterStatus,
) -> Result<()> {
    let patch = serde_json::json!({
        "apiVersion": RedlockCluster::api_version(&()),
        "kind": RedlockCluster::kind(&()),
        "status": status,
    });
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Retry with per-object exponential backoff.
pub fn error_policy(cluster: Arc<RedlockCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(error);
    let delay = ctx
        .backoff
        .failed(kube::runtime::reflector::ObjectRef::from_obj(cluster.as_ref()));
    tracing::warn!(cluster = %cluster.name_any(), ns = ?cluster.namespace(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
