//! Which node watch events change a node's zone: the one node change that alters a cluster's
//! status (`failureDomains`) without any event of the cluster's own objects.
//!
//! Node metadata changes constantly (heartbeat-driven status updates bump every node's
//! resourceVersion), so the node watch is not a trigger of its own: a cluster at rest
//! ([`crate::decide::at_rest`]) would otherwise be woken by every heartbeat. Only a zone label that
//! changes on a known node wakes every cluster (`reconcile_all_on`). A node that appears has
//! no member yet (its pods' events follow), and a node that goes takes its pods' events with
//! it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use crate::decide::failure_domains::ZONE_LABEL;

/// The zone of every node seen, by name.
#[derive(Default)]
pub(crate) struct NodeZones {
    zones: HashMap<String, Option<String>>,
    /// During a re-list: the zones listed so far, swapped in when it ends.
    relisting: Option<HashMap<String, Option<String>>>,
}

type NodeEvent = watcher::Event<PartialObjectMeta<Node>>;

impl NodeZones {
    /// Whether `event` changed the zone of a node that was known before.
    pub fn changed(&mut self, event: &NodeEvent) -> bool {
        match event {
            watcher::Event::Apply(node) => {
                let zone = zone_of(node);
                let before = self.zones.insert(node.name_any(), zone.clone());
                before.is_some_and(|b| b != zone)
            }
            watcher::Event::Delete(node) => {
                self.zones.remove(&node.name_any());
                false
            }
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(node) => {
                self.relisting
                    .get_or_insert_default()
                    .insert(node.name_any(), zone_of(node));
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                // Any node listed again with another zone than it had (a change missed while
                // the watch was down).
                let changed = listed
                    .iter()
                    .any(|(name, zone)| self.zones.get(name).is_some_and(|before| before != zone));
                self.zones = listed;
                changed
            }
        }
    }
}

fn zone_of(node: &PartialObjectMeta<Node>) -> Option<String> {
    node.labels().get(ZONE_LABEL).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: Option<&str>) -> PartialObjectMeta<Node> {
        let mut n = PartialObjectMeta::<Node>::default();
        n.metadata.name = Some(name.into());
        if let Some(z) = zone {
            n.metadata.labels = Some([(ZONE_LABEL.to_owned(), z.to_owned())].into());
        }
        n
    }

    #[test]
    fn only_a_known_nodes_new_zone_is_a_change() {
        let mut zones = NodeZones::default();
        let apply = |z: &mut NodeZones, name, zone| z.changed(&watcher::Event::Apply(node(name, zone)));
        assert!(!apply(&mut zones, "n1", Some("a")), "a new node");
        assert!(!apply(&mut zones, "n1", Some("a")), "a heartbeat");
        assert!(apply(&mut zones, "n1", Some("b")), "relabelled");
        assert!(apply(&mut zones, "n1", None), "label removed");
        assert!(!apply(&mut zones, "n1", None));
        assert!(apply(&mut zones, "n1", Some("c")), "label added");
        assert!(!zones.changed(&watcher::Event::Delete(node("n1", Some("c")))));
        assert!(
            !apply(&mut zones, "n1", Some("d")),
            "a node of that name again is new"
        );
    }

    #[test]
    fn a_relist_reports_zones_changed_while_the_watch_was_down() {
        let mut zones = NodeZones::default();
        for (name, zone) in [("n1", "a"), ("n2", "b")] {
            zones.changed(&watcher::Event::Apply(node(name, Some(zone))));
        }
        let relist = |z: &mut NodeZones, nodes: &[(&str, &str)]| {
            assert!(!z.changed(&watcher::Event::Init));
            for (name, zone) in nodes {
                assert!(!z.changed(&watcher::Event::InitApply(node(name, Some(zone)))));
            }
            z.changed(&watcher::Event::InitDone)
        };
        assert!(
            !relist(&mut zones, &[("n1", "a"), ("n2", "b")]),
            "nothing changed"
        );
        assert!(
            !relist(&mut zones, &[("n1", "a"), ("n3", "c")]),
            "n2 gone, n3 new"
        );
        assert!(relist(&mut zones, &[("n1", "z"), ("n3", "c")]), "n1 moved");
        // What the re-list showed is what later events compare with.
        assert!(!zones.changed(&watcher::Event::Apply(node("n1", Some("z")))));
        assert!(
            !zones.changed(&watcher::Event::Apply(node("n2", Some("q")))),
            "n2 is new again"
        );
    }
}
