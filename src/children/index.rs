//! Which objects of a watch cache belong to which cluster: names by namespace and
//! `app.kubernetes.io/instance` label, kept beside the cache from the same watch events.
//!
//! Every reconcile needs its cluster's pods. Filtering the whole cache for them costs each
//! reconcile a pass over every pod of every cluster: at 200 clusters × 3 members that is 600
//! pods, 200 times a second. The index answers with the few names of one cluster.
//!
//! It is updated right after the cache, from the same events, so it can lag the cache by an
//! event: a name it does not list yet is a slot "not in the cache", which the reconcile
//! already looks up by name (`observation::look_up_missing_by_name`); a name it still lists
//! after a delete finds nothing in the cache and is skipped. Either way the plan sees what a
//! lagging cache would show, never more.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use kube::Resource;
use kube::runtime::watcher;

use crate::children::names::LABEL_INSTANCE;

/// (namespace, instance label) of an object; the namespace is empty for cluster-scoped ones.
pub(crate) type Instance = (String, String);
/// (namespace, name) of an object.
pub(crate) type Key = (String, String);

#[derive(Default)]
pub(crate) struct InstanceIndex {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    names: HashMap<Instance, BTreeSet<String>>,
    /// Where each indexed object is filed, so that a changed or removed label moves it.
    filed: HashMap<Key, Instance>,
    /// During a re-list: what has been listed so far, swapped in when it ends (as the cache
    /// itself does), so that a re-list never shows a partial set.
    relisting: Option<Vec<(Key, Instance)>>,
}

impl InstanceIndex {
    /// Files what `event` says, as the cache does.
    pub fn apply<K: Resource>(&self, event: &watcher::Event<K>) {
        let mut inner = self.inner.lock().expect("index lock is never poisoned");
        match event {
            watcher::Event::Apply(obj) => {
                let key = key_of(obj);
                inner.remove(&key);
                if let Some(instance) = instance_of(obj) {
                    inner.insert(key, instance);
                }
            }
            watcher::Event::Delete(obj) => inner.remove(&key_of(obj)),
            watcher::Event::Init => inner.relisting = Some(Vec::new()),
            watcher::Event::InitApply(obj) => {
                if let (Some(listed), Some(instance)) = (inner.relisting.as_mut(), instance_of(obj)) {
                    listed.push((key_of(obj), instance));
                }
            }
            watcher::Event::InitDone => {
                let listed = inner.relisting.take().unwrap_or_default();
                inner.names.clear();
                inner.filed.clear();
                for (key, instance) in listed {
                    inner.insert(key, instance);
                }
            }
        }
    }

    /// The names of the objects in `namespace` labelled as `instance`'s.
    pub fn names(&self, namespace: &str, instance: &str) -> Vec<String> {
        let inner = self.inner.lock().expect("index lock is never poisoned");
        inner
            .names
            .get(&(namespace.to_owned(), instance.to_owned()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Inner {
    fn insert(&mut self, key: Key, instance: Instance) {
        self.names
            .entry(instance.clone())
            .or_default()
            .insert(key.1.clone());
        self.filed.insert(key, instance);
    }

    fn remove(&mut self, key: &Key) {
        let Some(instance) = self.filed.remove(key) else {
            return;
        };
        if let Some(names) = self.names.get_mut(&instance) {
            names.remove(&key.1);
            if names.is_empty() {
                self.names.remove(&instance);
            }
        }
    }
}

/// (namespace, name) of `obj`.
pub(crate) fn key_of<K: Resource>(obj: &K) -> Key {
    let meta = obj.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The cluster `obj` is labelled for, if any.
pub(crate) fn instance_of<K: Resource>(obj: &K) -> Option<Instance> {
    let meta = obj.meta();
    let instance = meta.labels.as_ref()?.get(LABEL_INSTANCE)?;
    Some((meta.namespace.clone().unwrap_or_default(), instance.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, instance: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: instance.map(|i| [(LABEL_INSTANCE.to_owned(), i.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn files_objects_by_namespace_and_instance() {
        let index = InstanceIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "x-0", Some("x"))));
        index.apply(&watcher::Event::Apply(pod("a", "x-1", Some("x"))));
        index.apply(&watcher::Event::Apply(pod("b", "x-0", Some("x"))));
        index.apply(&watcher::Event::Apply(pod("a", "other", None)));
        assert_eq!(index.names("a", "x"), vec!["x-0", "x-1"]);
        assert_eq!(index.names("b", "x"), vec!["x-0"]);
        assert!(index.names("a", "y").is_empty());
    }

    #[test]
    fn a_changed_or_removed_label_moves_the_object() {
        let index = InstanceIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "x-0", Some("x"))));
        index.apply(&watcher::Event::Apply(pod("a", "x-0", Some("y"))));
        assert!(index.names("a", "x").is_empty());
        assert_eq!(index.names("a", "y"), vec!["x-0"]);
        index.apply(&watcher::Event::Apply(pod("a", "x-0", None)));
        assert!(index.names("a", "y").is_empty());
    }

    #[test]
    fn a_delete_removes_the_object() {
        let index = InstanceIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "x-0", Some("x"))));
        index.apply(&watcher::Event::Delete(pod("a", "x-0", Some("x"))));
        assert!(index.names("a", "x").is_empty());
    }

    #[test]
    fn a_relist_replaces_everything_when_it_ends() {
        let index = InstanceIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "x-0", Some("x"))));
        index.apply(&watcher::Event::<Pod>::Init);
        index.apply(&watcher::Event::InitApply(pod("a", "x-1", Some("x"))));
        // Until the list ends, the index shows what it showed before it.
        assert_eq!(index.names("a", "x"), vec!["x-0"]);
        index.apply(&watcher::Event::<Pod>::InitDone);
        assert_eq!(index.names("a", "x"), vec!["x-1"]);
    }
}
