//! Pure computation of `RedlockCluster.status` from the spec and what was observed.
//! The reconciler writes the result only when it differs from the stored status.

use k8s_openapi::jiff::Timestamp;

use crate::conditions::{self, Desired};
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::observe::Observed;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";

/// Instances a client must lock: a strict majority of all N, whatever is up right now.
pub fn quorum(instances: i32) -> i32 {
    instances / 2 + 1
}

pub fn compute(cluster: &RedlockCluster, observed: &Observed, now: Timestamp) -> RedlockClusterStatus {
    let old = cluster.status.clone().unwrap_or_default();
    let instances = cluster.spec.instances;
    let quorum = quorum(instances);
    let ready = i32::try_from(observed.ready_pods).unwrap_or(i32::MAX);

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
        Desired {
            type_: PROGRESSING,
            status: true,
            reason: "InstancesNotReady",
            message: format!("{ready} of {instances} instances serve clients"),
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
        // Holds and per-member state are owned by the instance lifecycle; until it tracks
        // them they stay unset rather than claiming "0 held".
        held_instances: old.held_instances,
        quorum: Some(quorum),
        members: old.members,
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

    fn condition<'a>(
        s: &'a RedlockClusterStatus,
        type_: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        for (n, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4), (99, 50)] {
            assert_eq!(quorum(n), q, "N={n}");
        }
    }

    #[test]
    fn nothing_ready_is_progressing_and_unavailable() {
        let s = compute(&cluster(5, 1), &Observed::default(), at(100));
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            (s.instances, s.ready_instances, s.quorum),
            (Some(5), Some(0), Some(3))
        );
        assert_eq!(s.held_instances, None);
        assert_eq!(condition(&s, AVAILABLE).status, "False");
        assert_eq!(condition(&s, PROGRESSING).status, "True");
        assert_eq!(condition(&s, PROGRESSING).observed_generation, Some(1));
    }

    #[test]
    fn quorum_ready_is_available_and_all_ready_stops_progressing() {
        let partial = compute(
            &cluster(5, 1),
            &Observed {
                pods: 5,
                ready_pods: 3,
            },
            at(100),
        );
        assert_eq!(condition(&partial, AVAILABLE).status, "True");
        assert_eq!(condition(&partial, PROGRESSING).status, "True");
        let all = compute(
            &cluster(5, 1),
            &Observed {
                pods: 5,
                ready_pods: 5,
            },
            at(100),
        );
        assert_eq!(condition(&all, PROGRESSING).status, "False");
    }

    #[test]
    fn steady_state_recomputes_the_identical_status() {
        let mut c = cluster(3, 4);
        let first = compute(&c, &Observed::default(), at(100));
        c.status = Some(first.clone());
        assert_eq!(compute(&c, &Observed::default(), at(500)), first);
    }

    #[test]
    fn new_generation_is_recorded() {
        let mut c = cluster(3, 4);
        c.status = Some(compute(&c, &Observed::default(), at(100)));
        c.metadata.generation = Some(5);
        let s = compute(&c, &Observed::default(), at(200));
        assert_eq!(s.observed_generation, Some(5));
        // Status did not flip, so the transition time stays.
        assert_eq!(condition(&s, PROGRESSING).last_transition_time.0, at(100));
    }
}
