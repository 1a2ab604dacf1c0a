//! Applying the cluster's child objects other than pods: Secrets, redis.conf, Services, the
//! PodDisruptionBudget and the NetworkPolicy. A failure here is reported, never fatal: holds,
//! releases and the status write go on, because a quota or a webhook refusing a Service must
//! not keep a held member from being released.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::inputs::Inputs;
use crate::children::desired::{self, Desired, SecretSet};
use crate::children::memo::Fingerprint;
use crate::children::names::{LABEL_INSTANCE, slot_name};
use crate::children::{network_policy, secrets, service};
use crate::crd::RedlockCluster;
pub(crate) use crate::decide::children_report::ChildrenReport;
use crate::error::{Error, Result};
use crate::reconcile::apply;
use crate::reconcile::context::Context;

/// An apply's outcome on the report (the outcome is this layer's type, the report pure data).
trait Record {
    fn record(&mut self, what: impl FnOnce() -> String, outcome: Result<apply::Applied>) -> Result<bool>;
}

impl Record for ChildrenReport {
    /// Records the outcome of one apply of `what` (`<Kind> <name>`); a lost leadership stops
    /// the reconcile.
    fn record(&mut self, what: impl FnOnce() -> String, outcome: Result<apply::Applied>) -> Result<bool> {
        self.unsettled |= !matches!(outcome, Ok(apply::Applied::InCache));
        if matches!(outcome, Ok(apply::Applied::Restored)) {
            self.restored.push(what());
        }
        match outcome {
            Ok(_) => Ok(true),
            Err(Error::NotLeader) => Err(Error::NotLeader),
            Err(e @ Error::OwnedByOther { .. }) => {
                self.conflicts.push(e.to_string());
                Ok(false)
            }
            Err(e) => {
                self.problems.push(e.to_string());
                Ok(false)
            }
        }
    }
}

/// Applies every child; with a rejected spec, none (nothing that runs is changed). Skipped
/// when nothing they are built from or compared with changed since every one of them was
/// found current (`children_memo`).
pub(crate) async fn apply(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
) -> Result<ChildrenReport> {
    if !inputs.accepted() {
        return Ok(ChildrenReport::default());
    }
    let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
    let fingerprint = Fingerprint::of(cluster, &inputs.credentials);
    // Read before applying: an event during the apply leaves the memo behind it.
    let version = ctx.caches.child_versions.of(ns, &cluster.name_any());
    // A rotation's conditional write is decided afresh each time (its read is not the cache's).
    let memo = inputs
        .credentials
        .admin_read_at
        .is_none()
        .then_some(&ctx.memory.children);
    if memo.is_some_and(|m| m.current(uid, fingerprint, version)) {
        return Ok(ChildrenReport::current());
    }
    let report = apply_all(ctx, cluster, ns, inputs).await?;
    publish_restored(ctx, cluster, &report).await;
    match memo {
        Some(memo) if report.all_current() => memo.found_current(uid, fingerprint, version),
        _ => ctx.memory.children.unsettled(uid),
    }
    Ok(report)
}

/// A Warning event per child put back after a hand edit: an edit of a Service's selector or
/// ports, of the PDB or the NetworkPolicy, of redis.conf or a Secret is undone, and whoever
/// made it must learn why their change did not stay.
pub(crate) async fn publish_restored(ctx: &Context, cluster: &RedlockCluster, report: &ChildrenReport) {
    for what in &report.restored {
        let note =
            format!("{what} was edited outside the operator; the fields the operator sets were put back");
        tracing::warn!("{note}");
        crate::runtime::events::publish_for_cluster(
            &ctx.recorder,
            cluster,
            crate::crd::reasons::ClusterReason::ChildRestored,
            note,
            true,
        )
        .await;
    }
}

/// `<Kind> <name>` of a child, for reports and events.
fn describe<K: Resource<DynamicType = ()>>(k: &K) -> impl FnOnce() -> String + use<K> {
    let what = format!("{} {}", K::kind(&()), k.meta().name.clone().unwrap_or_default());
    move || what
}

async fn apply_all(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &Inputs,
) -> Result<ChildrenReport> {
    let mut report = ChildrenReport::default();
    ctx.leadership.check()?;
    // Read before the Secrets are written: `<name>-client` is one of the records read.
    let published = published(ctx, cluster, ns);
    let operator_namespace = ctx.settings.operator_namespace.as_deref();
    // Every field by name: a kind `children::desired` builds and this step does not apply
    // does not compile.
    let Desired {
        secrets,
        config_map,
        services,
        pod_disruption_budget,
        network_policy,
    } = desired::desired(cluster, &inputs.credentials, published, operator_namespace);
    // Over the `<name>-admin` the credentials were read from, when read fresh (a rotation runs
    // or is asked for): the rotation's steps are recorded there, and this write must not put
    // back an older step another replica has since replaced.
    let read_at = inputs.credentials.admin_read_at.as_deref();
    let mut config_ready = apply_secret_set(ctx, ns, secrets, read_at, &mut report).await?;
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    config_ready &= report.record(
        describe(&config_map),
        apply::apply_if_changed(&cm_api, &ctx.caches.config_maps, config_map).await,
    )?;
    report.config_ready = config_ready;

    let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    for svc in services {
        report.record(
            describe(&svc),
            apply::apply_if_changed(&svc_api, &ctx.caches.services, svc).await,
        )?;
    }
    let keep = desired::slots_with_service(cluster, published);
    for (name, uid) in retired_services(ctx, cluster, ns, keep) {
        // Only the object judged retired: not a newer one that took the name since.
        let deleted = apply::delete(&svc_api, &name, uid.as_deref()).await;
        report.record(
            || format!("Service {name}"),
            deleted.map(|_| apply::Applied::Written),
        )?;
    }
    let pdb_api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
    report.record(
        describe(&pod_disruption_budget),
        apply::apply_if_changed(
            &pdb_api,
            &ctx.caches.pod_disruption_budgets,
            pod_disruption_budget,
        )
        .await,
    )?;
    let name = network_policy::network_policy_name(&cluster.name_any());
    report.record(
        || format!("NetworkPolicy {name}"),
        apply_network_policy(ctx, cluster, ns, network_policy).await,
    )?;
    Ok(report)
}

/// The list clients are told, as on record: it changes only after the status says so (a
/// scale-down's shorter list only after its removed members were held), and without that
/// record, what `<name>-endpoints` and `<name>-client` tell. Read before `<name>-client` is
/// written: it is one of the two objects read.
fn published(ctx: &Context, cluster: &RedlockCluster, ns: &str) -> i32 {
    crate::decide::resize::published_for_children(cluster, super::observation::told(ctx, cluster, ns))
}

/// The three Secrets of `credentials` (a password rotation's step), as [`apply_secret_set`]
/// writes them.
pub(crate) async fn apply_secrets(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    credentials: &secrets::Credentials,
    admin_read_at: Option<&str>,
    report: &mut ChildrenReport,
) -> Result<bool> {
    let set = desired::secret_set(cluster, credentials, published(ctx, cluster, ns));
    apply_secret_set(ctx, ns, set, admin_read_at, report).await
}

/// The three Secrets of one set of credentials, in the order that keeps every password on
/// record before anything uses it: `<name>-admin` (the operator's copy of both),
/// `<name>-client`, then the ACL file. Whether all three are this cluster's and current. With
/// `admin_read_at`, `<name>-admin` is written only if it is still at that resourceVersion,
/// and nothing after it is written when it was not.
async fn apply_secret_set(
    ctx: &Context,
    ns: &str,
    set: SecretSet,
    admin_read_at: Option<&str>,
    report: &mut ChildrenReport,
) -> Result<bool> {
    let SecretSet { admin, client, acl } = set;
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let cache = &ctx.caches.secrets;
    let ready = report.record(
        describe(&admin),
        apply::apply_if_changed_at(&secrets_api, cache, admin, admin_read_at).await,
    )?;
    // `<name>-client` is written only over the operator's copy on record: with auth off it
    // carries no password, and a cluster from before the operator kept a copy (an upgrade)
    // would lose the client password's only copy if `<name>-admin` was refused.
    if !ready {
        return Ok(false);
    }
    let mut ready = report.record(
        describe(&client),
        apply::apply_if_changed(&secrets_api, cache, client).await,
    )?;
    // The ACL file holds the hashes of those passwords: written only once both Secrets are
    // this cluster's, or a password that no Secret keeps would be written, anew each time.
    if ready {
        ready &= report.record(
            describe(&acl),
            apply::apply_if_changed(&secrets_api, cache, acl).await,
        )?;
    }
    Ok(ready)
}

/// This cluster's Services that are no longer wanted: slots at or above N, and the headless
/// Service under its old name `<cluster>` (it is `<cluster>-headless` now, because `<cluster>`
/// is slot k's Service name of a cluster named like `<cluster>` minus a `-k` suffix). A slot
/// Service is judged by its name as well as its slot label: a label edited by hand (which the
/// apply puts back) must not get a wanted Service deleted, and re-created with a new address.
/// (name, uid) of each.
fn retired_services(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    keep: i32,
) -> Vec<(String, Option<String>)> {
    let name = cluster.name_any();
    let owner = service::headless_service(cluster);
    ctx.caches
        .services
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(ns)
                && s.labels().get(LABEL_INSTANCE) == Some(&name)
                && apply::ownership(s.as_ref(), &owner) == apply::Ownership::Ours
        })
        .filter(|s| match service::service_slot(s) {
            Some(slot) => !slot.within(keep) && s.name_any() == slot_name(&name, slot),
            None => s.name_any() == name,
        })
        .map(|s| (s.name_any(), s.uid()))
        .collect()
}

/// The NetworkPolicy when the spec enables one; deleted (if this cluster made it) when not.
async fn apply_network_policy(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    desired: Option<NetworkPolicy>,
) -> Result<apply::Applied> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), ns);
    match desired {
        Some(desired) => apply::apply_if_changed(&api, &ctx.caches.network_policies, desired).await,
        None => {
            let name = network_policy::network_policy_name(&cluster.name_any());
            let ours = ctx
                .caches
                .network_policies
                .get(&ObjectRef::new(&name).within(ns))
                .filter(|np| np.labels().get(LABEL_INSTANCE) == Some(&cluster.name_any()))
                .filter(|np| {
                    np.owner_references()
                        .iter()
                        .any(|o| Some(&o.uid) == cluster.meta().uid.as_ref())
                });
            match ours {
                Some(np) => apply::delete(&api, &name, np.uid().as_deref())
                    .await
                    .map(|_| apply::Applied::Written),
                None => Ok(apply::Applied::InCache),
            }
        }
    }
}
