//! Failure domains: where the members run, and how many node (or zone) failures the cluster
//! survives with a quorum left. Pure; fed with each member's node and the nodes' zone labels.

use std::collections::BTreeMap;

use crate::crd::conditions::{ConditionReason, ConditionType, Desired};
use crate::crd::model::{Slot, quorum};
use crate::crd::{FailureDomains, Spread};

/// Node label naming a node's zone.
pub(crate) const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Members per node and per zone, from each placed member's node.
pub(crate) fn compute(
    instances: i32,
    member_nodes: &BTreeMap<Slot, String>,
    node_zones: &BTreeMap<String, String>,
) -> FailureDomains {
    let mut nodes = BTreeMap::new();
    let mut zones = BTreeMap::new();
    for (slot, node) in member_nodes {
        if !slot.within(instances) {
            continue;
        }
        *nodes.entry(node.clone()).or_insert(0) += 1;
        if let Some(zone) = node_zones.get(node) {
            *zones.entry(zone.clone()).or_insert(0) += 1;
        }
    }
    let spare = instances - quorum(instances);
    FailureDomains {
        tolerated_node_failures: tolerated(&nodes, spare),
        tolerated_zone_failures: (!zones.is_empty()).then(|| tolerated(&zones, spare)),
        nodes,
        zones,
    }
}

/// How many domains can fail, the fullest first, with a quorum left.
fn tolerated(members_per_domain: &BTreeMap<String, i32>, spare: i32) -> i32 {
    let mut counts: Vec<i32> = members_per_domain.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let mut lost = 0;
    let mut failures = 0;
    for c in counts {
        if lost + c > spare {
            break;
        }
        lost += c;
        failures += 1;
    }
    failures
}

/// `FailureIndependence`: False when a single node (or, with `spread: zone`, a single zone)
/// holds more members than the cluster can lose and keep a quorum.
pub(crate) fn condition(instances: i32, spread: Spread, domains: &FailureDomains) -> Desired {
    let spare = instances - quorum(instances);
    let fullest = |m: &BTreeMap<String, i32>| m.iter().max_by_key(|(_, c)| **c).map(|(n, c)| (n.clone(), *c));
    let mut problems = Vec::new();
    if let Some((node, count)) = fullest(&domains.nodes)
        && count > spare
    {
        problems.push(format!(
            "node {node} runs {count} of {instances} members; losing it leaves {}, below the quorum of {}",
            instances - count,
            quorum(instances)
        ));
    }
    if spread == Spread::Zone
        && let Some((zone, count)) = fullest(&domains.zones)
        && count > spare
    {
        problems.push(format!(
            "zone {zone} runs {count} of {instances} members; losing it leaves {}, below the quorum of {}",
            instances - count,
            quorum(instances)
        ));
    }
    let mut summary = format!(
        "survives the loss of any {} node(s)",
        domains.tolerated_node_failures
    );
    if let Some(z) = domains.tolerated_zone_failures {
        summary.push_str(&format!(" and of any {z} zone(s)"));
    }
    if problems.is_empty() {
        Desired {
            type_: ConditionType::FailureIndependence,
            status: true,
            reason: ConditionReason::IndependentFailureDomains,
            message: summary,
        }
    } else {
        Desired {
            type_: ConditionType::FailureIndependence,
            status: false,
            reason: ConditionReason::SharedFailureDomain,
            message: format!("{}; the cluster {summary}", problems.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(pairs: &[(i32, &str)]) -> BTreeMap<Slot, String> {
        pairs
            .iter()
            .map(|(s, n)| (Slot::new(*s), n.to_string()))
            .collect()
    }

    fn zones() -> BTreeMap<String, String> {
        [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b"), ("n5", "c")]
            .iter()
            .map(|(n, z)| (n.to_string(), z.to_string()))
            .collect()
    }

    #[test]
    fn one_member_per_node_over_three_zones() {
        let d = compute(
            5,
            &placement(&[(0, "n1"), (1, "n2"), (2, "n3"), (3, "n4"), (4, "n5")]),
            &zones(),
        );
        assert_eq!(d.nodes.len(), 5);
        assert_eq!(d.zones["a"], 2);
        // 5 members, quorum 3: 2 may fail. Any 2 nodes; any 1 zone (a zone holds up to 2).
        assert_eq!(
            (d.tolerated_node_failures, d.tolerated_zone_failures),
            (2, Some(1))
        );
        let c = condition(5, Spread::Zone, &d);
        assert!(c.status, "{c:?}");
        assert_eq!(
            c.message,
            "survives the loss of any 2 node(s) and of any 1 zone(s)"
        );
    }

    #[test]
    fn a_node_with_too_many_members_is_reported() {
        let d = compute(3, &placement(&[(0, "n1"), (1, "n1"), (2, "n3")]), &zones());
        assert_eq!(d.tolerated_node_failures, 0);
        let c = condition(3, Spread::Host, &d);
        assert!(!c.status);
        assert_eq!(c.reason, ConditionReason::SharedFailureDomain);
        assert!(
            c.message
                .starts_with("node n1 runs 2 of 3 members; losing it leaves 1, below the quorum of 2"),
            "{}",
            c.message
        );
        assert!(
            c.message
                .ends_with("survives the loss of any 0 node(s) and of any 0 zone(s)"),
            "{}",
            c.message
        );
    }

    #[test]
    fn zones_only_judged_when_spread_by_zone() {
        // 3 members over 2 zones: zone a holds 2 > 1 spare.
        let d = compute(3, &placement(&[(0, "n1"), (1, "n2"), (2, "n3")]), &zones());
        assert!(condition(3, Spread::Host, &d).status);
        let c = condition(3, Spread::Zone, &d);
        assert!(!c.status);
        assert!(c.message.starts_with("zone a runs 2 of 3"), "{}", c.message);
    }

    #[test]
    fn retired_slots_and_unplaced_members_do_not_count() {
        let d = compute(1, &placement(&[(0, "n1"), (3, "n1")]), &BTreeMap::new());
        assert_eq!(d.nodes["n1"], 1);
        assert_eq!(d.tolerated_zone_failures, None);
        // A single instance survives no failure, truthfully.
        assert!(!condition(1, Spread::Host, &d).status);
    }
}
