//! Processes that outlived their pods (docs/design.md §9.5), of members and of removed slots.

use super::*;

// --- A process that outlived its pod (docs/design.md §9.5) ---

fn zombie_answers(run: &str, enabled: bool) -> Option<Result<RedisInfo, String>> {
    Some(Ok(RedisInfo {
        run_id: run.into(),
        version: "7.0.15".into(),
        client_enabled: enabled,
        pod_uid: None,
        client_password_hashes: None,
        admin_password_hashes: None,
    }))
}

/// Audit finding D: a scale-down 3 → 2 while slot 2's node is cut off, and its pod is
/// force-deleted before the operator could fence it. Clients still told the list of 3
/// reach the process where it runs: it is looked for there, fenced when found serving
/// (the hold, and with it the shorter list, wait), and marked fenced when seen so.
#[test]
fn a_removed_members_process_that_outlives_its_pod_is_looked_for_and_fenced() {
    let members = [
        ready(0, "A", "c0"),
        ready(1, "B", "c1"),
        MemberStatus {
            pod_ip: Some("10.1.0.9".into()),
            ..ready(2, "C", "c2")
        },
    ];
    fn published(members: &[MemberStatus], now: Timestamp) -> PlanInput<'_> {
        PlanInput {
            published: 3,
            ..input(2, members, now)
        }
    }
    let vanished = |unstopped| {
        let mut o = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, missing()),
        ]);
        o.get_mut(&Slot::new(2)).unwrap().unstopped = unstopped;
        o
    };
    // It does not answer the operator (the partition cuts the operator off too): the
    // fence is not proven, and the record keeps which process it was.
    let silent = observed([
        (0, running("A", true, "c0")),
        (1, running("B", true, "c1")),
        (2, unreachable("c2")),
    ]);
    let p = plan(&published(&members, at(NOW - 1)), &silent);
    assert_eq!(p.members[2].held_until, None);
    assert_eq!(p.members[2].run_id.as_deref(), Some("C"));
    // Then its pod is force-deleted.
    let p = plan(&published(&p.members, at(NOW)), &vanished(None));
    let m = &p.members[2];
    assert!(m.state.is_holding(), "{m:?}");
    assert_eq!(
        m.unstopped,
        Some(UnstoppedProcess {
            run_id: "C".into(),
            pod_ip: "10.1.0.9".into(),
            listener: None,
            fenced: false
        }),
        "{m:?}"
    );
    assert!(
        m.message.as_deref().unwrap().contains("never seen to stop"),
        "{m:?}"
    );

    // Found letting clients in where it ran: fenced there, the hold restarts.
    let later = at(NOW + 20);
    let p2 = plan(
        &published(&p.members, later),
        &vanished(zombie_answers("C", true)),
    );
    assert_eq!(p2.fences, vec![(Slot::new(2), "C".to_owned())]);
    assert!(
        p2.events
            .iter()
            .any(|e| e.reason == MemberReason::UnstoppedProcessFenced)
    );
    let m2 = &p2.members[2];
    assert!(
        m2.held_until.as_ref().unwrap().0 > m.held_until.as_ref().unwrap().0,
        "{m2:?}"
    );
    assert!(!m2.unstopped.as_ref().unwrap().fenced);
    // The shorter list waits for that hold.
    let limits = crate::resize::after_plan(
        crate::resize::Limits {
            published: 3,
            confirmed: 2,
            token: None,
        },
        2,
        &p2.members,
        &vanished(None),
        at(NOW + 40),
    );
    assert_eq!(limits.published, 3);

    // Seen fenced: it grants nothing, and is not looked for any more.
    let p3 = plan(
        &published(&p2.members, at(NOW + 21)),
        &vanished(zombie_answers("C", false)),
    );
    assert!(p3.fences.is_empty());
    assert!(p3.members[2].unstopped.as_ref().unwrap().fenced);
    assert_eq!(p3.members[2].held_until, m2.held_until);
}

#[test]
fn a_pod_that_vanishes_while_its_process_runs_leaves_an_unstopped_process() {
    let members = [MemberStatus {
        pod_ip: Some("10.1.0.7".into()),
        ..ready(0, "A", "c1")
    }];
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, missing())]));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Lost);
    assert_eq!(
        m.unstopped,
        Some(UnstoppedProcess {
            run_id: "A".into(),
            pod_ip: "10.1.0.7".into(),
            listener: None,
            fenced: false
        })
    );
    assert!(
        m.message.as_deref().unwrap().contains("looked for at 10.1.0.7"),
        "{m:?}"
    );
    assert_eq!(p.create_pods, vec![Slot::new(0)]);
    // A container seen stopped is a process seen to stop: nothing to look for.
    let stopped = SlotObservation {
        pod: PodState::NotRunning {
            reason: "Error".into(),
        },
        ..Default::default()
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, stopped)]));
    assert_eq!(p.members[0].unstopped, None);
    // A pod the control plane marked failed (its node deleted) without any kubelet
    // reporting its container stopped: not a process seen to stop either.
    let marked_failed = SlotObservation {
        stop_unconfirmed: true,
        ..finished("Failed (DeletionByPodGC)")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, marked_failed)]));
    assert_eq!(
        p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
        Some("A")
    );
    // Finished with its container seen terminated: stopped.
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, finished("Failed"))]));
    assert_eq!(p.members[0].unstopped, None);
}

fn with_unstopped(m: MemberStatus, fenced: bool) -> MemberStatus {
    MemberStatus {
        unstopped: Some(UnstoppedProcess {
            run_id: "A".into(),
            pod_ip: "10.1.0.7".into(),
            listener: None,
            fenced,
        }),
        ..m
    }
}

#[test]
fn an_unstopped_process_found_serving_is_fenced_and_the_hold_restarts() {
    // The replacement B has served its hold; the old process A still answers at its
    // address and lets clients in.
    let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
    let obs = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    let m = &p.members[0];
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert!(!m.unstopped.as_ref().unwrap().fenced);
    assert_eq!(p.events[0].reason, MemberReason::UnstoppedProcessFenced);

    // Seen fenced at the next probe: recorded, and the hold runs out without a warning.
    let obs = SlotObservation {
        unstopped: zombie_answers("A", false),
        ..running("B", false, "c2")
    };
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, obs.clone())]));
    assert!(p2.members[0].unstopped.as_ref().unwrap().fenced);
    let p3 = plan(&input(1, &p2.members, hold_from_now()), &observed([(0, obs)]));
    assert_eq!(p3.releases, vec![(Slot::new(0), "B".to_owned())]);
    assert!(
        p3.events
            .iter()
            .all(|e| e.reason != MemberReason::ReleaseAssumesProcessGone)
    );
    assert_eq!(p3.members[0].unstopped, None);
}

#[test]
fn a_replacement_lost_in_turn_keeps_looking_for_the_earlier_process() {
    // Released relying on A being dead; then B, the replacement, is killed (its pod
    // stays): the new hold still looks for A, and finding it serving fences it.
    let members = [with_unstopped(ready(0, "B", "c2"), false)];
    let restarted = SlotObservation {
        unstopped: Some(Err("connect timed out".into())),
        ..running("C", false, "c3")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, restarted)]));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("C"));
    assert_eq!(m.unstopped.as_ref().map(|u| u.run_id.as_str()), Some("A"));
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("still looked for at 10.1.0.7"),
        "{m:?}"
    );
    let found = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("C", false, "c3")
    };
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, found)]));
    assert_eq!(p2.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert!(p2.releases.is_empty());

    // B's pod vanished unseen as well: B is looked for now, and A's end is told.
    let b_vanished = [MemberStatus {
        pod_ip: Some("10.1.0.8".into()),
        ..with_unstopped(ready(0, "B", "c2"), false)
    }];
    let p = plan(&input(1, &b_vanished, at(NOW)), &observed([(0, missing())]));
    assert_eq!(
        p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
        Some("B")
    );
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::ReleaseAssumesProcessGone)
        .expect("told");
    assert!(e.message.contains("process A"), "{}", e.message);

    // An earlier process already seen fenced is not looked for again.
    let members = [with_unstopped(ready(0, "B", "c2"), true)];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, running("C", false, "c3"))]),
    );
    assert_eq!(p.members[0].unstopped, None);
}

#[test]
fn a_release_without_finding_the_unstopped_process_says_what_it_relies_on() {
    let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
    let obs = SlotObservation {
        unstopped: Some(Err("connect timed out".into())),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
    assert_eq!(p.releases, vec![(Slot::new(0), "B".to_owned())]);
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::ReleaseAssumesProcessGone)
        .expect("told");
    assert!(e.warning);
    assert!(
        e.message
            .contains("nothing answered at 10.1.0.7 (connect timed out)"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("relies on that process being dead"),
        "{}",
        e.message
    );
    // Before the hold ends it is only carried along.
    let members = [with_unstopped(held(0, "B", "c2", at(NOW + 5)), false)];
    let obs = SlotObservation {
        unstopped: Some(Err("connect timed out".into())),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
    assert!(p.releases.is_empty() && p.events.is_empty());
    assert!(p.members[0].unstopped.is_some());
}

#[test]
fn a_process_released_past_is_still_looked_for_and_fenced_with_its_slot_when_it_answers() {
    // Released relying on A being dead (nothing answered at its address): the record
    // keeps looking for it.
    let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
    let unreachable = SlotObservation {
        unstopped: Some(Err("connect timed out".into())),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, unreachable)]));
    assert_eq!(p.releases, vec![(Slot::new(0), "B".to_owned())]);
    let released = &p.members[0];
    assert_eq!(released.state, MemberState::Ready);
    assert!(!released.unstopped.as_ref().unwrap().fenced, "{released:?}");
    assert!(
        released
            .message
            .as_deref()
            .unwrap()
            .contains("still looked for at 10.1.0.7"),
        "{released:?}"
    );

    // Still nothing there: B serves on, A is looked for again.
    let quiet = SlotObservation {
        unstopped: Some(Err("connect timed out".into())),
        ..running("B", true, "c2")
    };
    let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, quiet)]));
    assert_eq!(p2.members[0].state, MemberState::Ready);
    assert!(p2.fences.is_empty() && p2.events.is_empty());
    assert!(p2.members[0].unstopped.is_some());

    // A answers and lets clients in: both are fenced, B is held in full from now.
    let back = SlotObservation {
        unstopped: zombie_answers("A", true),
        ..running("B", true, "c2")
    };
    let p3 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, back)]));
    assert_eq!(
        p3.fences,
        vec![(Slot::new(0), "A".to_owned()), (Slot::new(0), "B".to_owned())]
    );
    let m = &p3.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("B"));
    assert_eq!(
        m.held_until.as_ref().unwrap().0,
        held_until(at(NOW + 2), input(1, &p2.members, at(NOW + 2)).hold)
    );
    assert!(!m.unstopped.as_ref().unwrap().fenced);
    assert!(
        p3.events
            .iter()
            .any(|e| e.reason == MemberReason::UnstoppedProcessFenced && e.warning)
    );

    // A seen fenced while B serves: it grants nothing, and is no longer looked for.
    let fenced = SlotObservation {
        unstopped: zombie_answers("A", false),
        ..running("B", true, "c2")
    };
    let p4 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, fenced)]));
    assert_eq!(p4.members[0].state, MemberState::Ready);
    assert_eq!(p4.members[0].unstopped, None);
    assert!(p4.fences.is_empty());
}

/// The mode a process listens in is recorded with its address, and goes with it into the
/// unstopped record: during a TLS toggle's rollout a process that outlives its pod listens
/// in the mode its pod was built with, not the spec's.
#[test]
fn the_listener_is_recorded_with_the_address_and_kept_for_an_unstopped_process() {
    let tls = |secret: Option<&str>| SlotObservation {
        pod_ip: Some("10.1.0.7".parse().unwrap()),
        tls_secret: secret.map(str::to_owned),
        ..running("A", true, "c1")
    };
    let old_tls = Some(Listener {
        tls_secret: Some("old-tls".into()),
    });
    // A record without a listener (made before it was kept) gets the one of its address.
    let members = [MemberStatus {
        pod_ip: Some("10.1.0.7".into()),
        ..ready(0, "A", "c1")
    }];
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, tls(Some("old-tls")))]),
    );
    assert_eq!(p.members[0].listener, old_tls);
    // A plain process: a listener without a Secret (not the same as unknown).
    let p_plain = plan(&input(1, &members, at(NOW)), &observed([(0, tls(None))]));
    assert_eq!(p_plain.members[0].listener, Some(Listener::default()));
    // Without an answer at an address, nothing is recorded about how it listens.
    let silent = SlotObservation {
        probe: Probe::NotProbed,
        ..tls(Some("old-tls"))
    };
    let p_silent = plan(&input(1, &members, at(NOW)), &observed([(0, silent)]));
    assert_eq!(p_silent.members[0].listener, None);
    // The pod vanishes: the process is looked for in the mode it was recorded in.
    let p = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, missing())]));
    let u = p.members[0].unstopped.as_ref().expect("looked for");
    assert_eq!(u.listener, old_tls);
}
