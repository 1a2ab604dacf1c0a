//! One reconcile of one RedlockCluster, in the order the safety argument needs:
//! observe → plan → **write status** → create/delete pods → release. Orchestration only;
//! every decision lives in a pure module (`plan`, `hold`, `status`, `resources`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::error::{Error, Result};
use crate::observe::SlotObservation;
use crate::plan::{PlanInput, plan};
use crate::redis_admin::AdminAccess;
use crate::resources::names::{ADMIN_USER, FIELD_MANAGER, REDIS_PORT, admin_secret_name, client_secret_name};
use crate::resources::secrets::{self, Credentials, client_user, generate_password, stored_password};
use crate::resources::{config, pod};
use crate::{apply, events, hold, observe, status};

pub async fn reconcile(cached: Arc<RedlockCluster>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.caches_synced.load(std::sync::atomic::Ordering::Acquire) {
        // An unsynced pod cache looks like "every pod deleted": never plan from it.
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let _timer = ctx.metrics.reconcile_started();
    let ns = cached
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(cached.name_any()))?;
    let api: Api<RedlockCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // Plan from the stored object, not the cache: the cache may not yet show the status this
    // operator wrote a moment ago, and planning from an older status could mistake its own
    // new pods for unknown ones.
    let Some(cluster) = api.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        // Children go with the owner (garbage collection by owner references).
        return Ok(Action::await_change());
    }
    let name = cluster.name_any();

    let credentials = credentials(&ctx, &cluster, &ns).await?;
    apply_config(&ctx, &cluster, &ns, &credentials).await?;

    let access = AdminAccess {
        admin_user: ADMIN_USER.into(),
        admin_password: credentials.admin_password.clone(),
        client_user: client_user(&cluster).into(),
        port: REDIS_PORT,
        timeout: ctx.probe_timeout,
    };
    let mut observed = observe::pods_by_slot(&cluster, &ctx.pods.state());
    probe_all(&access, &mut observed).await;

    let now = Timestamp::now();
    let previous = cluster
        .status
        .as_ref()
        .map(|s| s.members.clone())
        .unwrap_or_default();
    let plan = plan(
        &PlanInput {
            cluster: &name,
            instances: cluster.spec.instances,
            members: &previous,
            now,
            hold: hold::hold_for(&cluster.spec),
        },
        &observed,
    );

    // Write-ahead: holds and releases are on record before anything acts on them.
    let desired = status::compute(&cluster, plan.members.clone(), &observed, now);
    if cluster.status.as_ref() != Some(&desired) {
        write_status(&api, &cluster, &desired).await?;
    }
    for e in &plan.events {
        tracing::info!(cluster = %name, %ns, slot = e.slot, reason = e.reason, "{}", e.message);
        events::publish_for_slot(
            &ctx.recorder,
            &cluster,
            e.slot,
            e.reason,
            e.message.clone(),
            e.warning,
        )
        .await;
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for slot in &plan.create_pods {
        apply::create_pod(&pods, &pod::pod(&cluster, *slot)).await?;
    }
    for slot in &plan.delete_pods {
        apply::delete_pod(&pods, &crate::resources::names::slot_name(&name, *slot)).await?;
    }
    let mut released = false;
    for (slot, run_id) in &plan.releases {
        let Some(ip) = observed.get(slot).and_then(|o| o.pod_ip) else {
            continue;
        };
        match access.release(ip, run_id).await {
            Ok(()) => {
                released = true;
                let msg = format!("{name}-{slot}: released process {run_id} to lock clients");
                tracing::info!(cluster = %name, %ns, slot, "{msg}");
                events::publish_for_slot(&ctx.recorder, &cluster, *slot, "InstanceReleased", msg, false)
                    .await;
            }
            // Not an error of the reconcile: the next observation decides (a lost process
            // becomes a hold; an unreachable one is retried).
            Err(e) => tracing::warn!(cluster = %name, %ns, slot, error = %e, "release not done"),
        }
    }

    ctx.backoff.succeeded(&ObjectRef::from_obj(&cluster));
    // Come back when the next hold ends, exactly, or to probe again.
    let mut after = ctx.probe_period;
    if let Some(hold_end) = plan.next_hold_end {
        after = after.min(hold_end);
    }
    if plan.awaiting_process {
        after = after.min(Duration::from_millis(100));
    }
    if released {
        // Pick up the released pods' readiness soon.
        after = after.min(Duration::from_millis(300));
    }
    Ok(Action::requeue(after))
}

/// Passwords are generated once and then always read back: from the cache, or from the API
/// when the cache has not caught up, so a lagging cache never rotates them.
async fn credentials(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<Credentials> {
    let name = cluster.name_any();
    let admin = cached_or_get(&ctx.secrets, &ctx.client, ns, &admin_secret_name(&name)).await?;
    let client = cached_or_get(&ctx.secrets, &ctx.client, ns, &client_secret_name(&name)).await?;
    Ok(Credentials {
        admin_password: stored_password(admin.as_ref()).unwrap_or_else(generate_password),
        client_password: stored_password(client.as_ref()).unwrap_or_else(generate_password),
    })
}

async fn cached_or_get(
    store: &Store<Secret>,
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<Secret>> {
    if let Some(s) = store.get(&ObjectRef::new(name).within(ns)) {
        return Ok(Some((*s).clone()));
    }
    Ok(Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?)
}

async fn apply_config(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    credentials: &Credentials,
) -> Result<()> {
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    for desired in [
        secrets::admin_secret(cluster, credentials),
        secrets::client_secret(cluster, credentials),
        secrets::acl_secret(cluster, credentials),
    ] {
        let cached = ctx.secrets.get(&ObjectRef::from_obj(&desired));
        apply::apply_if_changed(&secrets_api, cached.as_deref(), desired).await?;
    }
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let desired = config::config_map(cluster);
    let cached = ctx.config_maps.get(&ObjectRef::from_obj(&desired));
    apply::apply_if_changed(&cm_api, cached.as_deref(), desired).await?;
    Ok(())
}

/// Probes every running member in parallel; failures are recorded, not raised.
async fn probe_all(access: &AdminAccess, observed: &mut BTreeMap<i32, SlotObservation>) {
    let probes = observed.iter().filter_map(|(slot, o)| {
        let running = matches!(o.pod, observe::PodState::Running { .. });
        let ip = o.pod_ip.filter(|_| running)?;
        Some(async move { (*slot, access.probe(ip).await) })
    });
    for (slot, result) in futures::future::join_all(probes).await {
        let o = observed.get_mut(&slot).expect("probed slots were observed");
        match result {
            Ok(info) => o.redis = Some(info),
            Err(e) => o.redis_error = Some(e),
        }
    }
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
    let delay = ctx.backoff.failed(ObjectRef::from_obj(cluster.as_ref()));
    tracing::warn!(cluster = %cluster.name_any(), ns = ?cluster.namespace(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
