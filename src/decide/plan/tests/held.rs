//! `Held` and `Lost` members: their holds, how those are timed, and their release.

use super::*;

#[test]
fn held_members() {
    let later = at(NOW + 10);
    let h = |until| Some(held(0, "Q", "c2", until));
    let released = MemberStatus {
        since: micro(at(NOW)),
        ..ready(0, "Q", "c2")
    };
    let extended = |run: Option<&str>, container: &str, until| MemberStatus {
        run_id: run.map(str::to_owned),
        container_id: Some(container.into()),
        ..held(0, "Q", "c2", until)
    };
    let lost_extended = |until| MemberStatus {
        since: micro(at(NOW)),
        ..lost(0, until)
    };
    run(vec![
        // 11
        Case::new(
            "held, before its end",
            h(later),
            running("Q", false, "c2"),
            held(0, "Q", "c2", later),
        )
        .next(secs(10)),
        // Someone turned the client user on (ACL SETUSER, an edited ACL Secret): fenced
        // again at once and held in full from now.
        Case::new(
            "held, enabled by someone else before its end: fenced again, held in full",
            h(later),
            running("Q", true, "c2"),
            held(0, "Q", "c2", hold_from_now()),
        )
        .msg("found serving clients while it must be held; fenced again")
        .fence("Q")
        .events(&[(MemberReason::Refenced, true)])
        .next(HOLD),
        Case::new(
            "held, before its end, process not answering",
            h(later),
            unreachable("c2"),
            held(0, "Q", "c2", later),
        )
        .next(secs(10)),
        Case::new(
            "held, one microsecond before its end: not released",
            h(later),
            running("Q", false, "c2"),
            held(0, "Q", "c2", later),
        )
        .at(later
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_micros(1))
            .unwrap())
        .next(Duration::from_micros(1)),
        // 12
        Case::new(
            "held, exactly at its end",
            h(at(NOW)),
            running("Q", false, "c2"),
            released.clone(),
        )
        .release("Q"),
        Case::new(
            "held, after its end",
            h(at(NOW - 5)),
            running("Q", false, "c2"),
            released.clone(),
        )
        .release("Q"),
        Case::new(
            "held, after its end, already enabled",
            h(at(NOW - 5)),
            running("Q", true, "c2"),
            released.clone(),
        ),
        Case::new(
            "held, after its end, process not answering: not released",
            h(at(NOW - 5)),
            unreachable("c2"),
            held(0, "Q", "c2", at(NOW - 5)),
        ),
        Case::new(
            "held, after its end, pod terminating: not released",
            h(at(NOW - 5)),
            terminating(unreachable("c2")),
            held(0, "Q", "c2", at(NOW - 5)),
        ),
        // 13: a further restart during the hold counts the hold again from now.
        Case::new(
            "held, restarted again",
            h(later),
            running("Q2", false, "c3"),
            extended(Some("Q2"), "c3", hold_from_now()),
        )
        .msg(format!(
            "restarted again during its hold; held until {}",
            hold_from_now()
        ))
        .events(EXTENDED)
        .next(HOLD),
        Case::new(
            "held, restarted again, new container not answering",
            h(later),
            unreachable("c3"),
            extended(None, "c3", hold_from_now()),
        )
        .msg("restarted again during its hold")
        .events(EXTENDED)
        .next(HOLD),
        Case::new(
            "held, restarted again: never earlier than the running hold",
            h(at(NOW + 100)),
            running("Q2", false, "c3"),
            // The hold counts from this loss (a later raise of maxLockTTL lengthens it from
            // here), and still ends no earlier than before.
            MemberStatus {
                hold_started_at: micro(at(NOW)),
                ..extended(Some("Q2"), "c3", at(NOW + 100))
            },
        )
        .msg("restarted again during its hold")
        .events(EXTENDED)
        .next(secs(100)),
        Case::new(
            "held, restarted right after its end: held again, not released",
            h(at(NOW - 5)),
            running("Q2", false, "c3"),
            extended(Some("Q2"), "c3", hold_from_now()),
        )
        .msg("restarted again during its hold")
        .events(EXTENDED)
        .next(HOLD),
        // 14
        Case::new(
            "held, pod deleted",
            h(later),
            missing(),
            lost_extended(hold_from_now()),
        )
        .msg(format!(
            "replacement lost during its hold; held until {}",
            hold_from_now()
        ))
        .create()
        .events(EXTENDED)
        .next(HOLD),
        Case::new(
            "held, container crashed",
            h(later),
            not_running("Error"),
            lost_extended(hold_from_now()),
        )
        .msg("replacement lost during its hold")
        .events(EXTENDED)
        .next(HOLD),
        Case::new(
            "held, pod evicted",
            h(later),
            finished("Failed (Evicted)"),
            lost_extended(hold_from_now()),
        )
        .msg("replacement lost during its hold")
        .delete()
        .events(EXTENDED)
        .next(HOLD),
        Case::new(
            "held, process lost after a long hold: never earlier than the running hold",
            h(at(NOW + 100)),
            missing(),
            MemberStatus {
                hold_started_at: micro(at(NOW)),
                ..lost_extended(at(NOW + 100))
            },
        )
        .msg("replacement lost during its hold")
        .create()
        .events(EXTENDED)
        .next(secs(100)),
        // A held process whose run id was not known yet: learnt, hold unchanged.
        Case::new(
            "held without run id, same container answers",
            Some(MemberStatus {
                run_id: None,
                ..held(0, "Q", "c2", later)
            }),
            running("Q", false, "c2"),
            held(0, "Q", "c2", later),
        )
        .next(secs(10)),
        Case::new(
            "held without run id, same container answers after the end",
            Some(MemberStatus {
                run_id: None,
                ..held(0, "Q", "c2", at(NOW - 5))
            }),
            running("Q", false, "c2"),
            released.clone(),
        )
        .release("Q"),
    ]);
}

/// A held record of a replacement that runs but has not answered: no run id yet.
fn held_unanswered(until: Timestamp) -> MemberStatus {
    MemberStatus {
        state: MemberState::Held,
        container_id: Some("c2".into()),
        since: micro(at(NOW - 5)),
        ..lost(0, until)
    }
}

#[test]
fn lost_members() {
    let later = at(NOW + 10);
    let l = |until| Some(lost(0, until));
    run(vec![
        // 15: the replacement is fenced since its start; the hold keeps its end.
        Case::new(
            "lost, replacement up before the end",
            l(later),
            running("Q", false, "c2"),
            MemberStatus {
                state: MemberState::Held,
                run_id: Some("Q".into()),
                container_id: Some("c2".into()),
                since: micro(at(NOW)),
                ..lost(0, later)
            },
        )
        .next(secs(10)),
        Case::new(
            "lost, replacement up but not answering before the end",
            l(later),
            unreachable("c2"),
            MemberStatus {
                state: MemberState::Held,
                container_id: Some("c2".into()),
                since: micro(at(NOW)),
                message: Some(
                    "pod deleted; not released before its own process answers: connection refused".into(),
                ),
                ..lost(0, later)
            },
        )
        .next(secs(10)),
        // Issue 15 (IP reuse): the pod's address answers as another pod's process. Its hold
        // has run, but nothing is released, and the message says why (once, not appended).
        Case::new(
            "held, the pod's address answers as another pod's process after the end",
            Some(MemberStatus {
                message: Some(format!("pod deleted{}connection refused", super::super::held::UNANSWERED)),
                ..held_unanswered(at(NOW - 1))
            }),
            SlotObservation {
                probe: Probe::ForeignProcess("the process at 10.0.0.1 belongs to pod uid-1".into()),
                ..unreachable("c2")
            },
            MemberStatus {
                message: Some(
                    "pod deleted; not released before its own process answers: the process at 10.0.0.1 belongs to pod uid-1".into(),
                ),
                ..held_unanswered(at(NOW - 1))
            },
        ),
        // Its own process answers at last: the failure leaves the message.
        Case::new(
            "held, its own process answers at last",
            Some(MemberStatus {
                message: Some(format!("pod deleted{}connection refused", super::super::held::UNANSWERED)),
                ..held_unanswered(at(NOW + 10))
            }),
            running("Q", false, "c2"),
            MemberStatus {
                run_id: Some("Q".into()),
                message: Some("pod deleted".into()),
                ..held_unanswered(at(NOW + 10))
            },
        )
        .next(secs(10)),
        // 16
        Case::new(
            "lost, replacement up after the end",
            l(at(NOW - 1)),
            running("Q", false, "c2"),
            MemberStatus {
                since: micro(at(NOW)),
                ..ready(0, "Q", "c2")
            },
        )
        .release("Q"),
        Case::new(
            "lost, replacement up after the end, already enabled",
            l(at(NOW - 1)),
            running("Q", true, "c2"),
            MemberStatus {
                since: micro(at(NOW)),
                ..ready(0, "Q", "c2")
            },
        ),
        Case::new("lost, no pod", l(later), missing(), lost(0, later))
            .create()
            .next(secs(10)),
        Case::new(
            "lost, no pod after the end",
            l(at(NOW - 1)),
            missing(),
            lost(0, at(NOW - 1)),
        )
        .create(),
        Case::new(
            "lost, pod pending",
            l(later),
            not_running("ContainerCreating"),
            lost(0, later),
        )
        .next(secs(10)),
        Case::new(
            "lost, pod evicted",
            l(later),
            finished("Failed (Evicted)"),
            lost(0, later),
        )
        .delete()
        .next(secs(10)),
    ]);
}

/// 17: the hold on record is the hold; an operator coming back mid-hold neither shortens
/// nor restarts it, and the plan depends on nothing but its inputs.
#[test]
fn operator_restart_mid_hold_keeps_the_hold() {
    let until = held_until(at(T0), HOLD);
    let members = vec![
        MemberStatus {
            message: Some(format!("new process (restarted); held until {until}")),
            fence_seen_at: micro(at(T0 + 1)),
            ..held(0, "Q", "c2", until)
        },
        lost(1, until),
        ready(2, "R", "c1"),
    ];
    let obs = observed([
        (0, running("Q", false, "c2")),
        (1, missing()),
        (2, running("R", true, "c1")),
    ]);
    let now = at(T0 + 10);
    let p = plan(&input(3, &members, now), &obs);
    assert_eq!(
        p.members, members,
        "identical records: same since, same heldUntil"
    );
    assert_eq!(p.create_pods, vec![Slot::new(1)]);
    assert!(p.delete_pods.is_empty() && p.releases.is_empty() && p.events.is_empty());
    assert_eq!(p.next_hold_end, Some(Duration::from_millis(21_300)));
    assert_eq!(plan(&input(3, &members, now), &obs), p, "idempotent");
    // Down for longer, still inside the hold: the same records.
    let p = plan(&input(3, &members, at(T0 + 31)), &obs);
    assert_eq!(p.members, members);
    assert_eq!(p.next_hold_end, Some(Duration::from_millis(300)));
    // At the recorded end, not before.
    let p = plan(&input(3, &members, until), &obs);
    assert_eq!(p.members[0].state, MemberState::Ready);
    assert_eq!(p.releases, vec![(Slot::new(0), "Q".to_owned())]);
    assert_eq!(p.members[1], members[1]);
    assert_eq!(p.next_hold_end, None);
}

/// 23
#[test]
fn next_hold_end_is_the_earliest_running_hold() {
    let members = vec![
        held(0, "A", "a", at(NOW + 50)),
        lost(1, at(NOW + 20)),
        // Over, but not released (not answering): no hold to wait for.
        held(2, "C", "c", at(NOW - 5)),
        ready(3, "D", "d"),
        // Retired slot, still held.
        lost(4, at(NOW + 7)),
    ];
    let obs = observed([
        (0, running("A", false, "a")),
        (1, missing()),
        (2, unreachable("c")),
        (3, running("D", true, "d")),
    ]);
    let p = plan(&input(4, &members, at(NOW)), &obs);
    assert_eq!(p.next_hold_end, Some(secs(7)));
    let p = plan(&input(4, &members[..4], at(NOW)), &obs);
    assert_eq!(p.next_hold_end, Some(secs(20)));
    // A new loss shorter than every running hold wins.
    let mut obs = obs;
    obs.insert(Slot::new(3), missing());
    let p = plan(&input(4, &members[..2], at(NOW + 15)), &obs);
    assert_eq!(p.next_hold_end, Some(secs(5)));
    let p = plan(&input(4, &members[..4], at(NOW + 19)), &obs);
    assert_eq!(p.next_hold_end, Some(secs(1)));
}

/// heldUntil is rounded up to the microsecond status stores, `since` down.
#[test]
fn hold_end_rounds_up_to_microseconds() {
    let now = Timestamp::from_nanosecond(i128::from(NOW) * 1_000_000_000 + 500).unwrap();
    let members = [ready(0, "R", "c1")];
    let p = plan(&input(1, &members, now), &observed([(0, missing())]));
    let m = &p.members[0];
    let until = m.held_until.as_ref().unwrap().0;
    assert_eq!(
        until.as_nanosecond(),
        i128::from(NOW) * 1_000_000_000 + 31_300_000_000 + 1_000
    );
    assert!(until.duration_since(now) >= k8s_openapi::jiff::SignedDuration::try_from(HOLD).unwrap());
    assert_eq!(m.since, micro(at(NOW)));
    assert_eq!(p.next_hold_end, Some(HOLD + Duration::from_nanos(500)));
}

/// A Held record without `heldUntil` (edited status) is not treated as expired: unknown
/// means unsafe, so a full hold from now, persisted.
#[test]
fn held_without_an_end_gets_a_full_hold_from_now() {
    let mut m = held(0, "Q", "c1", at(NOW));
    m.held_until = None;
    let p = plan(
        &input(1, &[m], at(NOW)),
        &observed([(0, running("Q", false, "c1"))]),
    );
    let want = held_until(at(NOW), HOLD);
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(p.members[0].held_until.as_ref().map(|t| t.0), Some(want));
    assert!(p.releases.is_empty());
    // Next reconcile, the persisted end stands.
    let p2 = plan(
        &input(1, &p.members, at(NOW + 5)),
        &observed([(0, running("Q", false, "c1"))]),
    );
    assert_eq!(p2.members[0].held_until.as_ref().map(|t| t.0), Some(want));
}

/// A releasable slot whose process does not answer yet asks for a quick look again.
#[test]
fn awaiting_process_only_when_release_waits_on_the_process() {
    let mut lost = held(0, "Q", "c1", at(NOW - 1));
    (lost.state, lost.run_id, lost.container_id) = (MemberState::Lost, None, None);
    let p = plan(
        &input(1, &[lost], at(NOW)),
        &observed([(0, not_running("ContainerCreating"))]),
    );
    assert!(p.awaiting_process, "hold over, replacement not running yet");
    let expired = held(0, "Q", "c1", at(NOW - 1));
    let running_hold = held(0, "Q", "c1", at(NOW + 10));
    let p = plan(&input(1, &[running_hold], at(NOW)), &observed([(0, missing())]));
    assert!(
        !p.awaiting_process,
        "hold still running: the hold end schedules the next look"
    );
    let p = plan(
        &input(1, &[expired], at(NOW)),
        &observed([(0, running("Q", false, "c1"))]),
    );
    assert!(!p.awaiting_process && p.releases.len() == 1, "released now");
    let p = plan(&input(1, &[], at(NOW)), &observed([]));
    assert!(p.awaiting_process, "a new slot is released as soon as it answers");
}

/// A raised maxLockTTL lengthens holds already running, counted from when each started;
/// a lower hold never shortens one.
#[test]
fn the_hold_in_force_lengthens_running_holds() {
    let started = at(NOW - 10);
    let until = held_until(started, HOLD);
    let h = MemberStatus {
        hold_started_at: micro(started),
        ..held(0, "Q", "c2", until)
    };
    for (hold, want) in [
        (
            Duration::from_secs(120),
            held_until(started, Duration::from_secs(120)),
        ),
        (HOLD, until),
        (Duration::from_secs(3), until),
    ] {
        let p = plan(
            &PlanInput {
                hold,
                ..input(1, std::slice::from_ref(&h), at(NOW))
            },
            &observed([(0, running("Q", false, "c2"))]),
        );
        assert_eq!(p.members[0].held_until.as_ref().unwrap().0, want, "{hold:?}");
        assert_eq!(p.members[0].hold_started_at.as_ref().unwrap().0, started);
        assert!(p.releases.is_empty() && p.events.is_empty());
    }
    // A Lost slot's hold too, and a retired slot's.
    let l = MemberStatus {
        hold_started_at: micro(started),
        ..lost(0, until)
    };
    let long = Duration::from_secs(120);
    for instances in [1, 0] {
        let p = plan(
            &PlanInput {
                hold: long,
                ..input(instances, std::slice::from_ref(&l), at(NOW))
            },
            &observed([(0, missing())]),
        );
        assert_eq!(
            p.members[0].held_until.as_ref().unwrap().0,
            held_until(started, long),
            "N={instances}"
        );
    }
}

/// A scale-up's new members are held in full, and then stay fenced until every client
/// uses the new list (`confirmed`).
#[test]
fn new_members_stay_fenced_until_the_new_list_is_confirmed() {
    let until = at(NOW - 1);
    let members = [
        ready(0, "A", "c0"),
        ready(1, "B", "c1"),
        ready(2, "C", "c2"),
        held(3, "D", "c3", until),
    ];
    let obs = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, running("C", true, "c2")),
        (3, running("D", false, "c3")),
    ]);
    let unconfirmed = PlanInput {
        confirmed: 3,
        ..input(4, &members, at(NOW))
    };
    let p = plan(&unconfirmed, &obs);
    let m = p.members.iter().find(|m| m.slot == Slot::new(3)).unwrap();
    assert_eq!(m.state, MemberState::Held);
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("redlock.dev/clients-use-instances"),
        "{m:?}"
    );
    assert!(p.releases.is_empty());
    assert!(!p.awaiting_process, "no fast requeue while waiting for the user");
    let confirmed = plan(&input(4, &members, at(NOW)), &obs);
    assert_eq!(confirmed.releases, vec![(Slot::new(3), "D".to_owned())]);
}
