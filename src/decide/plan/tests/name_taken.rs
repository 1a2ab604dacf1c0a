//! A slot whose pod name is taken by a pod this cluster does not control.

use super::*;

fn foreign() -> SlotObservation {
    SlotObservation {
        pod: PodState::Foreign {
            owner: "controlled by RedlockCluster locks (uid old)".into(),
        },
        ..Default::default()
    }
}

/// A pod of the slot's name that this cluster does not control (an earlier incarnation's
/// pod awaiting garbage collection, an orphan): reported, nothing created, released or
/// replaced, and the slot's hold starts in full once the name is free.
#[test]
fn name_taken_by_a_pod_of_another_owner() {
    const CONFLICT: &[(MemberReason, bool)] = &[(MemberReason::NameConflict, true)];
    let lost_no_end = |since| MemberStatus {
        state: MemberState::Lost,
        since,
        ..record(0, MemberState::Lost)
    };
    run(vec![
        Case::new(
            "no record, foreign pod: starting, reported",
            None,
            foreign(),
            MemberStatus {
                since: micro(at(NOW)),
                ..starting(0)
            },
        )
        .msg("pod name taken: pod locks-0 exists but is not controlled by this RedlockCluster")
        .events(CONFLICT),
        Case::new("starting, foreign pod", Some(starting(0)), foreign(), starting(0))
            .msg("uid old")
            .events(CONFLICT),
        Case::new(
            "ready, foreign pod: lost with no end yet",
            Some(ready(0, "R", "c1")),
            foreign(),
            lost_no_end(micro(at(NOW))),
        )
        .msg("held in full once it is gone")
        .events(CONFLICT),
        Case::new(
            "held, foreign pod: the hold restarts once it is gone",
            Some(held(0, "Q", "c2", at(NOW + 10))),
            foreign(),
            lost_no_end(micro(at(NOW))),
        )
        .msg("pod name taken")
        .events(CONFLICT),
    ]);
    // The name is free again: a full hold from then, and the pod is created.
    let taken = plan(
        &input(1, &[ready(0, "R", "c1")], at(NOW)),
        &observed([(0, foreign())]),
    );
    let later = at(NOW + 100);
    let freed = plan(&input(1, &taken.members, later), &observed([(0, missing())]));
    let m = &freed.members[0];
    assert_eq!(m.state, MemberState::Lost);
    assert_eq!(m.held_until.as_ref().unwrap().0, held_until(later, HOLD));
    assert_eq!(freed.create_pods, vec![Slot::new(0)]);
    assert!(freed.releases.is_empty());
    // A retired slot's foreign pod is never deleted.
    let retired = plan(
        &input(0, &[ready(0, "R", "c1")], at(NOW)),
        &observed([(0, foreign())]),
    );
    assert!(retired.delete_pods.is_empty(), "{:?}", retired.delete_pods);
    assert_eq!(reasons(&retired), vec![(0, MemberReason::NameConflict)]);
}
