//! The one pod watch of the kubelet and the index of pod workers.
//!
//! Every pod event is routed by `spec.nodeName` (filtered here, one watch for all nodes)
//! to the worker of that pod, created on first sight. Pods of a lost node are only
//! remembered, so that restoring the node can pick them up again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use super::{Shared, lock, pod_worker};

/// A running pod worker.
pub struct WorkerHandle {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub main_pid: Arc<AtomicU32>,
    pub task: JoinHandle<()>,
    updates: watch::Sender<Option<Arc<Pod>>>,
}

/// Pods bound to our nodes (latest version) and their workers, by UID.
#[derive(Default)]
pub struct PodIndex {
    pods: HashMap<String, Arc<Pod>>,
    pub workers: HashMap<String, WorkerHandle>,
}

impl PodIndex {
    pub fn take_workers_on(&mut self, node: &str) -> Vec<WorkerHandle> {
        let uids: Vec<String> = self
            .workers
            .values()
            .filter(|h| h.node == node)
            .map(|h| h.uid.clone())
            .collect();
        uids.iter().filter_map(|uid| self.workers.remove(uid)).collect()
    }

    pub fn take_all_workers(&mut self) -> Vec<WorkerHandle> {
        self.workers.drain().map(|(_, h)| h).collect()
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn spawn_worker(shared: &Arc<Shared>, index: &mut PodIndex, uid: &str, pod: Arc<Pod>) {
    let (updates, rx) = watch::channel(Some(pod.clone()));
    let main_pid = Arc::new(AtomicU32::new(0));
    let handle = WorkerHandle {
        uid: uid.to_string(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        node: node_of(&pod).unwrap_or_default().to_string(),
        main_pid: main_pid.clone(),
        task: tokio::spawn(pod_worker::run(shared.clone(), pod, rx, main_pid)),
        updates,
    };
    index.workers.insert(uid.to_string(), handle);
}

/// Routes a pod to its worker; returns its UID when it is bound to one of our nodes.
fn on_pod(shared: &Arc<Shared>, pod: Pod) -> Option<String> {
    let node = node_of(&pod)?.to_string();
    shared.node_ip(&node)?;
    let uid = pod.metadata.uid.clone()?;
    let pod = Arc::new(pod);
    let mut index = lock(&shared.pods);
    index.pods.insert(uid.clone(), pod.clone());
    if shared.is_lost(&node) {
        return Some(uid);
    }
    match index.workers.get(&uid) {
        Some(h) => {
            h.updates.send_replace(Some(pod));
        }
        None => spawn_worker(shared, &mut index, &uid, pod),
    }
    Some(uid)
}

/// The pod is gone from the API: its worker kills what is left and cleans up; a pod
/// without worker (on a lost node) only has its address to give back.
fn on_pod_gone(shared: &Arc<Shared>, uid: &str) {
    let mut index = lock(&shared.pods);
    let pod = index.pods.remove(uid);
    match index.workers.remove(uid) {
        Some(h) => {
            h.updates.send_replace(None);
        }
        None => {
            drop(index);
            shared.procs.kill_owner(uid);
            shared.release_pod(uid);
            if let Some(pod) = pod {
                let meta = &pod.metadata;
                let dir = format!(
                    "{}_{}_{uid}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                );
                let _ =
                    std::fs::remove_dir_all(shared.config.work_dir.join("pods").join(dir).join("volumes"));
            }
        }
    }
}

/// Starts workers for the known pods of `node` that have none (after a restore).
pub fn start_workers_on(shared: &Arc<Shared>, node: &str) {
    let mut index = lock(&shared.pods);
    let pods: Vec<(String, Arc<Pod>)> = index
        .pods
        .iter()
        .filter(|(uid, p)| node_of(p) == Some(node) && !index.workers.contains_key(*uid))
        .map(|(uid, p)| (uid.clone(), p.clone()))
        .collect();
    for (uid, pod) in pods {
        spawn_worker(shared, &mut index, &uid, pod);
    }
}

/// Watches all pods until aborted. After a re-list, pods that vanished meanwhile are
/// treated as deleted.
pub async fn watch_pods(shared: Arc<Shared>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut relisted: Option<HashSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => relisted = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) => {
                if let (Some(uid), Some(seen)) = (on_pod(&shared, pod), relisted.as_mut()) {
                    seen.insert(uid);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relisted.take() {
                    let vanished: Vec<String> = lock(&shared.pods)
                        .pods
                        .keys()
                        .filter(|uid| !seen.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in vanished {
                        on_pod_gone(&shared, &uid);
                    }
                }
            }
            Ok(watcher::Event::Apply(pod)) => {
                on_pod(&shared, pod);
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    on_pod_gone(&shared, uid);
                }
            }
            Err(e) => warn!("pod watch: {e}"),
        }
    }
}
