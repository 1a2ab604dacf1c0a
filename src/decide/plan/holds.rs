//! Holds: starting, restarting and extending one, fencing a process that serves during it,
//! and timing when a running hold ends (the recorded end, the hold in force, and this
//! operator process's own clock).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::identity::{Process, fresh_record, record_of, running_process};
use super::input::PlanInput;
use super::step::Step;
use crate::clock::Reading;
use crate::clock::timers::TimerKey;
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::SlotObservation;
use crate::hold::{floor_micros, held_until};

/// `next` held in full from now: its hold restarts here and never ends earlier than `until`.
pub(super) fn restart_hold(
    input: &PlanInput<'_>,
    mut next: MemberStatus,
    until: Timestamp,
    what: &str,
) -> MemberStatus {
    let extended = held_until(input.now, input.hold).max(until);
    next.held_until = Some(MicroTime(extended));
    next.hold_started_at = Some(MicroTime(floor_micros(input.now)));
    next.message = Some(format!("{what}; held until {extended}"));
    next
}

/// A further crash during a hold: the hold runs again from this observation (never ending
/// earlier than it did). `what` goes into the record, `event_what` into the event.
pub(super) fn extend_hold(
    input: &PlanInput<'_>,
    next: MemberStatus,
    until: Timestamp,
    what: &str,
    event_what: &str,
    step: &mut Step,
) -> MemberStatus {
    let next = restart_hold(input, next, until, what);
    let extended = next.held_until.as_ref().expect("just set").0;
    step.tell(
        next.slot,
        MemberReason::HoldExtended,
        format!("{}: {event_what}; fenced until {extended}", next.name),
        true,
    );
    next
}

/// A hold starting now: `Held` about the running process, or `Lost` when none runs.
pub(super) fn start_hold(
    input: &PlanInput<'_>,
    slot: Slot,
    obs: &SlotObservation,
    why: String,
    step: &mut Step,
) -> MemberStatus {
    let until = held_until(input.now, input.hold);
    let mut m = match running_process(obs) {
        Some(p) => record_of(input, slot, MemberState::Held, &p),
        None => fresh_record(input, slot, MemberState::Lost),
    };
    m.held_until = Some(MicroTime(until));
    m.hold_started_at = Some(MicroTime(floor_micros(input.now)));
    m.message = Some(format!("{why}; held until {until}"));
    step.tell(
        slot,
        MemberReason::HoldStarted,
        format!("{}: {why}; fenced until {until} (hold {:?})", m.name, input.hold),
        false,
    );
    m
}

/// A process serving clients while its record says it must be held (someone ran `ACL
/// SETUSER`, an edited ACL Secret): fence it again and hold it in full from now.
pub(super) fn refence(
    input: &PlanInput<'_>,
    next: MemberStatus,
    until: Timestamp,
    run_id: &str,
    step: &mut Step,
) -> MemberStatus {
    step.fence = Some(run_id.to_owned());
    let next = restart_hold(
        input,
        next,
        until,
        "found serving clients while it must be held; fenced again",
    );
    let extended = next.held_until.as_ref().expect("just set").0;
    step.tell(
        next.slot,
        MemberReason::Refenced,
        format!(
            "{}: process {run_id} served lock clients during its hold (its client ACL user was turned on outside the operator); fenced again and held until {extended}",
            next.name
        ),
        true,
    );
    next
}

/// A hold that just started (or restarted) about a process that already serves clients (an
/// edited ACL Secret let it start unfenced): fence it too. The hold already counts from now.
pub(super) fn fence_if_serving(held: MemberStatus, p: Option<&Process<'_>>, step: &mut Step) -> MemberStatus {
    if let Some(p) = p
        && p.client_enabled == Some(true)
        && let Some(run_id) = p.run_id
    {
        step.fence = Some(run_id.to_owned());
        step.tell(
            held.slot,
            MemberReason::Refenced,
            format!(
                "{}: process {run_id} started serving lock clients without a release (its client ACL user is on: an edited ACL Secret?); fenced",
                held.name
            ),
            true,
        );
    }
    held
}

/// When `m`'s running hold ends, lengthened to the hold in force: a raised maxLockTTL applies
/// to holds already running, counted from when each started. A record without an end (an
/// edited status, a removed process of unknown history) gets a full hold from now: unknown
/// means unsafe.
///
/// And never before this process has itself seen the hold run in full on its own clock
/// ([`crate::clock::timers`]): a hold recorded by another leader, or before a step of this
/// process's wall clock, is timed again, so no operator clock can shorten it.
pub(super) fn hold_end(input: &PlanInput<'_>, m: &MemberStatus) -> (Timestamp, Timestamp) {
    let Some(until) = m.held_until.as_ref().map(|t| t.0) else {
        return (held_until(input.now, input.hold), floor_micros(input.now));
    };
    let started = hold_start(m, input.hold).expect("a hold with an end has a start");
    let timed = input.timing.timers.earliest_end(
        TimerKey::Hold {
            slot: m.slot,
            started,
        },
        input.hold,
        Reading {
            wall: input.now,
            skipped: input.timing.skipped,
        },
    );
    (until.max(held_until(started, input.hold)).max(timed), started)
}

/// Why this process timed a hold again: it had not seen it start, or its clock stepped.
fn retimed_why(input: &PlanInput<'_>, slot: Slot, started: Timestamp) -> &'static str {
    if input.timing.timers.knows(TimerKey::Hold { slot, started }) {
        "hold lengthened by a forward step of the operator's wall clock"
    } else {
        "hold timed again in full by this operator process, which did not see it start (a leader change or an operator restart): another operator's clock cannot shorten it"
    }
}

/// When `m`'s running hold started (`holdStartedAt`; for records from before it existed,
/// the start that gives their end). What identifies the hold to [`crate::clock::timers`].
pub(crate) fn hold_start(m: &MemberStatus, hold: Duration) -> Option<Timestamp> {
    if let Some(t) = &m.hold_started_at {
        return Some(t.0);
    }
    let until = m.held_until.as_ref()?.0;
    let hold = SignedDuration::try_from(hold).expect("hold fits a SignedDuration");
    Some(until.checked_sub(hold).unwrap_or(until))
}

/// The timers the holds of `members` need.
pub(crate) fn hold_timer_keys(
    members: &[MemberStatus],
    hold: Duration,
) -> impl Iterator<Item = TimerKey> + '_ {
    members
        .iter()
        .filter(|m| m.state.is_holding() && m.held_until.is_some())
        .filter_map(move |m| {
            Some(TimerKey::Hold {
                slot: m.slot,
                started: hold_start(m, hold)?,
            })
        })
}

/// The running hold's end as this process times it (`hold_end`), recorded, with a message
/// (and event) when that lengthened it; and that end.
pub(super) fn timed_hold(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    step: &mut Step,
) -> (MemberStatus, Timestamp) {
    let (until, started) = hold_end(input, prev);
    let mut next = prev.clone();
    next.held_until = Some(MicroTime(until));
    next.hold_started_at = Some(MicroTime(started));
    if let Some(recorded) = prev.held_until.as_ref().map(|t| t.0)
        && recorded < until
    {
        let by_policy = recorded.max(held_until(started, input.hold));
        let why = if until > by_policy {
            let why = retimed_why(input, prev.slot, started);
            step.tell(
                prev.slot,
                MemberReason::HoldExtended,
                format!("{}: {why}; fenced until {until}", prev.name),
                false,
            );
            why
        } else {
            "hold lengthened to the maxLockTTL in force"
        };
        next.message = Some(lengthened_message(prev.message.as_deref(), why, until));
    }
    (next, until)
}

/// The message of a hold lengthened for `why`: the hold's cause stays first (the member's
/// message says why it is held, e.g. a clock jump; a lengthening is not a cause), each
/// reason for lengthening is named once, and the new end last.
pub(super) fn lengthened_message(prev: Option<&str>, why: &str, until: Timestamp) -> String {
    let cause = prev
        .and_then(|m| m.split("; held until ").next())
        .filter(|c| !c.is_empty());
    match cause {
        Some(c) if c.ends_with(why) => format!("{c}; held until {until}"),
        Some(c) => format!("{c}; {why}; held until {until}"),
        None => format!("{why}; held until {until}"),
    }
}
