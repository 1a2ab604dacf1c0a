//! Rolling replacement and scale pacing: spec changes and scale changes without losing quorum.
//!
//! Every replacement of a Redis process loses its keys, so it is a crash under the hold rule.
//! A pod-affecting spec change therefore replaces one slot at a time: the next only when every
//! slot serves again (the previous replacement was held and released) and one fewer serving
//! member still leaves a quorum. The hold itself needs nothing special: the replaced slot's
//! pod is deleted, its loss is observed once the process is gone, and the planner holds the
//! fresh, fenced process for the full hold. Everything here is derived from the pods' spec-hash
//! annotations and the member records, so a rollout survives an operator restart.

use std::collections::BTreeMap;

use crate::crd::model::{Slot, quorum};
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation, serving_slots};

/// What the rollout does in this reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Rollout {
    /// Slots (< N) whose running pod was built from another spec, in slot order.
    pub outdated: Vec<Slot>,
    /// The slot to replace now (its pod is deleted).
    pub replace: Option<Slot>,
    /// Why no replacement starts now although some slot is outdated.
    pub waiting: Option<String>,
}

/// Decides the next replacement. `members` are the records just planned.
pub(crate) fn decide(
    instances: i32,
    members: &[MemberStatus],
    observed: &BTreeMap<Slot, SlotObservation>,
    desired_hash: &str,
) -> Rollout {
    let outdated: Vec<Slot> = observed
        .iter()
        .filter(|(slot, o)| {
            slot.within(instances) && o.spec_hash.as_deref().is_some_and(|h| h != desired_hash)
        })
        .filter(|(_, o)| {
            !matches!(
                o.pod,
                PodState::Running {
                    terminating: true,
                    ..
                }
            )
        })
        .map(|(slot, _)| *slot)
        .collect();
    let Some(&next) = outdated.first() else {
        return Rollout::default();
    };
    let serving = serving_slots(members, observed, instances);
    // An outdated member the operator itself keeps from clients (held, e.g. crash-looping under
    // the old spec, which the new one may be meant to fix) is replaced first and without
    // waiting: that costs no availability, and waiting for it to serve could wait forever.
    // Only by its record: a Ready member whose pod merely reads not ready may still serve, and
    // so may one `Lost` on a refusal (a rule against the operator alone refuses too).
    let fenced = |slot: &&Slot| {
        members
            .iter()
            .find(|m| m.slot == **slot)
            .is_none_or(|m| m.state != MemberState::Ready && !m.lost_on_refusal())
    };
    if let Some(&idle) = outdated.iter().find(fenced) {
        return Rollout {
            replace: Some(idle),
            outdated,
            waiting: None,
        };
    }
    let not_serving: Vec<&str> = Slot::all(instances)
        .filter(|slot| !serving.contains(slot))
        .map(|slot| {
            members
                .iter()
                .find(|m| m.slot == slot)
                .map_or("a new slot", |m| m.name.as_str())
        })
        .collect();
    let serving = serving.len() as i32;
    let waiting = if !not_serving.is_empty() {
        Some(format!(
            "waiting for {} to serve before replacing the next member",
            not_serving.join(", ")
        ))
    } else if serving - 1 < quorum(instances) {
        Some(format!(
            "replacing a member would leave {} of {instances} serving, below the quorum of {}; with {instances} instance(s) a replacement cannot keep locks available. Delete a pod yourself to replace it anyway",
            serving - 1,
            quorum(instances)
        ))
    } else {
        None
    };
    Rollout {
        replace: waiting.is_none().then_some(next),
        outdated,
        waiting,
    }
}

/// Paces scale changes of a serving cluster to one slot at a time: of the new slots' pods,
/// only the lowest is created, and only once no other new slot is still coming up; of the
/// removed slots' pods, only the highest is deleted, the next once it is gone. A cluster that
/// served no client yet (being created) gets all its pods at once. Replacements of lost
/// members are never paced: they restore a member.
pub(crate) fn pace_scaling(
    instances: i32,
    previous: &[MemberStatus],
    members: &[MemberStatus],
    observed: &BTreeMap<Slot, SlotObservation>,
    create_pods: &mut Vec<Slot>,
    delete_pods: &mut Vec<Slot>,
) {
    // A member `Lost` on a refusal served, and may still: the cluster is not new.
    if !previous
        .iter()
        .any(|m| m.state == MemberState::Ready || m.lost_on_refusal())
    {
        return;
    }
    let is_new = |slot: Slot| {
        members
            .iter()
            .any(|m| m.slot == slot && m.state == MemberState::Starting)
    };
    let new_slot_coming_up = observed.keys().any(|s| s.within(instances) && is_new(*s));
    let allowed = create_pods
        .iter()
        .copied()
        .filter(|s| is_new(*s))
        .min()
        .filter(|_| !new_slot_coming_up);
    create_pods.retain(|slot| !is_new(*slot) || Some(*slot) == allowed);

    let highest_removed = observed.keys().copied().filter(|s| !s.within(instances)).max();
    delete_pods.retain(|slot| slot.within(instances) || Some(*slot) == highest_removed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::MemberStatus;

    const HASH: &str = "new";

    fn slots(indices: &[i32]) -> Vec<Slot> {
        indices.iter().copied().map(Slot::new).collect()
    }

    fn ready_pod(hash: &str) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: None,
                ready: true,
                terminating: false,
            },
            spec_hash: Some(hash.into()),
            ..Default::default()
        }
    }

    fn members(states: &[MemberState]) -> Vec<MemberStatus> {
        states
            .iter()
            .enumerate()
            .map(|(i, s)| MemberStatus::new(format!("locks-{i}"), i as i32, *s))
            .collect()
    }

    #[test]
    fn replaces_the_lowest_outdated_slot_when_all_serve() {
        let observed = BTreeMap::from([
            (Slot::new(0), ready_pod(HASH)),
            (Slot::new(1), ready_pod("old")),
            (Slot::new(2), ready_pod("old")),
        ]);
        let r = decide(3, &members(&[MemberState::Ready; 3]), &observed, HASH);
        assert_eq!(
            (r.outdated, r.replace, r.waiting),
            (slots(&[1, 2]), Some(Slot::new(1)), None)
        );
        let current = BTreeMap::from([
            (Slot::new(0), ready_pod(HASH)),
            (Slot::new(1), ready_pod(HASH)),
            (Slot::new(2), ready_pod(HASH)),
        ]);
        assert_eq!(
            decide(3, &members(&[MemberState::Ready; 3]), &current, HASH),
            Rollout::default()
        );
    }

    #[test]
    fn waits_while_a_replacement_is_held() {
        let mut observed = BTreeMap::from([
            (Slot::new(0), ready_pod(HASH)),
            (Slot::new(1), ready_pod("old")),
            (Slot::new(2), ready_pod("old")),
        ]);
        observed.get_mut(&Slot::new(0)).unwrap().pod = PodState::Running {
            container_id: None,
            ready: false,
            terminating: false,
        };
        let r = decide(
            3,
            &members(&[MemberState::Held, MemberState::Ready, MemberState::Ready]),
            &observed,
            HASH,
        );
        assert_eq!(r.replace, None);
        assert_eq!(r.outdated, slots(&[1, 2]));
        assert!(r.waiting.unwrap().contains("locks-0"));
    }

    /// A member crash-looping under the old spec never serves: waiting for it would stall the
    /// rollout (the new spec may be its fix). It is replaced at once; that costs nothing.
    #[test]
    fn an_outdated_member_that_does_not_serve_is_replaced_without_waiting() {
        let mut observed = BTreeMap::from([
            (Slot::new(0), ready_pod(HASH)),
            (Slot::new(1), ready_pod("old")),
            (Slot::new(2), ready_pod("old")),
        ]);
        observed.get_mut(&Slot::new(2)).unwrap().pod = PodState::Running {
            container_id: None,
            ready: false,
            terminating: false,
        };
        let held = members(&[MemberState::Ready, MemberState::Ready, MemberState::Held]);
        let r = decide(3, &held, &observed, HASH);
        assert_eq!((r.replace, r.waiting), (Some(Slot::new(2)), None));
        // A Ready member whose pod merely reads not ready (a readiness flap) may still serve
        // clients: the rollout waits for it as before.
        let r = decide(3, &members(&[MemberState::Ready; 3]), &observed, HASH);
        assert_eq!(r.replace, None);
        assert!(r.waiting.unwrap().contains("locks-2"));
        // Also where one fewer serving member would leave no quorum (N = 2): it serves no one.
        let two = BTreeMap::from([
            (Slot::new(0), ready_pod("old")),
            (Slot::new(1), observed[&Slot::new(2)].clone()),
        ]);
        let r = decide(2, &members(&[MemberState::Ready, MemberState::Held]), &two, HASH);
        assert_eq!(r.replace, Some(Slot::new(1)));
    }

    #[test]
    fn never_drops_below_quorum() {
        // N=2: quorum 2, so no member can be replaced without losing the lock service.
        let observed = BTreeMap::from([(Slot::new(0), ready_pod("old")), (Slot::new(1), ready_pod("old"))]);
        let r = decide(2, &members(&[MemberState::Ready; 2]), &observed, HASH);
        assert_eq!(r.replace, None);
        assert!(r.waiting.unwrap().contains("below the quorum of 2"));
        // Pods from before spec hashes existed are left alone.
        let unknown = BTreeMap::from([(
            Slot::new(0),
            SlotObservation {
                spec_hash: None,
                ..ready_pod("")
            },
        )]);
        assert_eq!(
            decide(1, &members(&[MemberState::Ready]), &unknown, HASH),
            Rollout::default()
        );
    }

    #[test]
    fn scale_up_of_a_serving_cluster_adds_one_slot_at_a_time() {
        let previous = members(&[MemberState::Ready; 3]);
        let mut planned = members(&[MemberState::Ready; 3]);
        planned.extend(
            members(&[MemberState::Ready; 5])
                .into_iter()
                .skip(3)
                .map(|mut m| {
                    m.state = MemberState::Starting;
                    m
                }),
        );
        let mut observed: BTreeMap<Slot, SlotObservation> =
            Slot::all(3).map(|i| (i, ready_pod(HASH))).collect();
        let (mut create, mut delete) = (slots(&[3, 4]), vec![]);
        pace_scaling(5, &previous, &planned, &observed, &mut create, &mut delete);
        assert_eq!(create, slots(&[3]));
        // Slot 3's pod exists but is not up yet: slot 4 waits.
        observed.insert(Slot::new(3), SlotObservation::default());
        let mut create = slots(&[4]);
        pace_scaling(5, &previous, &planned, &observed, &mut create, &mut delete);
        assert_eq!(create, Vec::<Slot>::new());
        // A cluster being created gets every pod at once.
        let mut create = slots(&[0, 1, 2]);
        pace_scaling(
            3,
            &[],
            &members(&[MemberState::Starting; 3]),
            &BTreeMap::new(),
            &mut create,
            &mut delete,
        );
        assert_eq!(create, slots(&[0, 1, 2]));
    }

    #[test]
    fn scale_down_removes_the_highest_slot_first() {
        let previous = members(&[MemberState::Ready; 5]);
        let observed: BTreeMap<Slot, SlotObservation> = Slot::all(5).map(|i| (i, ready_pod(HASH))).collect();
        let (mut create, mut delete) = (vec![], slots(&[3, 4]));
        pace_scaling(3, &previous, &previous, &observed, &mut create, &mut delete);
        assert_eq!(delete, slots(&[4]));
        let gone: BTreeMap<Slot, SlotObservation> = Slot::all(4).map(|i| (i, ready_pod(HASH))).collect();
        let mut delete = slots(&[3]);
        pace_scaling(3, &previous, &previous, &gone, &mut create, &mut delete);
        assert_eq!(delete, slots(&[3]));
    }
}
