//! The one shared context every reconcile receives.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use crate::backoff::Backoff;
use crate::metrics::Metrics;

pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Caches of the objects this operator manages (selected by `managed-by`), fed by the
    /// controller's own watches.
    pub pods: Store<Pod>,
    pub secrets: Store<Secret>,
    pub config_maps: Store<ConfigMap>,
    /// Set once every cache above has its first full list. kube's controller only waits for
    /// its own store; planning from an empty pod cache would read every member as lost.
    pub caches_synced: Arc<AtomicBool>,
    pub backoff: Backoff,
    /// How often every member's Redis is probed when nothing else happens.
    pub probe_period: Duration,
    /// Connect and reply timeout of admin connections.
    pub probe_timeout: Duration,
}
