//! Pure computation of `RedlockCluster.status` from the spec and what was observed.
//! The reconciler writes the result only when it differs from the stored status.

use k8s_openapi::jiff::Timestamp;

use std::collections::BTreeMap;

use crate::conditions::{self, Desired};
use crate::crd::{MemberState, MemberStatus, RedlockCluster, RedlockClusterStatus};
use crate::observe::{PodState, SlotObservation};

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";

/// Instances a client must lock: a strict majority of all N, whatever is up right now.
pub fn quorum(instances: i32) -> i32 {
    instances / 2 + 1
}

/// The status to persist: the planned member states plus the counts and conditions that
/// follow from them and from the pods' readiness.
pub fn compute(
    cluster: &RedlockCluster,
    members: Vec<MemberStatus>,
    observed: &BTreeMap<i32, SlotObservation>,
    now: Timestamp,
) -> RedlockClusterStatus {
    let old = cluster.status.clone().unwrap_or_default();
    let instances = cluster.spec.instances;
    let quorum = quorum(instances);
    let active = || members.iter().filter(|m| m.slot < instances);
    let ready = active()
        .filter(|m| m.state == MemberState::Ready)
        .filter(|m| {
            matches!(
                observed.get(&m.slot).map(|o| &o.pod),
                Some(PodState::Running { ready: true, .. })
            )
        })
        .count() as i32;
    let held = active()
        .filter(|m| matches!(m.state, MemberState::Held | MemberState::Lost))
        .count() as i32;

    let available = Desired {
        type_: AVAILABLE,
        status: ready >= quorum,
        reason: if ready >= quorum {
            "QuorumServing"
        } else {
            "QuorumNotServing"
        },
        message: format!("{ready} of {instances} instances serve clients; a lock needs {quorum}"),
    };
    let progressing = if ready < instances {
        let reason = if held > 0 {
            "HoldsRunning"
        } else {
            "InstancesStarting"
        };
        let mut message = format!("{ready} of {instances} instances serve clients");
        if held > 0 {
            let next = active()
                .filter_map(|m| m.held_until.as_ref().map(|t| t.0))
                .filter(|t| *t > now)
                .min();
            message.push_str(&format!(", {held} held after losing their keys"));
            if let Some(next) = next {
                message.push_str(&format!(" (next release at {next})"));
            }
        }
        Desired {
            type_: PROGRESSING,
            status: true,
            reason,
            message,
        }
    } else {
        Desired {
            type_: PROGRESSING,
            status: false,
            reason: "AllInstancesReady",
            message: format!("all {instances} instances serve clients"),
        }
    };

    RedlockClusterStatus {
        observed_generation: cluster.metadata.generation,
        instances: Some(instances),
        ready_instances: Some(ready),
        held_instances: Some(held),
        quorum: Some(quorum),
        members,
        conditions: conditions::merge(
            &old.conditions,
            &[available, progressing],
            cluster.metadata.generation,
            now,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RedlockClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};

    fn cluster(instances: i32, generation: i64) -> RedlockCluster {
        let spec: RedlockClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": instances,
            "maxLockTTL": "30s",
        }))
        .unwrap();
        let mut c = RedlockCluster::new("locks", spec);
        c.metadata.generation = Some(generation);
        c
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn condition<'a>(s: &'a RedlockClusterStatus, type_: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    fn member(slot: i32, state: MemberState, held_until: Option<i64>) -> MemberStatus {
        MemberStatus {
            name: format!("locks-{slot}"),
            slot,
            endpoint: None,
            state,
            run_id: None,
            container_id: None,
            held_until: held_until.map(|s| MicroTime(at(s))),
            since: Some(MicroTime(at(1))),
            message: None,
        }
    }

    fn running(ready: bool) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: None,
                ready,
                terminating: false,
            },
            ..Default::default()
        }
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4), (99, 50)] {
            assert_eq!(quorum(n), q, "N={n}");
        }
    }

    #[test]
    fn nothing_ready_is_progressing_and_unavailable() {
        let s = compute(&cluster(5, 1), vec![], &BTreeMap::new(), at(100));
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            (s.instances, s.ready_instances, s.quorum, s.held_instances),
            (Some(5), Some(0), Some(3), Some(0))
        );
        assert_eq!(condition(&s, AVAILABLE).status, "False");
        assert_eq!(condition(&s, PROGRESSING).status, "True");
        assert_eq!(condition(&s, PROGRESSING).reason, "InstancesStarting");
    }

    #[test]
    fn ready_counts_released_members_whose_pod_is_ready() {
        let members = vec![
            member(0, MemberState::Ready, None),
            member(1, MemberState::Ready, None),
            member(2, MemberState::Held, Some(200)),
        ];
        let observed = BTreeMap::from([(0, running(true)), (1, running(false)), (2, running(false))]);
        let s = compute(&cluster(3, 1), members, &observed, at(100));
        assert_eq!((s.ready_instances, s.held_instances), (Some(1), Some(1)));
        assert_eq!(condition(&s, AVAILABLE).status, "False");
        let p = condition(&s, PROGRESSING);
        assert_eq!(p.reason, "HoldsRunning");
        assert!(p.message.contains("1 held"), "{}", p.message);
    }

    #[test]
    fn all_ready_is_available_and_done() {
        let members = (0..3).map(|i| member(i, MemberState::Ready, None)).collect();
        let observed = (0..3).map(|i| (i, running(true))).collect();
        let s = compute(&cluster(3, 1), members, &observed, at(100));
        assert_eq!(condition(&s, AVAILABLE).status, "True");
        assert_eq!(condition(&s, PROGRESSING).status, "False");
    }

    #[test]
    fn retired_slots_do_not_count() {
        let members = vec![
            member(0, MemberState::Ready, None),
            member(3, MemberState::Lost, Some(500)),
        ];
        let s = compute(
            &cluster(1, 1),
            members,
            &BTreeMap::from([(0, running(true))]),
            at(100),
        );
        assert_eq!((s.ready_instances, s.held_instances), (Some(1), Some(0)));
        assert_eq!(s.members.len(), 2);
    }

    #[test]
    fn steady_state_recomputes_the_identical_status() {
        let mut c = cluster(3, 4);
        let members: Vec<_> = (0..3).map(|i| member(i, MemberState::Ready, None)).collect();
        let observed: BTreeMap<_, _> = (0..3).map(|i| (i, running(true))).collect();
        let first = compute(&c, members.clone(), &observed, at(100));
        c.status = Some(first.clone());
        assert_eq!(compute(&c, members, &observed, at(500)), first);
    }
}
