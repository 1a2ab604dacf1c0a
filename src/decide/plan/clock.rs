//! A member's clock as the probes saw it (`crate::clock::member`): a jump forward fences and
//! holds a serving member; a step back or a drift is reported.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::holds::start_hold;
use super::input::PlanInput;
use super::step::Step;
use crate::clock::member::Verdict;
use crate::crd::MemberStatus;
use crate::crd::reasons::MemberReason;
use crate::decide::observe::SlotObservation;

/// A member clock that stepped back or drifts: reported (locks on it expire late, or a fast
/// drift is on its way to a jump), not fenced.
pub(super) fn report_clock(prev: &MemberStatus, obs: &SlotObservation, step: &mut Step) {
    let slot = prev.slot;
    match obs.clock {
        // Locks on it expire late: safe, but the user should know its clock is not kept.
        Some(Verdict::SteppedBack { by }) => step.tell(
            slot,
            MemberReason::ClockStepBack,
            format!(
                "{}: its clock stepped {:.3} s back since the last probe (locks on it expire late, which is safe; check its host's time sync)",
                prev.name,
                by.as_secs_f64()
            ),
            true,
        ),
        Some(Verdict::Drifting { ratio_ppm, over }) => step.tell(
            slot,
            MemberReason::ClockDrift,
            format!(
                "{}: its clock ran {} by {:.3}% over the last {:.0} s, more than clockDriftFactor allows (locks on it expire {}); check its host's time sync",
                prev.name,
                if ratio_ppm > 0 { "fast" } else { "slow" },
                ratio_ppm.abs() as f64 / 10_000.0,
                over.as_secs_f64(),
                if ratio_ppm > 0 { "early: a faster drift becomes a clock jump" } else { "late, which is safe" }
            ),
            true,
        ),
        _ => {}
    }
}

/// A serving member whose clock jumped forward: every lock on it may have expired early, as
/// if it had lost its keys. Fenced at once and held in full (docs/design.md §9.3).
pub(super) fn clock_jumped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    run_id: &str,
    by: Duration,
    unwatched_since: Option<Timestamp>,
    step: &mut Step,
) -> MemberStatus {
    let when = match unwatched_since {
        None => "since the last probe".to_owned(),
        // Found by comparing with the reading on record (crate::clock::record): no leader
        // probed it in between, e.g. across an operator leader change.
        Some(at) => format!(
            "at least, beyond drift, since its clock was read at {} (by an earlier operator leader; no leader probed it in between)",
            at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        ),
    };
    let why = format!(
        "its clock jumped {:.3} s forward {when}: locks on it may have expired early, as if it had lost its keys",
        by.as_secs_f64()
    );
    step.fence = Some(run_id.to_owned());
    step.tell(
        prev.slot,
        MemberReason::ClockJump,
        format!("{}: {why}; fenced and held in full", prev.name),
        true,
    );
    // `start_hold` records the running process (the one fenced) and tells HoldStarted; the
    // ClockJump warning says what happened.
    start_hold(input, prev.slot, obs, why, step)
}
