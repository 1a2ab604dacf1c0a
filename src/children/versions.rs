//! Which clusters' children changed: a count of the watch events of the children caches other
//! than pods (Secrets, ConfigMaps, Services, PDBs, NetworkPolicies), per cluster.
//!
//! `children_memo` skips applying a cluster's children while nothing they are compared with
//! changed. With one count for all clusters, any event (one member of one cluster starting to
//! serve rewrites that cluster's endpoints ConfigMap) made every cluster apply all its
//! children again at its next reconcile: at 200 clusters, each change cost 200 applies, and
//! under churn that was 6–9 % of the operator's CPU samples (perf, `make bench-scale`, K=50
//! and K=200).
//!
//! An event counts for the cluster the object is labelled for (`app.kubernetes.io/instance`)
//! and for the one it was filed under before (a label edited away or to another cluster must
//! still reach the cluster whose child it was). An event no cluster can be found for (an
//! object without the label), and the end of a re-list (anything may have changed), count
//! for every cluster.
//!
//! Counts only grow, and a cluster's version is the sum of its own count and the count for
//! every cluster: it changes exactly when either does, so a memo taken at one version is
//! never mistaken as current after an event. Counts are never removed (a count that started
//! again from zero could come back to a remembered version); one per cluster name ever seen.
//!
//! Updated right after the cache, from the same events (as `instance_index`): a reconcile
//! that reads the version before it reads the cache sees any change either in the cache or in
//! a later version.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Resource;
use kube::runtime::watcher;

use crate::children::index::{self, Instance, instance_of};

/// (kind, (namespace, name)): the caches of several kinds feed one `ChildVersions`.
type Key = (&'static str, index::Key);

#[derive(Default)]
pub(crate) struct ChildVersions {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Events that count for every cluster.
    all: u64,
    per_instance: HashMap<Instance, u64>,
    /// Where each object was filed by its last event, so that a changed or removed label
    /// still counts for the cluster it left.
    filed: HashMap<Key, Instance>,
    /// Per kind during its re-list: what has been listed so far, swapped in for that kind's
    /// entries when it ends (the watches of the five kinds re-list independently, also
    /// interleaved).
    relisting: HashMap<&'static str, HashMap<index::Key, Instance>>,
}

impl ChildVersions {
    /// Counts what `event` changed.
    pub fn apply<K: Resource<DynamicType = ()>>(&self, event: &watcher::Event<K>) {
        let mut inner = self.inner.lock().expect("child versions lock is never poisoned");
        match event {
            watcher::Event::Apply(obj) => {
                let key = key_of(obj);
                let before = inner.filed.remove(&key);
                let now = instance_of(obj);
                inner.count(before.as_ref());
                inner.count(now.as_ref());
                if before.is_none() && now.is_none() {
                    inner.all += 1;
                }
                if let Some(now) = now {
                    inner.filed.insert(key, now);
                }
            }
            watcher::Event::Delete(obj) => {
                let before = inner.filed.remove(&key_of(obj));
                let labelled = instance_of(obj);
                inner.count(before.as_ref());
                if labelled != before {
                    inner.count(labelled.as_ref());
                }
                if before.is_none() && labelled.is_none() {
                    inner.all += 1;
                }
            }
            watcher::Event::Init => {
                inner.relisting.insert(kind_of::<K>(), HashMap::new());
            }
            watcher::Event::InitApply(obj) => {
                if let (Some(listed), Some(instance)) =
                    (inner.relisting.get_mut(kind_of::<K>()), instance_of(obj))
                {
                    listed.insert(index::key_of(obj), instance);
                }
            }
            watcher::Event::InitDone => {
                let kind = kind_of::<K>();
                let listed = inner.relisting.remove(kind).unwrap_or_default();
                inner.filed.retain(|(k, _), _| *k != kind);
                inner
                    .filed
                    .extend(listed.into_iter().map(|(key, instance)| ((kind, key), instance)));
                inner.all += 1;
            }
        }
    }

    /// The version of cluster `name`'s children in `namespace`: changed by every event that
    /// counts for it.
    pub fn of(&self, namespace: &str, name: &str) -> u64 {
        let inner = self.inner.lock().expect("child versions lock is never poisoned");
        let own = inner
            .per_instance
            .get(&(namespace.to_owned(), name.to_owned()))
            .copied()
            .unwrap_or(0);
        inner.all + own
    }
}

impl Inner {
    fn count(&mut self, instance: Option<&Instance>) {
        if let Some(instance) = instance {
            *self.per_instance.entry(instance.clone()).or_default() += 1;
        }
    }
}

fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()) {
        std::borrow::Cow::Borrowed(kind) => kind,
        // Every kind watched here has a static name; another would share one key space.
        std::borrow::Cow::Owned(_) => "",
    }
}

fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> Key {
    (kind_of::<K>(), index::key_of(obj))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::names::LABEL_INSTANCE;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::ObjectMeta;

    fn meta(ns: &str, name: &str, instance: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: instance.map(|i| [(LABEL_INSTANCE.to_owned(), i.to_owned())].into()),
            ..Default::default()
        }
    }

    fn cm(ns: &str, name: &str, instance: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: meta(ns, name, instance),
            ..Default::default()
        }
    }

    fn secret(ns: &str, name: &str, instance: Option<&str>) -> Secret {
        Secret {
            metadata: meta(ns, name, instance),
            ..Default::default()
        }
    }

    /// The versions of clusters `a`, `b` (namespace `n`) and `a` in namespace `m`.
    fn versions(v: &ChildVersions) -> [u64; 3] {
        [v.of("n", "a"), v.of("n", "b"), v.of("m", "a")]
    }

    #[test]
    fn an_event_changes_only_its_clusters_version() {
        let v = ChildVersions::default();
        let start = versions(&v);
        v.apply(&watcher::Event::Apply(cm("n", "a-endpoints", Some("a"))));
        let after = versions(&v);
        assert_ne!(after[0], start[0]);
        assert_eq!(
            after[1..],
            start[1..],
            "other clusters, also of the same name elsewhere"
        );
        v.apply(&watcher::Event::Delete(secret("n", "b-acl", Some("b"))));
        let last = versions(&v);
        assert_eq!((last[0], last[2]), (after[0], after[2]));
        assert_ne!(last[1], after[1]);
    }

    #[test]
    fn a_label_edited_away_or_to_another_cluster_changes_the_cluster_it_left() {
        let v = ChildVersions::default();
        v.apply(&watcher::Event::Apply(cm("n", "a-conf", Some("a"))));
        let [a, b, _] = versions(&v);
        // Relabelled to b: both change.
        v.apply(&watcher::Event::Apply(cm("n", "a-conf", Some("b"))));
        let [a2, b2, _] = versions(&v);
        assert!(a2 != a && b2 != b);
        // Label removed: b, where it was filed, changes.
        v.apply(&watcher::Event::Apply(cm("n", "a-conf", None)));
        let [_, b3, _] = versions(&v);
        assert_ne!(b3, b2);
        // Deleted while filed under a, its label saying b: both change.
        v.apply(&watcher::Event::Apply(cm("n", "x", Some("a"))));
        let [a4, b4, _] = versions(&v);
        v.apply(&watcher::Event::Delete(cm("n", "x", Some("b"))));
        let [a5, b5, _] = versions(&v);
        assert!(a5 != a4 && b5 != b4);
    }

    #[test]
    fn an_event_no_cluster_can_be_found_for_changes_every_version() {
        let v = ChildVersions::default();
        let start = versions(&v);
        v.apply(&watcher::Event::Apply(cm("n", "stray", None)));
        let after = versions(&v);
        assert!(start.iter().zip(&after).all(|(s, a)| s != a));
    }

    #[test]
    fn kinds_are_filed_apart() {
        let v = ChildVersions::default();
        v.apply(&watcher::Event::Apply(cm("n", "a-x", Some("a"))));
        v.apply(&watcher::Event::Apply(secret("n", "a-x", Some("b"))));
        // The Secret moving away from b says nothing about the ConfigMap of a.
        let [a, b, _] = versions(&v);
        v.apply(&watcher::Event::Apply(secret("n", "a-x", None)));
        let [a2, b2, _] = versions(&v);
        assert_eq!(a2, a);
        assert_ne!(b2, b);
    }

    #[test]
    fn the_end_of_a_relist_changes_every_version_and_refiles() {
        let v = ChildVersions::default();
        v.apply(&watcher::Event::Apply(cm("n", "a-conf", Some("a"))));
        let start = versions(&v);
        v.apply(&watcher::Event::<ConfigMap>::Init);
        v.apply(&watcher::Event::InitApply(cm("n", "a-conf", Some("b"))));
        assert_eq!(versions(&v), start, "nothing counts until the list ends");
        v.apply(&watcher::Event::<ConfigMap>::InitDone);
        let after = versions(&v);
        assert!(start.iter().zip(&after).all(|(s, a)| s != a));
        // Filed as listed: a later delete counts for b.
        v.apply(&watcher::Event::Delete(cm("n", "a-conf", None)));
        let last = versions(&v);
        assert_ne!(last[1], after[1]);
        assert_eq!(last[0], after[0]);
    }

    /// The five watches re-list independently, also interleaved: one kind's re-list keeps
    /// what the others filed, so a relabel after it still reaches the cluster it left.
    #[test]
    fn interleaved_relists_of_two_kinds_keep_each_others_filing() {
        let v = ChildVersions::default();
        v.apply(&watcher::Event::<Secret>::Init);
        v.apply(&watcher::Event::<ConfigMap>::Init);
        v.apply(&watcher::Event::InitApply(secret("n", "a-acl", Some("a"))));
        v.apply(&watcher::Event::InitApply(cm("n", "a-conf", Some("a"))));
        v.apply(&watcher::Event::<Secret>::InitDone);
        v.apply(&watcher::Event::<ConfigMap>::InitDone);
        // A later re-list of ConfigMaps alone leaves the Secret filed.
        v.apply(&watcher::Event::<ConfigMap>::Init);
        v.apply(&watcher::Event::InitApply(cm("n", "a-conf", Some("a"))));
        v.apply(&watcher::Event::<ConfigMap>::InitDone);
        for relabelled in [
            watcher::Event::Apply(secret("n", "a-acl", Some("b"))),
            watcher::Event::Apply(secret("n", "a-acl", Some("a"))),
        ] {
            let [a, ..] = versions(&v);
            v.apply(&relabelled);
            assert_ne!(versions(&v)[0], a, "a Secret relabelled away from or back to a");
        }
        let [a, ..] = versions(&v);
        v.apply(&watcher::Event::Apply(cm("n", "a-conf", Some("b"))));
        assert_ne!(versions(&v)[0], a, "a ConfigMap relabelled away from a");
    }

    /// A version never comes back to an earlier value, whatever the events.
    #[test]
    fn versions_only_grow() {
        let v = ChildVersions::default();
        let mut seen = vec![versions(&v)];
        for (i, label) in [Some("a"), Some("b"), None, Some("a"), None]
            .into_iter()
            .enumerate()
        {
            v.apply(&watcher::Event::Apply(cm("n", "o", label)));
            if i % 2 == 0 {
                v.apply(&watcher::Event::Delete(cm("n", "o", label)));
            }
            let now = versions(&v);
            let last = seen.last().unwrap();
            assert!(now.iter().zip(last).all(|(n, l)| n >= l));
            seen.push(now);
        }
    }
}
