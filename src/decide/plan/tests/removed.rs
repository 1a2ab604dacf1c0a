//! Slots at or above N (scale-down): fenced and held while clients are still told a list that
//! contains them, then retired.

use super::*;

/// 20
#[test]
fn scale_down_holds_removed_slots_until_their_hold_ends() {
    let members: Vec<_> = (0..5)
        .map(|s| ready(s, &format!("R{s}"), &format!("c{s}")))
        .collect();
    let serving = |s: i32| (s, running(&format!("R{s}"), true, &format!("c{s}")));

    // Pods still there: deleted, records untouched (their processes may still serve).
    let all_pods = observed((0..5).map(serving));
    let p = plan(&input(3, &members, at(NOW)), &all_pods);
    assert_eq!(p.members, members);
    assert_eq!(p.delete_pods, vec![3, 4]);
    assert!(p.create_pods.is_empty() && p.releases.is_empty() && p.events.is_empty());
    assert_eq!(p.next_hold_end, None);

    // Terminating, still answering: still untouched, still deleted.
    let mut going = all_pods.clone();
    going.insert(Slot::new(3), terminating(running("R3", true, "c3")));
    going.insert(Slot::new(4), terminating(unreachable("c4")));
    let p = plan(&input(3, &members, at(NOW)), &going);
    assert_eq!(p.members, members);
    assert_eq!(p.delete_pods, vec![3, 4]);

    // Pods gone: held from now.
    let remaining_pods = observed((0..3).map(serving));
    let p = plan(&input(3, &members, at(NOW)), &remaining_pods);
    let u = hold_from_now();
    assert_eq!(&p.members[..3], &members[..3]);
    for (m, slot) in p.members[3..].iter().zip(3..) {
        let want = MemberStatus {
            since: micro(at(NOW)),
            ..lost(slot, u)
        };
        assert_eq!(m.clone().tap_message(None), want.tap_message(None));
        let text = m.message.as_deref().unwrap();
        assert!(text.contains("removed by scale-down"), "{text}");
        assert!(text.contains(&u.to_string()), "{text}");
    }
    assert!(p.create_pods.is_empty() && p.delete_pods.is_empty() && p.releases.is_empty());
    assert!(p.events.is_empty());
    assert_eq!(p.next_hold_end, Some(HOLD));

    // Later, inside the hold: the records stand as written.
    let retired = p.members.clone();
    let p = plan(&input(3, &retired, at(NOW + 10)), &remaining_pods);
    assert_eq!(p.members, retired);
    assert_eq!(p.next_hold_end, Some(Duration::from_millis(21_300)));

    // Scaling back up within the hold: the slots are lost and held, not new.
    let p = plan(&input(5, &retired, at(NOW + 10)), &remaining_pods);
    assert_eq!(p.members, retired);
    assert_eq!(p.create_pods, vec![3, 4]);
    assert!(p.events.is_empty(), "no InstanceCreated: {:?}", p.events);
    let mut back = remaining_pods.clone();
    back.insert(Slot::new(3), running("N3", false, "d3"));
    let p = plan(&input(5, &retired, at(NOW + 20)), &back);
    assert_eq!(p.members[3].state, MemberState::Held);
    assert_eq!(p.members[3].held_until, micro(u));
    assert!(p.releases.is_empty());
    let p = plan(&input(5, &p.members, u), &back);
    assert_eq!(p.members[3].state, MemberState::Ready);
    assert_eq!(p.releases, vec![(Slot::new(3), "N3".to_owned())]);

    // Once the hold has run out, the records go.
    let p = plan(&input(3, &retired, u), &remaining_pods);
    assert_eq!(p.members, members[..3]);
    assert_eq!(p.next_hold_end, None);
    // And a later scale-up starts them fresh.
    let p = plan(&input(5, &p.members, u), &remaining_pods);
    assert_eq!(p.members[3].state, MemberState::Starting);
    assert_eq!(p.create_pods, vec![3, 4]);
}

/// Slots at or above N, one at a time.
#[test]
fn retired_slots() {
    let later = at(NOW + 10);
    /// (name, record, observation, kept record, pod deleted)
    type RetireCase = (
        &'static str,
        Option<MemberStatus>,
        SlotObservation,
        Option<MemberStatus>,
        bool,
    );
    let cases: Vec<RetireCase> = vec![
        (
            // Unknown history: it may have served, so the slot is held once it is gone.
            "no record, pod left over",
            None,
            running("X", true, "c1"),
            Some(MemberStatus {
                name: "locks-1".into(),
                slot: Slot::new(1),
                endpoint: None,
                state: MemberState::Lost,
                pod_uid: None,
                node: None,
                run_id: None,
                container_id: None,
                held_until: None,
                hold_started_at: None,
                since: Some(MicroTime(at(NOW))),
                refused_since: None,
                message: None,
                pod_ip: None,
                listener: None,
                unstopped: None,
                fence_seen_at: None,
                maintenance: None,
                clock: None,
            }),
            true,
        ),
        ("no record, no pod", None, missing(), None, false),
        (
            "starting, no pod: never served, dropped",
            Some(starting(1)),
            missing(),
            None,
            false,
        ),
        (
            "starting, pod still there",
            Some(starting(1)),
            not_running("pending"),
            Some(starting(1)),
            true,
        ),
        (
            "held, pod gone: the running hold stays",
            Some(held(1, "Q", "c2", later)),
            missing(),
            Some(MemberStatus {
                since: micro(at(NOW)),
                ..lost(1, later)
            }),
            false,
        ),
        (
            "held, hold over, pod gone",
            Some(held(1, "Q", "c2", at(NOW))),
            missing(),
            None,
            false,
        ),
        (
            "lost, hold running",
            Some(lost(1, later)),
            missing(),
            Some(lost(1, later)),
            false,
        ),
        (
            "lost, hold over",
            Some(lost(1, at(NOW - 1))),
            missing(),
            None,
            false,
        ),
        (
            "ready, pod failed: kept until the pod is gone",
            Some(ready(1, "R", "c1")),
            finished("Failed (Evicted)"),
            Some(ready(1, "R", "c1")),
            true,
        ),
    ];
    for (name, prev, obs, want, delete) in cases {
        let members: Vec<_> = prev.into_iter().collect();
        let p = plan(
            &input(1, &members, at(NOW)),
            &observed([(0, running("R0", true, "c0")), (1, obs)]),
        );
        let got = p.members.iter().find(|m| m.slot == Slot::new(1)).cloned();
        let strip = |m: Option<MemberStatus>| m.map(|m| m.tap_message(None));
        assert_eq!(strip(got), strip(want.clone()), "{name}");
        assert_eq!(p.delete_pods, if delete { vec![1] } else { vec![] }, "{name}");
        assert!(
            p.create_pods.is_empty() && p.releases.is_empty() && p.events.is_empty(),
            "{name}"
        );
        let want_next = want
            .and_then(|m| m.held_until)
            .filter(|u| u.0 > at(NOW))
            .map(|u| remaining(at(NOW), u.0));
        assert_eq!(p.next_hold_end, want_next, "{name}");
    }
}

trait TapMessage {
    fn tap_message(self, message: Option<String>) -> Self;
}

impl TapMessage for MemberStatus {
    fn tap_message(self, message: Option<String>) -> Self {
        MemberStatus { message, ..self }
    }
}

/// A retired slot whose process had no record is held once the pod is gone.
#[test]
fn unknown_retired_process_is_held_after_it_is_gone() {
    let p = plan(
        &input(0, &[], at(NOW)),
        &observed([(0, running("X", true, "c1"))]),
    );
    assert_eq!(p.delete_pods, vec![Slot::new(0)]);
    let p = plan(&input(0, &p.members, at(NOW + 1)), &observed([(0, missing())]));
    assert_eq!(p.members[0].state, MemberState::Lost);
    assert_eq!(
        p.members[0].held_until.as_ref().map(|t| t.0),
        Some(held_until(at(NOW + 1), HOLD))
    );
    // Scaling up within that hold does not reuse the slot unheld.
    let p = plan(
        &input(1, &p.members, at(NOW + 2)),
        &observed([(0, running("Y", false, "c2"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Held);
    assert!(p.releases.is_empty());
}

/// A scale-down 3 → 2 while clients are still told the list of 3: the removed member is
/// fenced and held first, never deleted; its pod goes only once the shorter list is out.
#[test]
fn removed_members_are_fenced_and_held_before_the_list_shrinks() {
    let members = [ready(0, "A", "c0"), ready(1, "B", "c1"), ready(2, "C", "c2")];
    let obs = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, running("C", true, "c2")),
    ]);
    let still_published = PlanInput {
        published: 3,
        ..input(2, &members, at(NOW))
    };
    let p = plan(&still_published, &obs);
    assert_eq!(p.fences, vec![(Slot::new(2), "C".to_owned())]);
    assert!(p.delete_pods.is_empty(), "{:?}", p.delete_pods);
    let m = &p.members[2];
    assert_eq!(m.state, MemberState::Held);
    // The fence is not proven yet: the hold starts once it is seen fenced.
    assert_eq!(m.held_until, None);
    // Not answering proves nothing either.
    let silent = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, unreachable("c2")),
    ]);
    let p = plan(
        &PlanInput {
            published: 3,
            ..input(2, &p.members, at(NOW))
        },
        &silent,
    );
    assert_eq!(p.members[2].held_until, None);
    // Seen fenced: the hold runs from then.
    let fenced = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, running("C", false, "c2")),
    ]);
    let p = plan(
        &PlanInput {
            published: 3,
            ..input(2, &p.members, at(NOW))
        },
        &fenced,
    );
    assert_eq!(p.members[2].held_until.as_ref().unwrap().0, hold_from_now());
    // Re-planned before the hold ends: same record, nothing more to do.
    let later = at(NOW + 40);
    let again = plan(
        &PlanInput {
            published: 3,
            ..input(2, &p.members, later)
        },
        &fenced,
    );
    assert_eq!(again.members[2].held_until, p.members[2].held_until);
    assert_eq!(again.members[2].state, MemberState::Held, "never released");
    assert!(again.releases.is_empty() && again.fences.is_empty() && again.delete_pods.is_empty());
    // Someone lets clients in again meanwhile: fenced again, and the hold starts over once
    // it is seen fenced.
    let reopened = plan(
        &PlanInput {
            published: 3,
            ..input(2, &p.members, at(NOW + 10))
        },
        &obs,
    );
    assert_eq!(reopened.fences, vec![(Slot::new(2), "C".to_owned())]);
    assert_eq!(reopened.members[2].held_until, None);
    // Once the shorter list is published, the pod goes.
    let published = plan(&input(2, &again.members, later), &fenced);
    assert_eq!(published.delete_pods, vec![Slot::new(2)]);
}
