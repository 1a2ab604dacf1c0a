//! Clocks: this operator process's own timing of holds (docs/design.md §9.1), and a member's
//! clock that jumps or steps back.

use super::*;

// --- This process's own timing (docs/design.md §9.1) ---

/// A hold recorded by another leader (whose clock ran 20 s behind, so its record ends 20 s
/// early in real time) is timed again in full by this process: not released at its
/// recorded end, but one full hold after this process first saw it.
#[test]
fn an_inherited_hold_is_timed_again_in_full() {
    let until = at(NOW - 5);
    let members = [held(0, "A", "c1", until)];
    let obs = observed([(0, running("A", false, "c1"))]);
    let fresh = ClusterTimers::default();
    let new_leader = PlanInput {
        timing: Timing {
            timers: &fresh,
            ..Timing::default()
        },
        ..input(1, &members, at(NOW))
    };
    let p = plan(&new_leader, &obs);
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    // The hold keeps its identity (its start), so the next reconcile finds its timer.
    assert_eq!(m.hold_started_at, started_for(until));
    assert!(
        m.message.as_deref().unwrap().contains("did not see it start"),
        "{m:?}"
    );
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].reason, MemberReason::HoldExtended);

    // Timers kept as `reconcile` keeps them: released exactly one hold after first sight.
    let timers = fresh.next(hold_timer_keys(&p.members, HOLD), Reading::at(at(NOW)));
    let later = |now: Timestamp| PlanInput {
        timing: Timing {
            timers: &timers,
            ..Timing::default()
        },
        ..input(1, &p.members, now)
    };
    let before = plan(&later(at(NOW + 31)), &obs);
    assert!(before.releases.is_empty());
    assert!(before.events.is_empty(), "{:?}", before.events);
    let after = plan(&later(hold_from_now()), &obs);
    assert_eq!(after.releases, vec![(Slot::new(0), "A".to_owned())]);
}

/// The wall clock stepped 20 s forward after this process started the hold: the hold
/// ends 20 s later on the wall clock, i.e. after a full hold of real time.
#[test]
fn a_forward_step_of_the_wall_clock_lengthens_running_holds() {
    let until = hold_from_now();
    let members = [held(0, "A", "c1", until)];
    let obs = observed([(0, running("A", false, "c1"))]);
    let base = input(1, &members, at(NOW + 25));
    let stepped = PlanInput {
        timing: Timing {
            skipped: secs(20),
            ..base.timing
        },
        ..input(1, &members, at(NOW + 25))
    };
    // Without the step the hold would end at `until` (< now + 25 s + step).
    let p = plan(&stepped, &obs);
    assert!(p.releases.is_empty());
    let want = until.checked_add(SignedDuration::from_secs(20)).unwrap();
    assert_eq!(p.members[0].held_until.as_ref().unwrap().0, want);
    let message = p.members[0].message.clone().unwrap();
    assert!(message.contains("forward step"), "{message}");
    assert_eq!(p.events[0].reason, MemberReason::HoldExtended);
    // The hold's cause (here the fixture's "held") stays first.
    assert!(message.starts_with("held; hold lengthened"), "{message}");
    let end = PlanInput { now: want, ..stepped };
    assert_eq!(plan(&end, &obs).releases.len(), 1);
}

/// While the operator's clock may be too far off the API server's, a hold that has ended
/// stays held and says why; the re-release of a `Ready` member left fenced waits too.
#[test]
fn releases_wait_while_the_clock_is_not_trusted() {
    let members = [held(0, "A", "c1", at(NOW - 1)), ready(1, "B", "c2")];
    let obs = observed([(0, running("A", false, "c1")), (1, running("B", false, "c2"))]);
    // B's release was decided by this process and has not landed (a release owed).
    let owed = [(Slot::new(1), "B".to_owned())];
    let base = with_owed(input(2, &members, at(NOW)), &owed);
    let blocked = PlanInput {
        timing: Timing {
            release_blocked: Some("clock off by 20 s"),
            ..base.timing
        },
        ..base
    };
    let p = plan(&blocked, &obs);
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(
        p.members[0].message.as_deref(),
        Some("hold ended; release waits: clock off by 20 s")
    );
    assert_eq!(p.members[1].state, MemberState::Ready);
    let p = plan(&base, &obs);
    assert_eq!(
        p.releases,
        vec![(Slot::new(0), "A".to_owned()), (Slot::new(1), "B".to_owned())]
    );
}

/// A serving member whose clock jumped forward is fenced and held in full, with a
/// ClockJump warning; a backward step is reported and changes nothing.
#[test]
fn a_member_clock_jump_fences_and_holds_a_serving_member() {
    let members = [ready(0, "A", "c1")];
    let jumped = SlotObservation {
        clock: Some(Verdict::JumpedForward {
            by: secs(60),
            unwatched_since: None,
        }),
        ..running("A", true, "c1")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, jumped)]));
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert!(p.releases.is_empty());
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("A"));
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("clock jumped 60.000 s forward"),
        "{m:?}"
    );
    let reasons: Vec<_> = p.events.iter().map(|e| e.reason).collect();
    assert!(
        reasons.contains(&MemberReason::ClockJump) && p.events.iter().any(|e| e.warning),
        "{reasons:?}"
    );

    let back = SlotObservation {
        clock: Some(Verdict::SteppedBack { by: secs(60) }),
        ..running("A", true, "c1")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, back)]));
    assert!(p.fences.is_empty());
    assert_eq!(p.members[0].state, MemberState::Ready);
    assert_eq!(p.events[0].reason, MemberReason::ClockStepBack);
}

/// A lengthened hold keeps its cause in the member's message (e.g. a clock jump: the member's
/// message must say why it is held), names each reason for lengthening once, and ends with
/// the new end.
#[test]
fn a_lengthened_hold_keeps_its_cause_in_the_message() {
    use super::super::holds::lengthened_message;
    let t1 = at(NOW + 10);
    let t2 = at(NOW + 20);
    let step = "hold lengthened by a forward step of the operator's wall clock";
    let jumped = format!(
        "locks-1: its clock jumped 60.000 s forward; held until {}",
        at(NOW)
    );
    let once = lengthened_message(Some(&jumped), step, t1);
    assert_eq!(
        once,
        format!("locks-1: its clock jumped 60.000 s forward; {step}; held until {t1}")
    );
    assert_eq!(
        lengthened_message(Some(&once), step, t2),
        format!("locks-1: its clock jumped 60.000 s forward; {step}; held until {t2}")
    );
    let policy = "hold lengthened to the maxLockTTL in force";
    assert_eq!(
        lengthened_message(Some(&once), policy, t2),
        format!("locks-1: its clock jumped 60.000 s forward; {step}; {policy}; held until {t2}")
    );
    assert_eq!(
        lengthened_message(None, step, t1),
        format!("{step}; held until {t1}")
    );
}

/// A jump found against the reading on record (no leader probed the member in between) is
/// handled as any jump, and the message says how it was found.
#[test]
fn a_jump_found_against_the_record_fences_and_says_no_leader_probed() {
    let members = [ready(0, "A", "c1")];
    let jumped = SlotObservation {
        clock: Some(Verdict::JumpedForward {
            by: secs(60),
            unwatched_since: Some(at(NOW - 30)),
        }),
        ..running("A", true, "c1")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, jumped)]));
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    let text = m.message.as_deref().unwrap();
    assert!(
        text.contains("jumped 60.000 s forward at least") && text.contains("no leader probed it in between"),
        "{text}"
    );
}

/// The clock on record follows the process a record is about, whichever state built the
/// record: a new reading of that process replaces it, a record about another process is
/// dropped, and a member without a known process carries none.
#[test]
fn the_clock_on_record_follows_the_records_process() {
    let reading = |run: &str, low: i64| ClockRecord {
        run_id: run.into(),
        offset_low_millis: low,
        offset_high_millis: low + 100,
        read_at: MicroTime(at(NOW)),
    };
    let mut member = ready(0, "A", "c1");
    member.clock = Some(reading("A", 0));
    let members = [member];
    // Nothing new read: the record stays.
    let p = plan(
        &input(1, &members, at(NOW)),
        &observed([(0, running("A", true, "c1"))]),
    );
    assert_eq!(p.members[0].clock, Some(reading("A", 0)));
    // A new reading of the same process replaces it.
    let read = SlotObservation {
        clock_record: Some(reading("A", 500)),
        ..running("A", true, "c1")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, read)]));
    assert_eq!(p.members[0].clock, Some(reading("A", 500)));
    // Another process (a restart): held, with its own reading, never the old one.
    let restarted = SlotObservation {
        clock_record: Some(reading("B", 7)),
        ..running("B", false, "c2")
    };
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, restarted)]));
    assert_eq!(p.members[0].run_id.as_deref(), Some("B"));
    assert_eq!(p.members[0].clock, Some(reading("B", 7)));
    let unread = running("B", false, "c2");
    let p = plan(&input(1, &members, at(NOW)), &observed([(0, unread)]));
    assert_eq!(p.members[0].clock, None, "{:?}", p.members[0]);
}

/// A status wiped while a member's clock jumped: the process serves, so it is adopted, and
/// then judged as any `Ready` member: its jump fences and holds it (the model check's
/// two-fault trace `a_wiped_status_does_not_adopt_a_member_whose_clock_jumped`).
#[test]
fn a_serving_process_adopted_after_a_wipe_is_fenced_if_its_clock_jumped() {
    let jumped = SlotObservation {
        clock: Some(Verdict::JumpedForward {
            by: secs(15),
            unwatched_since: None,
        }),
        ..running("A", true, "c0")
    };
    let p = plan(&input(1, &[], at(NOW)), &observed([(0, jumped)]));
    let m = &p.members[0];
    assert!(m.state.is_holding(), "{m:?}");
    assert_eq!(p.fences, vec![(Slot::new(0), "A".to_owned())]);
    assert!(
        reasons(&p).contains(&(0, MemberReason::ClockJump)),
        "{:?}",
        p.events
    );
    // Without a jump it is adopted as it serves.
    let p = plan(
        &input(1, &[], at(NOW)),
        &observed([(0, running("A", true, "c0"))]),
    );
    assert_eq!(p.members[0].state, MemberState::Ready);
    assert!(p.fences.is_empty());
}
