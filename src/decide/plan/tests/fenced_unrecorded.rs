//! Processes this operator fenced ahead of a status write that did not land
//! (`crate::hold::fence_ahead`): no rule releases them until a write that holds them is on record,
//! neither "released again" from a `Ready` record nor at a stored hold's earlier end.

use super::*;
use crate::hold::fence_ahead;

/// `input` with `fenced` as the processes fenced ahead of a write that did not land.
fn with_fenced<'a>(input: PlanInput<'a>, fenced: &'a [(Slot, String)]) -> PlanInput<'a> {
    PlanInput {
        timing: Timing {
            fenced_unrecorded: fenced,
            ..input.timing
        },
        ..input
    }
}

fn fenced(slot: i32, run: &str) -> Vec<(Slot, String)> {
    vec![(Slot::new(slot), run.to_owned())]
}

/// "`Ready`, same process, still fenced → released again" (a crash between a `Ready` write
/// and its release) never undoes a fence of this operator whose hold is not on record: the
/// process is held in full from now instead, and fenced again if it serves.
#[test]
fn a_ready_process_fenced_ahead_of_its_write_is_held_not_released_again() {
    let members = [ready(0, "R", "c1")];
    let still_fenced = observed([(0, running("R", false, "c1"))]);
    // Without the guard's memory, its release owed: released again (it failed to send).
    let owed = fenced(0, "R");
    let p = plan(&with_owed(input(1, &members, at(NOW)), &owed), &still_fenced);
    assert_eq!(p.releases, fenced(0, "R"));
    assert_eq!(p.members[0].state, MemberState::Ready);

    let mine = fenced(0, "R");
    let p = plan(
        &with_fenced(with_owed(input(1, &members, at(NOW)), &owed), &mine),
        &still_fenced,
    );
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    assert!(p.fences.is_empty(), "already fenced: {:?}", p.fences);
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(m.run_id.as_deref(), Some("R"));
    assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
    assert!(
        m.message
            .as_deref()
            .unwrap()
            .contains("fenced by this operator ahead of a status write"),
        "{m:?}"
    );
    assert_eq!(reasons(&p), vec![(0, MemberReason::HoldStarted)]);

    // Let in again meanwhile (someone ran `ACL SETUSER <client> on`): fenced again.
    let serving = observed([(0, running("R", true, "c1"))]);
    let p = plan(&with_fenced(input(1, &members, at(NOW)), &mine), &serving);
    assert_eq!(p.fences, fenced(0, "R"));
    assert!(p.releases.is_empty());
    assert_eq!(p.members[0].state, MemberState::Held);
    assert_eq!(
        reasons(&p),
        vec![(0, MemberReason::HoldStarted), (0, MemberReason::Refenced)]
    );

    // Another process of the slot, or the same run id on another slot, is not held back (its
    // release owed).
    for other in [fenced(0, "OLD"), fenced(1, "R")] {
        let p = plan(
            &with_fenced(with_owed(input(1, &members, at(NOW)), &owed), &other),
            &still_fenced,
        );
        assert_eq!(p.releases, fenced(0, "R"), "{other:?}");
    }
}

/// A hold whose end has passed on record is not released while this operator has fenced its
/// process again ahead of a write that did not land (a re-fence restarts the hold, and the
/// stored end is the earlier one): the record says why it waits.
#[test]
fn a_held_process_fenced_ahead_of_its_write_is_not_released_at_the_stored_end() {
    let members = [held(0, "R", "c1", at(NOW - 5))];
    let obs = observed([(0, running("R", false, "c1"))]);
    let p = plan(&input(1, &members, at(NOW)), &obs);
    assert_eq!(p.releases, fenced(0, "R"), "the control: released at its end");

    let mine = fenced(0, "R");
    let p = plan(&with_fenced(input(1, &members, at(NOW)), &mine), &obs);
    assert!(p.releases.is_empty(), "{:?}", p.releases);
    let m = &p.members[0];
    assert_eq!(m.state, MemberState::Held);
    assert_eq!(
        m.message.as_deref(),
        Some(format!("hold ended; release waits: {FENCE_NOT_ON_RECORD}").as_str())
    );
    // Its fence's own record, which the next reconcile plans from (`fence_ahead::as_fenced`),
    // restarts the hold: found serving inside it, the process is fenced again.
    let refenced = [held(0, "R", "c1", hold_from_now())];
    let serving = observed([(0, running("R", true, "c1"))]);
    let p = plan(&with_fenced(input(1, &refenced, at(NOW + 1)), &mine), &serving);
    assert_eq!(p.fences, fenced(0, "R"));
    assert!(p.releases.is_empty());
}

/// The whole round: a clock jump fences a `Ready` member and its write is refused. The next
/// reconciles plan from the record the fence made (`fence_ahead::as_fenced`), also after the
/// stored record would have let it go, and release nothing while writes fail; once a write
/// holding it lands, the hold ends at its own end and the member is released.
#[test]
fn a_fence_whose_write_is_refused_holds_until_a_write_lands_and_its_hold_has_run() {
    let stored = vec![ready(0, "A", "c1")];
    let jumped = SlotObservation {
        clock: Some(Verdict::JumpedForward {
            by: secs(60),
            unwatched_since: None,
        }),
        ..running("A", true, "c1")
    };
    let decided = plan(&input(1, &stored, at(NOW)), &observed([(0, jumped)]));
    assert_eq!(decided.fences, fenced(0, "A"));
    let until = decided.members[0].held_until.as_ref().unwrap().0;
    // The write is refused: the fence is remembered.
    let kept = fence_ahead::unrecorded(&stored, &decided.members, &decided.fences);
    let mine = fence_ahead::processes(&kept);
    let planned_from = fence_ahead::as_fenced(&stored, &kept);
    assert_eq!(planned_from, decided.members);

    let after_fence = observed([(0, running("A", false, "c1"))]);
    for now in [at(NOW + 1), until, at(NOW + 600)] {
        let p = plan(&with_fenced(input(1, &planned_from, now), &mine), &after_fence);
        assert!(p.releases.is_empty(), "at {now}: {:?}", p.releases);
        assert_eq!(p.members[0].state, MemberState::Held, "at {now}");
        // What the stored record alone would have done, had a release of it been owed:
        // released again at once.
        let owed = fenced(0, "A");
        let unguarded = plan(&with_owed(input(1, &stored, now), &owed), &after_fence);
        assert_eq!(unguarded.releases, fenced(0, "A"), "the control at {now}");
    }

    // A write holding it landed (the memory is cleared): the hold runs to its own end.
    let on_record = plan(&input(1, &planned_from, at(NOW + 1)), &after_fence).members;
    assert_eq!(on_record[0].held_until.as_ref().unwrap().0, until);
    let before_end = plan(&input(1, &on_record, at(NOW + 30)), &after_fence);
    assert!(before_end.releases.is_empty());
    let at_end = plan(&input(1, &on_record, until), &after_fence);
    assert_eq!(at_end.releases, fenced(0, "A"));
    assert_eq!(at_end.members[0].state, MemberState::Ready);
}
