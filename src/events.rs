//! Kubernetes Events on the RedlockCluster (what `kubectl describe rlc` shows). Publishing is
//! best effort: a failed event never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::crd::RedlockCluster;
use crate::model::Slot;
use crate::reasons::{ClusterReason, MemberReason};
use crate::resources::names::slot_name;

/// Publishes an event about one slot. The slot's Pod is the event's `related` object: the
/// recorder aggregates repeats by reason and objects, so without it the events of different
/// slots would be folded into one series showing the first slot's note.
pub async fn publish_for_slot(
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
pub async fn publish_for_cluster(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    reason: ClusterReason,
    note: String,
    warning: bool,
) {
    publish(recorder, cluster, reason.as_str(), note, warning, None).await;
}

/// Private, so that only a reason of the vocabulary (`crate::reasons`) is ever published.
async fn publish(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    reason: &'static str,
    note: String,
    warning: bool,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: related,
    };
    if let Err(e) = recorder.publish(&event, &cluster.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "cannot publish event");
    }
}
