//! The one shared context every reconcile receives.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::reflector::Store;

use crate::backoff::Backoff;
use crate::metrics::Metrics;

pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Cache of the pods this operator manages (selected by `managed-by`), fed by the
    /// controller's own pod watch.
    pub pods: Store<Pod>,
    pub backoff: Backoff,
}
