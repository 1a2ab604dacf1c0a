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
//!
//! **A slow round trip is uncertainty, not evidence.** `TIME` is read somewhere between the
//! request leaving and its replies arriving (the operator's readings bracket it: a request that
//! waits in a queue, a member stopped mid-request or this process stalled before it reads the
//! replies all widen the bracket, never move `TIME` out of it), so a jump is reported only when
//! the member's advance exceeds what both samples' round trips explain. A step smaller than
//! that cannot be told from where in a slow round trip `TIME` was read, so such a sample *cannot
//! judge*: it still reports any jump it proves, but it never becomes the sample later ones are
//! judged against ([`baseline_limit`]). Had it become the baseline, a step hidden in its round
//! trip would be part of the baseline and never found; kept out, the step is found by the first
//! sample precise enough to show it, judged against the last precise one.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::crd::model::Slot;

/// Scheduling noise of reading `TIME` (the reply is formed some time after the server's clock
/// is read) and of this process taking its monotonic reading.
pub(crate) const READ_SLACK: Duration = Duration::from_millis(2);

/// Drift is judged over at least this much time, so that round trips do not dominate it.
pub(crate) const DRIFT_WINDOW: Duration = Duration::from_secs(30);

/// The longest half round trip of a sample that may become the baseline later samples are
/// judged against: an eighth of the drift clients allow a lock of `max_lock_ttl`
/// (`drift_factor × maxLockTTL`), and never less than [`READ_SLACK`] (a sub-millisecond round
/// trip always qualifies).
///
/// Why an eighth: judged against a baseline `p`, a sample `s` hides a step of up to
/// `2 × (half_rtt(p) + half_rtt(s))` (plus the read slack and the drift allowed between them):
/// `TIME` may have been read at the start of one round trip and the end of the other. A sample
/// that then becomes the baseline makes that step part of it for good. With both half round
/// trips within this limit, what a baseline can absorb that way is at most half of what every
/// client already allows its lock to lose to drift. A slower sample is still judged (a step
/// beyond its own uncertainty is a jump), but the baseline stays where it was.
pub(crate) fn baseline_limit(drift_factor: f64, max_lock_ttl: Duration) -> Duration {
    let allowed = max_lock_ttl.as_secs_f64() * drift_factor.max(0.0);
    Duration::from_secs_f64(allowed / 8.0).max(READ_SLACK)
}

/// A member clock's key in `Memory::member_clocks`: the cluster's UID and the slot.
pub(crate) type ClockKey = (String, Slot);

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
    /// The baseline jumps are judged against: the last sample precise enough to be one
    /// ([`baseline_limit`]), or the process's first sample (or the one after a jump or step)
    /// until a precise one comes.
    last: TimeSample,
    /// The first sample since the last jump (drift is judged against it).
    first: TimeSample,
    /// Drift is reported once per process.
    drift_reported: bool,
    /// Whether this leader compared the process with the clock on record
    /// ([`crate::clock::record`]); set by the caller, kept while the run id is.
    pub compared: bool,
}

/// What one sample says about a member's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to report (also: the first sample of a process, and a sample whose round trip
    /// is too long to judge small steps by: it is not taken as the baseline, so a step hidden
    /// in it is found by the next precise sample; see [`baseline_limit`]).
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
/// The member's advance since the baseline is compared with the operator's monotonic time
/// between the middles of the two round trips; `TIME` may lie anywhere in either, so half of
/// each round trip is allowed either way (for `sample`, the round trip of that very request,
/// however long it took). Clients allow a lock of TTL `t` to lose `t × drift_factor` to clock
/// drift, never more, so the drift allowed between two samples is counted over at most
/// `max_lock_ttl` (the value in force): a step hidden in a longer gap (a slow probe period,
/// reconcile backoff, an outage) would otherwise pass as drift that no lock could absorb.
pub(crate) fn judge(
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
    // Judged, and no jump beyond what the round trips explain. Only a sample precise enough
    // moves the baseline on: a slow one cannot rule out a step inside its own round trip.
    let precise = sample.half_rtt() <= baseline_limit(factor, max_lock_ttl);
    let mut next = ClockTrack {
        run_id: run_id.to_owned(),
        last: if precise { sample } else { prev.last },
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

    /// The safety suite's cluster: maxLockTTL 3 s, clockDriftFactor 1 % (30 ms of drift per
    /// lock; samples with half round trips up to 3.75 ms become baselines).
    const SUITE_TTL: Duration = Duration::from_secs(3);
    const FACTOR: f64 = 0.01;

    /// An injected clock: a probe whose request left `sent` ms after `t0` and whose replies
    /// arrived `rtt` ms later, the member reading `TIME` at `read` ms (somewhere in between)
    /// from a clock `ahead` ms ahead of the operator's monotonic one (0: in step).
    fn probe(t0: Instant, sent: u64, rtt: u64, read: f64, ahead: i64) -> TimeSample {
        let (sent_ms, received_ms) = (sent as f64, (sent + rtt) as f64);
        assert!(
            (sent_ms..=received_ms).contains(&read),
            "TIME is read inside the round trip"
        );
        TimeSample {
            member_micros: 1_800_000_000_000_000 + ((read + ahead as f64) * 1000.0) as i64,
            sent: t0 + Duration::from_millis(sent),
            received: t0 + Duration::from_millis(sent + rtt),
        }
    }

    /// Judges `probes` in turn as the reconcile does (each track kept), with the suite's TTL.
    fn judge_all(probes: &[TimeSample]) -> (Vec<Verdict>, ClockTrack) {
        let mut track: Option<ClockTrack> = None;
        let verdicts = probes
            .iter()
            .map(|&s| {
                let (v, next) = judge(track.as_ref(), "R", s, FACTOR, SUITE_TTL);
                track = Some(next);
                v
            })
            .collect();
        (verdicts, track.expect("at least one probe"))
    }

    #[test]
    fn the_baseline_limit_is_an_eighth_of_the_drift_a_lock_allows() {
        assert_eq!(baseline_limit(0.01, SUITE_TTL), Duration::from_micros(3_750));
        assert_eq!(
            baseline_limit(0.01, Duration::from_secs(30)),
            Duration::from_micros(37_500)
        );
        // Never below the read slack: a sub-millisecond round trip always qualifies.
        assert_eq!(baseline_limit(0.0, SUITE_TTL), READ_SLACK);
        assert_eq!(baseline_limit(0.001, Duration::from_secs(1)), READ_SLACK);
    }

    /// A slow round trip is uncertainty, not a jump: wherever in it the member read `TIME`
    /// (a request that waited in a queue on a kept connection and was answered just before its
    /// replies arrived, one answered at once while the operator stalled before reading it),
    /// the advance stays within half of both round trips.
    #[test]
    fn a_slow_round_trip_is_not_a_jump() {
        let t0 = Instant::now();
        let fast = probe(t0, 0, 1, 0.5, 0);
        // (what happened, sent, round trip, TIME read at) — all ms, the member's clock in step.
        let table: &[(&str, u64, u64, f64)] = &[
            (
                "8 s round trip, TIME read as the request left",
                1_000,
                8_000,
                1_000.0,
            ),
            (
                "8 s round trip, TIME read just before the replies came",
                1_000,
                8_000,
                9_000.0,
            ),
            ("8 s round trip, TIME read half way", 1_000, 8_000, 5_000.0),
            (
                "request queued 7 s on a kept connection, then answered",
                1_000,
                7_001,
                8_000.0,
            ),
            (
                "answered at once, the operator stalled 7 s before reading",
                1_000,
                7_000,
                1_000.2,
            ),
            ("round trip just past the baseline limit", 1_000, 8, 1_008.0),
        ];
        for &(what, sent, rtt, read) in table {
            let slow = probe(t0, sent, rtt, read, 0);
            let (v, track) = judge_all(&[fast, slow]);
            assert_eq!(v[1], Verdict::Steady, "{what}");
            // Too slow to be the baseline: the fast sample stays it.
            assert_eq!(track.last, fast, "{what}");
            // And the next fast probe, judged against it, finds nothing either.
            let next = probe(t0, sent + rtt + 1_000, 1, (sent + rtt + 1_000) as f64 + 0.5, 0);
            let (v, track) = judge_all(&[fast, slow, next]);
            assert_eq!(v[2], Verdict::Steady, "{what}");
            assert_eq!(track.last, next, "{what}");
        }
    }

    /// SIGSTOP of the member for 20 s between samples: the probes meanwhile time out (no
    /// sample), and one in flight as it resumes is answered late. Its clock kept running
    /// (it is the host's), so it advanced as far as the operator's monotonic clock: no jump.
    #[test]
    fn a_member_stopped_for_20_s_between_samples_is_steady() {
        let t0 = Instant::now();
        let before = probe(t0, 0, 1, 0.5, 0);
        // Stopped at 0.5 s, continued at 20.5 s; the request sent at 20.0 s waited in the
        // socket buffer and was answered as the process resumed.
        let in_flight = probe(t0, 20_000, 501, 20_500.0, 0);
        let after = probe(t0, 21_000, 1, 21_000.5, 0);
        let (v, track) = judge_all(&[before, in_flight, after]);
        assert_eq!(v, vec![Verdict::Steady; 3]);
        assert_eq!(track.last, after);
        // Without the sample in flight (it timed out): 21 s judged at once, still steady.
        let (v, _) = judge_all(&[before, after]);
        assert_eq!(v, vec![Verdict::Steady; 2]);
    }

    /// A true forward step of maxLockTTL while the round trips are fast is a jump, after a
    /// probe period or after a long gap (reconcile backoff, an outage) alike.
    #[test]
    fn a_step_of_max_lock_ttl_in_a_fast_round_trip_is_a_jump() {
        let t0 = Instant::now();
        // (gap between the probes in ms, the step in ms)
        for (gap, step) in [
            (1_000u64, 3_000i64),
            (10_000, 3_000),
            (1_000, 100),
            (60_000, 3_000),
        ] {
            let before = probe(t0, 0, 1, 0.5, 0);
            let after = probe(t0, gap, 1, gap as f64 + 0.5, step);
            let (v, track) = judge_all(&[before, after]);
            assert_eq!(
                v[1],
                Verdict::JumpedForward {
                    by: Duration::from_millis(step as u64),
                    unwatched_since: None,
                },
                "a {step} ms step after {gap} ms"
            );
            // A new baseline from the jump on: it is not reported twice.
            assert_eq!(track.last, after);
        }
    }

    /// A step hidden inside a slow round trip: `TIME` read as the request left, just after a
    /// 3 s step (maxLockTTL), 8 s before the replies came. Against the fast baseline the
    /// member advanced 1 s less than the middles did, well within the 4 s uncertainty: that
    /// sample cannot tell the step from where `TIME` was read, so it reports nothing and is
    /// not taken as the baseline. The next fast probe, judged against the last fast one,
    /// finds the whole step.
    #[test]
    fn a_step_hidden_in_a_slow_round_trip_is_found_by_the_next_precise_probe() {
        let t0 = Instant::now();
        let before = probe(t0, 0, 1, 0.5, 0);
        let slow = probe(t0, 1_000, 8_000, 1_000.0, 3_000);
        let next = probe(t0, 10_000, 1, 10_000.5, 3_000);
        let (v, track) = judge_all(&[before, slow, next]);
        assert_eq!(v[1], Verdict::Steady, "cannot judge a step inside its round trip");
        assert_eq!(
            v[2],
            Verdict::JumpedForward {
                by: Duration::from_millis(3_000),
                unwatched_since: None,
            },
            "the next precise probe finds it"
        );
        assert_eq!(track.last, next);
        let (_, track) = judge_all(&[before, slow]);
        assert_eq!(track.last, before, "the slow sample is not the baseline");
        // A step beyond the slow sample's own uncertainty is a jump at once.
        let big = probe(t0, 1_000, 8_000, 1_000.0, 9_000);
        let (v, _) = judge_all(&[before, big]);
        assert!(matches!(v[1], Verdict::JumpedForward { .. }), "{v:?}");
    }

    /// A process whose first sample is slow has only that one as its baseline until a
    /// precise one comes; another slow one does not replace it (each would let a step inside
    /// it pass), the first precise one does.
    #[test]
    fn a_slow_first_sample_is_the_baseline_only_until_a_precise_one() {
        let t0 = Instant::now();
        let first = probe(t0, 0, 6_000, 3_000.0, 0);
        let slow = probe(t0, 7_000, 5_000, 9_000.0, 0);
        let fast = probe(t0, 13_000, 1, 13_000.5, 0);
        let (v, track) = judge_all(&[first, slow]);
        assert_eq!(v, vec![Verdict::Steady; 2]);
        assert_eq!(track.last, first);
        let (v, track) = judge_all(&[first, slow, fast]);
        assert_eq!(v, vec![Verdict::Steady; 3]);
        assert_eq!(track.last, fast);
    }
}
