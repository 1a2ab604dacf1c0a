//! Members fenced on purpose (`kubectl redlock fence`), and unfenced.

use super::*;

fn fenced(reason: &str) -> BTreeMap<Slot, String> {
    [(Slot::new(0), reason.to_owned())].into()
}

fn plan_with(members: &[MemberStatus], request: &BTreeMap<Slot, String>, obs: SlotObservation) -> Plan {
    plan(
        &PlanInput {
            maintenance: request,
            ..input(1, members, at(NOW))
        },
        &observed([(0, obs)]),
    )
}

#[test]
fn a_serving_member_is_fenced_now_and_held_in_full() {
    let request = fenced("kernel upgrade");
    let p = plan_with(&[ready(0, "A", "c1")], &request, running("A", true, "c1"));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.maintenance.as_deref(), Some("kernel upgrade"));
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert_eq!(m.run_id.as_deref(), Some("A"));
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert!(p.releases.is_empty());
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == MemberReason::FencedForMaintenance && e.warning)
    );
}

#[test]
fn a_ready_member_whose_release_did_not_land_is_not_released_but_held() {
    let owed = [(Slot::new(0), "A".to_owned())];
    let p = plan(
        &PlanInput {
            maintenance: &fenced("x"),
            ..with_owed(input(1, &[ready(0, "A", "c1")], at(NOW)), &owed)
        },
        &observed([(0, running("A", false, "c1"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Held);
    assert!(p.releases.is_empty());
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
}

#[test]
fn an_unanswering_member_is_marked_but_not_counted_fenced_until_it_answers() {
    let r = MemberStatus {
        pod_ip: Some("10.0.0.1".into()),
        ..ready(0, "A", "c1")
    };
    let p = plan_with(&[r], &fenced("x"), unreachable("c1"));
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Ready, "nothing proves it is shut out");
    assert_eq!(m.maintenance.as_deref(), Some("x"));
    assert!(m.message.as_deref().unwrap().contains("not fenced yet"), "{m:?}");
    assert!(p.fences.is_empty() && p.releases.is_empty());
    // It answers at the next probe: fenced then, held in full from then.
    let later = plan_with(&p.members, &fenced("x"), running("A", true, "c1"));
    assert_eq!(later.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert_eq!(later.members[0].state, MemberState::Held);
    assert_eq!(later.members[0].held_until.as_ref().unwrap().0, hold_from_now());
    // Or its pod is force-deleted first: its process is looked for, as for any member.
    let gone = plan_with(&p.members, &fenced("x"), missing());
    assert_eq!(gone.members[0].state, MemberState::Lost);
    assert_eq!(gone.members[0].unstopped.as_ref().unwrap().run_id, "A");
    assert_eq!(gone.members[0].maintenance.as_deref(), Some("x"));
}

#[test]
fn a_process_still_looked_for_is_kept_when_the_member_is_fenced() {
    let mut r = ready(0, "B", "c2");
    r.unstopped = Some(UnstoppedProcess {
        run_id: "A".into(),
        pod_ip: "10.0.0.9".into(),
        listener: None,
        fenced: false,
        ..Default::default()
    });
    let p = plan_with(&[r], &fenced("x"), running("B", true, "c2"));
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(p.members[0].unstopped.as_ref().unwrap().run_id, "A");
}

#[test]
fn a_fenced_member_that_does_not_answer_after_its_hold_is_not_awaited() {
    let mut h = held(0, "A", "c1", at(NOW - 1));
    h.maintenance = Some("x".into());
    let p = plan_with(std::slice::from_ref(&h), &fenced("x"), unreachable("c1"));
    assert!(!p.awaiting_process, "a 100 ms loop for the whole maintenance");
    let p = plan_with(&[h], &BTreeMap::new(), unreachable("c1"));
    assert!(p.awaiting_process);
}

#[test]
fn a_removed_slot_loses_its_mark() {
    let mut h = held(1, "A", "c1", at(NOW + 10));
    h.maintenance = Some("x".into());
    let request: BTreeMap<Slot, String> = [(Slot::new(1), "x".to_owned())].into();
    let p = plan(
        &PlanInput {
            maintenance: &request,
            ..input(1, std::slice::from_ref(&h), at(NOW))
        },
        &observed([(0, running("Z", true, "c0")), (1, missing())]),
    );
    let m = p.members.iter().find(|m| m.slot == Slot::new(1)).unwrap();
    assert_eq!(m.maintenance, None);
}

#[test]
fn a_held_member_stays_held_after_its_hold_while_fenced() {
    let over = at(NOW - 1);
    let p = plan_with(
        &[held(0, "A", "c1", over)],
        &fenced("disk"),
        running("A", false, "c1"),
    );
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert!(p.releases.is_empty());
    assert!(
        m.message.as_deref().unwrap().contains("maintenance (disk)"),
        "{m:?}"
    );
    // Someone turns its client user on by hand: fenced again, held in full.
    let p = plan_with(
        &[held(0, "A", "c1", over)],
        &fenced("disk"),
        running("A", true, "c1"),
    );
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert_eq!(p.members[0].held_until.as_ref().unwrap().0, hold_from_now());
}

#[test]
fn a_restart_during_maintenance_restarts_the_hold_and_stays_fenced() {
    let mut h = held(0, "A", "c1", at(NOW + 10));
    h.maintenance = Some("x".into());
    let p = plan_with(&[h], &fenced("x"), running("B", false, "c2"));
    let m = &p.members[0];
    assert_eq!((m.state, m.run_id.as_deref()), (MemberState::Held, Some("B")));
    assert_eq!(m.maintenance.as_deref(), Some("x"));
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
}

#[test]
fn unfencing_lets_the_hold_end_as_it_would_have() {
    let none = BTreeMap::new();
    // Hold still running: stays held, told when it serves again.
    let mut h = held(0, "A", "c1", at(NOW + 10));
    h.maintenance = Some("x".into());
    let p = plan_with(std::slice::from_ref(&h), &none, running("A", false, "c1"));
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(p.members[0].maintenance, None);
    assert!(p.releases.is_empty());
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::Unfenced)
        .unwrap();
    assert!(e.message.contains("once its hold ends"), "{}", e.message);
    // Hold over: released at once.
    h.held_until = micro(at(NOW - 1));
    h.hold_started_at = started_for(at(NOW - 1));
    let p = plan_with(&[h], &none, running("A", false, "c1"));
    assert_eq!(p.members[0].state, MemberState::Ready);
    assert_eq!(p.releases, vec![(Slot::new(0), "A".to_owned())]);
    let e = p
        .events
        .iter()
        .find(|e| e.reason == MemberReason::Unfenced)
        .unwrap();
    assert!(e.message.ends_with("again now"), "{}", e.message);
}

#[test]
fn starting_and_lost_members_are_marked_and_never_released_while_fenced() {
    let p = plan_with(&[starting(0)], &fenced("x"), running("A", false, "c1"));
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(p.members[0].maintenance.as_deref(), Some("x"));
    let p = plan_with(&[lost(0, at(NOW - 1))], &fenced("x"), running("A", false, "c1"));
    assert_eq!(p.members[0].state, MemberState::Held);
    assert!(p.releases.is_empty());
}
