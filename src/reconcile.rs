//! One reconcile of one RedlockCluster, in the order the safety argument needs:
//! observe → plan → **write status** → create/delete pods → release. Orchestration only;
//! every decision lives in a pure module (`plan`, `hold`, `status`, `resources`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::crd::{MemberState, RedlockCluster, RedlockClusterStatus};
use crate::error::{Error, Result};
use crate::observe::SlotObservation;
use crate::plan::{PlanInput, plan};
use crate::redis_admin::AdminAccess;
use crate::resources::names::{
    ADMIN_USER, FIELD_MANAGER, LABEL_INSTANCE, REDIS_PORT, admin_secret_name, client_secret_name, slot_name,
};
use crate::resources::secrets::{self, Credentials, client_user, generate_password, stored_password};
use crate::resources::{config, endpoints, network_policy, pdb, pod, service};
use crate::{apply, events, failure_domains, hold, observe, rollout, status, ttl_audit, validate};

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
        forget(&ctx, &ns, &cached.name_any());
        return Ok(Action::await_change());
    };
    let name = cluster.name_any();
    if cluster.metadata.deletion_timestamp.is_some() {
        // Children go with the owner (garbage collection by owner references).
        forget(&ctx, &ns, &name);
        return Ok(Action::await_change());
    }

    // A spec the schema could not refuse: report it and change nothing that runs. Holds and
    // releases below still go on; they keep the existing members safe and serving.
    let rejections = validate::validate(&cluster.spec);
    let accepted = rejections.is_empty();
    let credentials = credentials(&ctx, &cluster, &ns).await?;
    ctx.leadership.check()?;
    if accepted {
        apply_config(&ctx, &cluster, &ns, &credentials).await?;
        apply_services(&ctx, &cluster, &ns).await?;
        let pdb_api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
        let desired_pdb = pdb::pod_disruption_budget(&cluster);
        apply::apply_if_changed(&pdb_api, &ctx.pod_disruption_budgets, desired_pdb).await?;
        apply_network_policy(&ctx, &cluster, &ns).await?;
    }

    let access = AdminAccess {
        admin_user: ADMIN_USER.into(),
        admin_password: credentials.admin_password.clone(),
        client_user: client_user(&cluster).into(),
        port: REDIS_PORT,
        timeout: ctx.probe_timeout,
        tls_ca: match tls_ca(&ctx, &cluster, &ns).await {
            // Without the CA nothing can be probed or released safely, so the reconcile stops
            // here; say why where the user looks (`kubectl describe`), not only in our log.
            Err(e @ Error::TlsSecret(_)) => {
                let note = format!("{e}; no instance is probed, released or replaced until it is fixed");
                events::publish_for_cluster(&ctx.recorder, &cluster, "TLSSecretInvalid", note, true).await;
                return Err(e);
            }
            other => other?,
        },
    };
    let mut observed = observe::pods_by_slot(&cluster, &ctx.pods.state());
    probe_all(&access, &mut observed).await;

    let (ttl_report, next_audit) = audit_ttls(&ctx, &cluster, &access, &observed).await;

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

    let mut plan = plan;
    rollout::pace_scaling(
        cluster.spec.instances,
        &previous,
        &plan.members,
        &observed,
        &mut plan.create_pods,
        &mut plan.delete_pods,
    );
    let rollout = rollout::decide(
        cluster.spec.instances,
        &plan.members,
        &observed,
        &rollout::spec_hash(&cluster.spec),
    );
    if !accepted {
        plan.create_pods.clear();
        plan.delete_pods.clear();
    } else if let Some(slot) = rollout.replace {
        // The hold starts when the old process is observed gone, as for any other loss.
        plan.delete_pods.push(slot);
        plan.events.push(crate::plan::MemberEvent {
            slot,
            reason: "RollingReplacement",
            message: format!(
                "{name}-{slot}: replacing for a spec change ({} left); the new process is held for {:?}",
                rollout.outdated.len(),
                hold::hold_for(&cluster.spec)
            ),
            warning: false,
        });
    }

    // Write-ahead: holds and releases are on record before anything acts on them.
    let findings = status::Findings {
        rejections,
        ttl: ttl_report,
        max_lock_ttl: cluster.spec.max_lock_ttl.to_string(),
        rollout,
        failure_domains: Some(placement(&ctx, &cluster, &observed)),
    };
    let desired = status::compute(&cluster, plan.members.clone(), &observed, &findings, now);
    if cluster.status.as_ref() != Some(&desired) {
        ctx.leadership.check()?;
        write_status(&api, &cluster, &desired).await?;
    }
    ctx.metrics
        .observe_members(&ns, &name, &desired.members, cluster.spec.instances, now);
    if let Some(r) = &findings.ttl {
        ctx.metrics.ttl_violations(&ns, &name, r.violations);
    }
    publish_condition_changes(&ctx, &cluster, &desired).await;
    for e in &plan.events {
        if e.reason == "InstanceLost" {
            ctx.metrics.instance_lost(&ns, &name);
        }
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

    if accepted {
        let serving = status::serving_slots(&desired.members, &observed, cluster.spec.instances);
        let desired_cm = endpoints::endpoints_config_map(&cluster, &serving);
        let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
        apply::apply_if_changed(&cm_api, &ctx.config_maps, desired_cm).await?;
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.leadership.check()?;
    for slot in &plan.create_pods {
        apply::create_pod(&pods, &pod::pod(&cluster, *slot)).await?;
    }
    for slot in &plan.delete_pods {
        apply::delete(&pods, &slot_name(&name, *slot)).await?;
    }
    let mut released = false;
    for (slot, run_id) in &plan.releases {
        let Some(ip) = observed.get(slot).and_then(|o| o.pod_ip) else {
            continue;
        };
        // No release once the lease may have passed to another process. The check is a point
        // in time: a release already under way can still land a little later. That is safe on
        // its own, because a release names the run_id whose hold ended and is sent on the
        // connection that just read that run_id, so it can never free a newer process.
        ctx.leadership.check()?;
        match access.release(ip, run_id).await {
            Ok(()) => {
                released = true;
                let hold_seconds = previous
                    .iter()
                    .find(|m| m.slot == *slot && m.state == MemberState::Held)
                    .and_then(|m| m.held_until.as_ref())
                    .map(|until| hold_length(until.0, hold::hold_for(&cluster.spec), now));
                ctx.metrics.released(&ns, &name, hold_seconds);
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
    after = after.min(next_audit);
    Ok(Action::requeue(after))
}

/// Members per node and zone, from the pods' nodes and the nodes' zone labels.
fn placement(
    ctx: &Context,
    cluster: &RedlockCluster,
    observed: &BTreeMap<i32, SlotObservation>,
) -> crate::crd::FailureDomains {
    let member_nodes: BTreeMap<i32, String> = observed
        .iter()
        .filter_map(|(slot, o)| Some((*slot, o.node.clone()?)))
        .collect();
    let node_zones: BTreeMap<String, String> = ctx
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

/// How long a hold that ends now lasted: from its (last) start, `heldUntil - hold`.
fn hold_length(held_until: Timestamp, hold: Duration, now: Timestamp) -> f64 {
    let started = held_until.as_microsecond() as f64 / 1e6 - hold.as_secs_f64();
    (now.as_microsecond() as f64 / 1e6 - started).max(0.0)
}

/// Drops what is kept in memory about a cluster that is gone.
fn forget(ctx: &Context, ns: &str, name: &str) {
    ctx.metrics.forget_cluster(ns, name);
    ctx.ttl_audits
        .lock()
        .expect("audit lock is never poisoned")
        .remove(&format!("{ns}/{name}"));
}

/// Events for conditions the user must act on, once per change (never once per reconcile:
/// repeating them would be an API write every period).
async fn publish_condition_changes(ctx: &Context, cluster: &RedlockCluster, desired: &RedlockClusterStatus) {
    let old = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let find = |list: &[Condition], t: &str| list.iter().find(|c| c.type_ == t).cloned();
    for (type_, bad_reason, good_reason) in [
        (status::SPEC_ACCEPTED, "SpecRejected", "SpecAccepted"),
        (status::TTL_POLICY, "TTLPolicyViolated", "TTLPolicyRestored"),
    ] {
        let Some(new) = find(&desired.conditions, type_) else {
            continue;
        };
        let before = find(old, type_);
        let (reason, warning) = match (before.as_ref().map(|c| c.status.as_str()), new.status.as_str()) {
            // A changed message of a rejected spec is a new problem: tell again.
            (Some("False"), "False")
                if type_ == status::SPEC_ACCEPTED
                    && before.as_ref().map(|c| &c.message) != Some(&new.message) =>
            {
                (bad_reason, true)
            }
            (Some("False"), "False") => continue,
            (_, "False") => (bad_reason, true),
            (Some("False"), "True") => (good_reason, false),
            _ => continue,
        };
        tracing::info!(cluster = %cluster.name_any(), reason, "{}", new.message);
        events::publish_for_cluster(&ctx.recorder, cluster, reason, new.message.clone(), warning).await;
    }
}

/// One TTL audit period, when due: continues each serving member's `SCAN` for a bounded
/// number of keys. Returns the cluster's report and when the next period starts.
async fn audit_ttls(
    ctx: &Context,
    cluster: &RedlockCluster,
    access: &AdminAccess,
    observed: &BTreeMap<i32, SlotObservation>,
) -> (Option<ttl_audit::Report>, Duration) {
    let key = format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    );
    let serving: Vec<(i32, String, std::net::IpAddr)> = observed
        .iter()
        .filter_map(|(slot, o)| {
            let info = o.redis.as_ref().filter(|i| i.client_enabled)?;
            Some((*slot, info.run_id.clone(), o.pod_ip?))
        })
        .filter(|(slot, _, _)| *slot < cluster.spec.instances)
        .collect();
    let now = std::time::Instant::now();
    let cursors = {
        let mut audits = ctx.ttl_audits.lock().expect("audit lock is never poisoned");
        let audit = audits
            .entry(key.clone())
            .or_insert_with(|| ttl_audit::ClusterAudit::new(now));
        if !audit.take_due(now, ctx.ttl_audit_period) {
            let next = audit.next_due.saturating_duration_since(now);
            return (ttl_audit::report(&audit.members), next);
        }
        let ids: Vec<(i32, String)> = serving.iter().map(|(s, id, _)| (*s, id.clone())).collect();
        audit.retain(&ids)
    };
    let samples = cursors.into_iter().filter_map(|(slot, cursor)| {
        let (_, _, ip) = serving.iter().find(|(s, _, _)| *s == slot)?;
        Some(async move { (slot, access.sample_ttls(*ip, cursor, ctx.ttl_audit_keys).await) })
    });
    let results = futures::future::join_all(samples).await;
    let max_ms = Duration::from(cluster.spec.max_lock_ttl).as_millis() as u64;
    let name = cluster.name_any();
    let mut audits = ctx.ttl_audits.lock().expect("audit lock is never poisoned");
    let audit = audits
        .entry(key)
        .or_insert_with(|| ttl_audit::ClusterAudit::new(now));
    for (slot, result) in results {
        match (result, audit.members.get_mut(&slot)) {
            (Ok((batch, next)), Some(m)) => m.absorb(&slot_name(&name, slot), &batch, next, max_ms),
            (Err(e), _) => tracing::debug!(cluster = %name, slot, error = %e, "TTL audit sample failed"),
            _ => {}
        }
    }
    (ttl_audit::report(&audit.members), ctx.ttl_audit_period)
}

/// Per-slot Services for slots 0..N and the headless Service; Services of removed slots go.
async fn apply_services(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let name = cluster.name_any();
    let desired = (0..cluster.spec.instances)
        .map(|slot| service::slot_service(cluster, slot))
        .chain([service::headless_service(cluster)]);
    for svc in desired {
        apply::apply_if_changed(&api, &ctx.services, svc).await?;
    }
    let retired = ctx.services.state().into_iter().filter(|s| {
        s.namespace().as_deref() == Some(ns)
            && s.labels().get(LABEL_INSTANCE) == Some(&name)
            && service::service_slot(s).is_some_and(|slot| slot >= cluster.spec.instances)
    });
    for svc in retired {
        apply::delete(&api, &svc.name_any()).await?;
    }
    Ok(())
}

/// The NetworkPolicy when the spec enables one; deleted (if this operator made it) when not.
async fn apply_network_policy(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<()> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), ns);
    match network_policy::network_policy(cluster, ctx.operator_namespace.as_deref()) {
        Some(desired) => {
            apply::apply_if_changed(&api, &ctx.network_policies, desired).await?;
        }
        None => {
            let name = network_policy::network_policy_name(&cluster.name_any());
            if ctx
                .network_policies
                .get(&ObjectRef::new(&name).within(ns))
                .is_some_and(|np| np.labels().get(LABEL_INSTANCE) == Some(&cluster.name_any()))
            {
                apply::delete(&api, &name).await?;
            }
        }
    }
    Ok(())
}

/// The CA of `spec.tls.secretName`, which the operator's connections trust. Read from the API
/// each time (the Secret is the user's, not labelled as the operator's, so not cached): a
/// read, never a write. Missing means the instances cannot start either; the reconcile fails
/// and is retried with backoff, and nothing is released meanwhile.
async fn tls_ca(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> Result<Option<Vec<u8>>> {
    let Some(tls) = &cluster.spec.tls else {
        return Ok(None);
    };
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(&tls.secret_name)
        .await?;
    let ca = secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(config::TLS_CA_KEY))
        .filter(|ca| !ca.0.is_empty())
        .ok_or_else(|| {
            Error::TlsSecret(format!(
                "Secret {ns}/{} has no {}",
                tls.secret_name,
                config::TLS_CA_KEY
            ))
        })?;
    Ok(Some(ca.0))
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
        apply::apply_if_changed(&secrets_api, &ctx.secrets, desired).await?;
    }
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    apply::apply_if_changed(&cm_api, &ctx.config_maps, config::config_map(cluster)).await?;
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
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&status_patch(cluster, status)),
    )
    .await?;
    Ok(())
}

/// The status apply patch, conditional on the resourceVersion the plan was made from: a write
/// computed from an older view (a second operator replica that has not yet noticed it lost
/// the lease, or a reconcile that raced with another write) is refused with 409 Conflict
/// instead of overwriting newer hold records; the reconcile then retries from a fresh read.
pub fn status_patch(cluster: &RedlockCluster, status: &RedlockClusterStatus) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": RedlockCluster::api_version(&()),
        "kind": RedlockCluster::kind(&()),
        "metadata": {"resourceVersion": cluster.metadata.resource_version},
        "status": status,
    })
}

/// Retry with per-object exponential backoff.
pub fn error_policy(cluster: Arc<RedlockCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(error);
    let delay = ctx.backoff.failed(ObjectRef::from_obj(cluster.as_ref()));
    tracing::warn!(cluster = %cluster.name_any(), ns = ?cluster.namespace(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
