//! Members' clocks against the operator's monotonic clock (docs/design.md §9.3).
//!
//! Redis expires keys by its host's wall clock: a forward jump of that clock expires every lock
//! on the member early, and a second client can then take a majority while the first still
//! holds its lock. No server-side rule can stop the keys expiring, but the operator can notice
//! the jump at the next probe and treat the member as having lost its keys (fenced, held in
//! full). Every probe reads `TIME` and compares how far the member's clock advanced since the
//! last probe with how far the operator's monotonic clock did.
//!
//! Tolerance, derived from `clockDriftFactor`: clients already allow for clocks that run
//! `clockDriftFactor` faster than real time, so a member may advance up to
//! `elapsed × (1 + clockDriftFactor)`; on top of that, `TIME` is read at an unknown point of
//! each probe's round trip (half of both round trips) and has microsecond resolution (plus
//! [`READ_SLACK`]). A larger advance is a forward jump. A member that advances too slowly
//! (a backward step) expires locks *late*, which is safe: reported, not fenced. Slow drift is
//! reported once it exceeds the factor over [`DRIFT_WINDOW`].

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::model::Slot;

/// Scheduling noise of reading `TIME` (the reply is formed some time after the server's clock
/// is read) and of this process taking its monotonic reading.
pub const READ_SLACK: Duration = Duration::from_millis(2);

/// Drift is judged over at least this much time, so that round trips do not dominate it.
pub const DRIFT_WINDOW: Duration = Duration::from_secs(30);

/// A member clock's key in `Memory::member_clocks`: the cluster's UID and the slot.
pub type ClockKey = (String, Slot);

/// One probe's `TIME`: the member's clock (µs since the epoch) and when the probe's request
/// left and its answer arrived, on the operator's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeSample {
    pub member_micros: i64,
    pub sent: Instant,
    pub received: Instant,
}

impl TimeSample {
    pub fn middle(&self) -> Instant {
        self.sent + (self.received - self.sent) / 2
    }
    pub fn half_rtt(&self) -> Duration {
        (self.received - self.sent) / 2
    }
}

/// What is remembered about one member process's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockTrack {
    pub run_id: String,
    /// The last sample (jumps are judged against it).
    last: TimeSample,
    /// The first sample since the last jump (drift is judged against it).
    first: TimeSample,
    /// Drift is reported once per process.
    drift_reported: bool,
    /// Whether this leader compared the process with the clock on record
    /// ([`crate::clock_record`]); set by the caller, kept while the run id is.
    pub compared: bool,
}

/// What one sample says about a member's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to report (also: the first sample of a process).
    Steady,
    /// The member's clock advanced `by` more than real time allows since the last probe, or
    /// (`unwatched_since`: when the record it was compared with was read) at least `by` more
    /// than drift explains since a reading on record, while no leader probed it: locks on it
    /// may have expired early.
    JumpedForward {
        by: Duration,
        unwatched_since: Option<Timestamp>,
    },
    /// The member's clock advanced `by` less than real time since the last probe (a backward
    /// step): locks expire late, which is safe.
    SteppedBack { by: Duration },
    /// Over the last `over`, the member's clock ran faster or slower than real time by more
    /// than the drift clients allow for (`ratio` = its excess advance / real time; negative
    /// when slow).
    Drifting { ratio_ppm: i64, over: Duration },
}

/// Judges `sample` of process `run_id` against what is remembered; returns the verdict and
/// what to remember next (kept only once the verdict is on record, `reconcile`).
///
/// Clients allow a lock of TTL `t` to lose `t × drift_factor` to clock drift, never more, so
/// the drift allowed between two samples is counted over at most `max_lock_ttl` (the value in
/// force): a step hidden in a longer gap (a slow probe period, reconcile backoff, an outage)
/// would otherwise pass as drift that no lock could absorb.
pub fn judge(
    prev: Option<&ClockTrack>,
    run_id: &str,
    sample: TimeSample,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> (Verdict, ClockTrack) {
    let fresh = ClockTrack {
        run_id: run_id.to_owned(),
        last: sample,
        first: sample,
        drift_reported: false,
        compared: false,
    };
    let Some(prev) = prev.filter(|p| p.run_id == run_id && sample.sent >= p.last.received) else {
        return (Verdict::Steady, fresh);
    };
    let factor = drift_factor.max(0.0);
    let real = sample.middle() - prev.last.middle();
    let advanced = sample.member_micros - prev.last.member_micros;
    let real_us = real.as_micros() as i64;
    let slack = prev.last.half_rtt() + sample.half_rtt() + READ_SLACK;
    let allowed_ahead = Duration::from_secs_f64(real.min(max_lock_ttl).as_secs_f64() * factor) + slack;
    let excess = advanced - real_us;
    if excess > allowed_ahead.as_micros() as i64 {
        return (
            Verdict::JumpedForward {
                by: Duration::from_micros(excess as u64),
                unwatched_since: None,
            },
            fresh,
        );
    }
    if -excess > (slack.as_micros() as i64) + (real_us as f64 * factor) as i64 {
        return (
            Verdict::SteppedBack {
                by: Duration::from_micros((-excess) as u64),
            },
            fresh,
        );
    }
    let mut next = ClockTrack {
        run_id: run_id.to_owned(),
        last: sample,
        first: prev.first,
        drift_reported: prev.drift_reported,
        compared: prev.compared,
    };
    let over = sample.middle() - prev.first.middle();
    if over >= DRIFT_WINDOW && !prev.drift_reported {
        let excess = (sample.member_micros - prev.first.member_micros) - over.as_micros() as i64;
        let slack = (prev.first.half_rtt() + sample.half_rtt() + READ_SLACK).as_micros() as i64;
        let beyond = excess.abs() - slack;
        if beyond > 0 && beyond as f64 > over.as_micros() as f64 * factor {
            let ratio_ppm = (excess as f64 / over.as_micros() as f64 * 1e6) as i64;
            next.drift_reported = true;
            return (Verdict::Drifting { ratio_ppm, over }, next);
        }
    }
    (Verdict::Steady, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(1);
    /// The maxLockTTL in force in these tests: longer than any gap between their samples,
    /// except where a test says otherwise.
    const TTL: Duration = Duration::from_secs(30);

    /// A sample at `real` ms after `t0` whose member clock reads `member` ms.
    fn at(t0: Instant, real: u64, member: i64) -> TimeSample {
        let sent = t0 + Duration::from_millis(real);
        TimeSample {
            member_micros: 1_800_000_000_000_000 + member * 1000,
            sent,
            received: sent + RTT,
        }
    }

    fn run(samples: &[(u64, i64)], factor: f64) -> Vec<Verdict> {
        let t0 = Instant::now();
        let mut track: Option<ClockTrack> = None;
        samples
            .iter()
            .map(|&(real, member)| {
                let (v, next) = judge(track.as_ref(), "R", at(t0, real, member), factor, TTL);
                track = Some(next);
                v
            })
            .collect()
    }

    #[test]
    fn a_clock_in_step_is_steady() {
        let v = run(&[(0, 0), (1000, 1000), (2000, 2001), (3000, 2999)], 0.01);
        assert!(v.iter().all(|v| *v == Verdict::Steady), "{v:?}");
    }

    #[test]
    fn a_forward_jump_is_found_at_the_next_probe() {
        // +60 s between the probes at 1 s and 2 s.
        let v = run(&[(0, 0), (1000, 1000), (2000, 62_000), (3000, 63_000)], 0.01);
        assert_eq!(
            v[2],
            Verdict::JumpedForward {
                by: Duration::from_secs(60),
                unwatched_since: None,
            }
        );
        // The next probe judges against the new reading: no second report.
        assert_eq!(v[3], Verdict::Steady);
    }

    #[test]
    fn the_tolerance_is_drift_times_elapsed_plus_read_slack() {
        // 1 s apart, factor 0.01: 10 ms drift + 1 ms of round trips + 2 ms slack = 13 ms.
        let ok = run(&[(0, 0), (1000, 1012)], 0.01);
        assert_eq!(ok[1], Verdict::Steady);
        let jump = run(&[(0, 0), (1000, 1014)], 0.01);
        assert!(matches!(jump[1], Verdict::JumpedForward { .. }), "{jump:?}");
        // Factor 0: only the read slack.
        let jump = run(&[(0, 0), (1000, 1004)], 0.0);
        assert!(matches!(jump[1], Verdict::JumpedForward { .. }), "{jump:?}");
    }

    #[test]
    fn a_backward_step_is_reported_not_a_jump() {
        let v = run(&[(0, 0), (1000, 1000), (2000, -58_000)], 0.01);
        assert_eq!(
            v[2],
            Verdict::SteppedBack {
                by: Duration::from_secs(60)
            }
        );
    }

    #[test]
    fn fast_drift_beyond_the_factor_is_reported_after_the_window() {
        // 1.1% fast with factor 1%: 11 ms per 1 s probe, inside the per-probe tolerance
        // (13 ms); over 30 s, 330 ms against 300 ms allowed.
        let samples: Vec<(u64, i64)> = (0..=40).map(|s| (s * 1000, (s * 1011) as i64)).collect();
        let v = run(&samples, 0.01);
        assert!(v[..30].iter().all(|v| *v == Verdict::Steady), "{v:?}");
        assert!(
            matches!(v[30], Verdict::Drifting { ratio_ppm, .. } if (10_900..=11_100).contains(&ratio_ppm)),
            "{:?}",
            v[30]
        );
        // Once per process.
        assert!(v[31..].iter().all(|v| *v == Verdict::Steady), "{v:?}");
    }

    #[test]
    fn a_new_process_or_a_stale_sample_starts_afresh() {
        let t0 = Instant::now();
        let (_, track) = judge(None, "R", at(t0, 0, 0), 0.01, TTL);
        // Another run id: its clock is not compared with the old process's.
        let (v, track2) = judge(Some(&track), "S", at(t0, 1000, 90_000), 0.01, TTL);
        assert_eq!(v, Verdict::Steady);
        assert_eq!(track2.run_id, "S");
        // A sample sent before the last answer arrived (overlapping probes) is not judged.
        let (v, _) = judge(Some(&track2), "S", at(t0, 500, 500_000), 0.01, TTL);
        assert_eq!(v, Verdict::Steady);
    }

    #[test]
    fn the_drift_allowed_is_counted_over_one_lock_ttl_at_most() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(10);
        let (_, track) = judge(None, "R", at(t0, 0, 0), 0.01, ttl);
        // 120 s between samples (a slow probe period, backoff, an outage), factor 1%: drift
        // of 1.2 s would be allowed over the gap, but a lock of 10 s can absorb only 100 ms
        // (+ 3 ms of slack). 150 ms more is a jump.
        let (v, _) = judge(Some(&track), "R", at(t0, 120_000, 120_150), 0.01, ttl);
        assert!(matches!(v, Verdict::JumpedForward { .. }), "{v:?}");
        let (v, _) = judge(Some(&track), "R", at(t0, 120_000, 120_102), 0.01, ttl);
        assert_eq!(v, Verdict::Steady);
        // Within one TTL the allowance grows with the gap as before.
        let (v, _) = judge(Some(&track), "R", at(t0, 5_000, 5_052), 0.01, ttl);
        assert_eq!(v, Verdict::Steady);
    }
}
