//! Kubernetes Events on the RedlockCluster (what `kubectl describe rlc` shows). Publishing is
//! best effort: a failed event never fails a reconcile.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::crd::RedlockCluster;

pub async fn publish(
    recorder: &Recorder,
    cluster: &RedlockCluster,
    reason: &str,
    note: String,
    warning: bool,
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
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &cluster.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "cannot publish event");
    }
}
