//! Kubernetes Events on the RedlockCluster (what `kubectl describe rlc` shows). Publishing is
//! best effort: a failed event never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use crate::children::names::slot_name;
use crate::crd::RedlockCluster;
use crate::crd::model::Slot;
use crate::crd::reasons::{ClusterReason, MemberReason};
use crate::runtime::recorder::{Occurrence, Recorder};

/// Publishes an event about one slot. The slot's Pod is the event's `related` object, so that
/// `kubectl describe pod` shows it too and a series never folds two slots together.
pub(crate) async fn publish_for_slot(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    slot: Slot,
    reason: MemberReason,
    note: String,
    warning: bool,
) {
    let pod = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(slot_name(
            &cluster.metadata.name.clone().unwrap_or_default(),
            slot,
        )),
        namespace: cluster.metadata.namespace.clone(),
        ..Default::default()
    };
    publish(recorder, cluster, reason.as_str(), note, warning, Some(pod)).await;
}

/// Publishes an event about the cluster as a whole (spec, TTL policy, credentials, rotation).
pub(crate) async fn publish_for_cluster(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    reason: ClusterReason,
    note: String,
    warning: bool,
) {
    publish(recorder, cluster, reason.as_str(), note, warning, None).await;
}

/// Private, so that only a reason of the vocabulary (`crate::crd::reasons`) is ever published.
async fn publish(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    reason: &'static str,
    note: String,
    warning: bool,
    related: Option<ObjectReference>,
) {
    let occurrence = Occurrence {
        warning,
        reason,
        note,
        regarding: cluster.object_ref(&()),
        related,
    };
    if let Err(e) = recorder.publish(&occurrence).await {
        tracing::warn!(error = %e, reason, "cannot publish event");
    }
}
