//! Members' clocks across operator leaders (docs/design.md §9.3).
//!
//! [`crate::clock::member`] finds a jump by comparing two probes of one leader on its monotonic
//! clock, so its history is in that leader's memory. After a leader change (or a restart) the
//! first probe of each process used to be a new baseline: a jump between the old leader's last
//! probe and the new leader's first went unseen, and with it every lock it expired early.
//!
//! So each member's record carries its clock against the API server's (`status.members[].clock`,
//! [`ClockRecord`]), the one clock every leader can read ([`crate::clock::server`]). A leader
//! compares its first reading of a process with that record once; a forward difference beyond
//! what drift explains is a jump, handled as one (fenced, held in full).
//!
//! The comparison is coarser than a leader's own: both readings are intervals (the API
//! server's clock is known to within its `Date` header's whole second, narrowed by samples at
//! other phases, plus round trips), so it finds jumps beyond roughly their widths, typically a
//! few hundred milliseconds, where one leader finds about 13 ms. What it allows for drift:
//! `clockDriftFactor × min(age, maxLockTTL)`, as a leader's own check does, plus
//! [`ASSUMED_DRIFT_PPM`] of the record's age, because a member's clock and the API server's
//! drift apart slowly even when both are kept by NTP. Records are written again before either
//! grows large ([`REFRESH_AFTER`], [`refresh_band`]), never on a reconcile where nothing moved
//! (steady state writes nothing).

use std::time::Duration;

use crate::clock::member::{self, ClockTrack, READ_SLACK, TimeSample, Verdict};
use crate::clock::server::ServerTime;
use crate::crd::ClockRecord;
use crate::hold::floor_micros;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

/// A record is written again after this long even when nothing drifted, so that the drift
/// another leader must allow for ([`ASSUMED_DRIFT_PPM`] of its age) stays below 0.4 s.
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(3600);

/// The drift between a member's clock and the API server's that a comparison across leaders
/// allows for per unit of the record's age, on top of `clockDriftFactor × min(age,
/// maxLockTTL)`. Quartz without time sync drifts up to about 100 ppm; with NTP, far less.
pub(crate) const ASSUMED_DRIFT_PPM: f64 = 100.0;

/// The widest estimate of the API server's clock a reading is taken with. Both readings of a
/// comparison carry their estimate's width, and a jump is found only beyond both: a reading
/// from the clock check's first sample (one second wide) would hide a jump of two seconds.
/// The clock check narrows it to about 125 ms within a second of its start (and keeps it
/// there); until then no reading is taken, and this leader's own probes watch meanwhile.
pub(crate) const MAX_REFERENCE_WIDTH: Duration = Duration::from_millis(250);

/// The longest round trip of a probe a reading is taken from. A reading spans the probe's
/// whole round trip (`TIME` was read somewhere in it), so a slow probe is as wide a reading as
/// a wide estimate of the server's clock: as a record it would hide a jump of that size from
/// the next leader (a record is written again only when a reading is proven apart from it),
/// and as the first comparison of a leader it would end the comparison without being able to
/// tell. Such a probe *cannot judge* across leaders: no reading, the comparison waits for a
/// probe that can, and this leader's own probes watch meanwhile.
pub(crate) const MAX_READING_RTT: Duration = MAX_REFERENCE_WIDTH;

/// A reading of process `run_id`'s clock against the API server's, from one probe's `TIME`
/// and the server's time at the middle of that probe's round trip; `None` while that time is
/// known less precisely than [`MAX_REFERENCE_WIDTH`], or when the probe's round trip was
/// longer than [`MAX_READING_RTT`].
pub(crate) fn reading(run_id: &str, sample: &TimeSample, server: ServerTime) -> Option<ClockRecord> {
    if server.width() > k8s_openapi::jiff::SignedDuration::try_from(MAX_REFERENCE_WIDTH).ok()? {
        return None;
    }
    if sample.received - sample.sent > MAX_READING_RTT {
        return None;
    }
    // `TIME` was read somewhere in the round trip: the server's time then is within half of
    // it of its time at the middle.
    let spread = (sample.half_rtt() + READ_SLACK).as_micros() as i64;
    let server_low = server.low.as_microsecond();
    let server_high = server.high.as_microsecond();
    let low = sample.member_micros - server_high - spread;
    let high = sample.member_micros - server_low + spread;
    Some(ClockRecord {
        run_id: run_id.to_owned(),
        offset_low_millis: low.div_euclid(1000),
        offset_high_millis: high.div_euclid(1000) + i64::from(high.rem_euclid(1000) != 0),
        read_at: MicroTime(floor_micros(server.middle())),
    })
}

/// What a leader's reading says against the record (with its own probes' verdict), and what
/// the record should carry now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Across {
    /// The verdict on this sample: a forward jump found by either judgement, else this
    /// leader's own unless it is `Steady` and the record shows a step back.
    pub verdict: Verdict,
    /// What the member's record should carry (`None`: nothing known).
    pub record: Option<ClockRecord>,
    /// Whether this leader has compared this process with the record (or made the record).
    pub compared: bool,
}

/// One probe's `TIME` of process `run_id`, judged as a leader judges every sample: against
/// this leader's last sample of it (`member::judge`, on `prev`) and, once per process and
/// leader, against the reading on `recorded` (a jump while no leader probed it, docs/design.md
/// §9.3), when the API server's time at the sample (`server`) is known well enough. Returns the
/// judgement and the track to remember, which carries whether the comparison was made.
pub(crate) fn judge_sample(
    prev: Option<&ClockTrack>,
    recorded: Option<&ClockRecord>,
    run_id: &str,
    sample: TimeSample,
    server: Option<ServerTime>,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> (Across, ClockTrack) {
    let (verdict, mut track) = member::judge(prev, run_id, sample, drift_factor, max_lock_ttl);
    let across = across_leaders(
        recorded,
        server.and_then(|server| reading(run_id, &sample, server)),
        prev.is_some_and(|p| p.run_id == run_id && p.compared),
        verdict,
        drift_factor,
        max_lock_ttl,
    );
    track.compared = across.compared;
    (across, track)
}

/// Judges `now` (this leader's reading, when the API server's time is known well enough)
/// against the `recorded` reading; `compared` says whether this leader already did so for
/// this process; `own` is what this leader's own probes said of the same sample (a jump or
/// step they found moves the record too, so that the next leader does not find it again, nor
/// a step back cancel a later jump). A forward jump from either judgement wins.
pub(crate) fn across_leaders(
    recorded: Option<&ClockRecord>,
    now: Option<ClockRecord>,
    compared: bool,
    own: Verdict,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> Across {
    let (gap, mut record, compared) =
        compare_with_record(recorded, now.clone(), compared, drift_factor, max_lock_ttl);
    let moved = matches!(own, Verdict::JumpedForward { .. } | Verdict::SteppedBack { .. });
    if moved && now.is_some() {
        record = now;
    }
    let verdict = match (own, gap) {
        (Verdict::JumpedForward { .. }, _) | (_, None) => own,
        (_, Some(gap @ Verdict::JumpedForward { .. })) | (Verdict::Steady, Some(gap)) => gap,
        (_, Some(_)) => own,
    };
    Across {
        verdict,
        record,
        compared,
    }
}

/// The record's part: a jump or step between the record and `now` (first comparison only),
/// the record to keep, and whether this leader has now compared.
fn compare_with_record(
    recorded: Option<&ClockRecord>,
    now: Option<ClockRecord>,
    compared: bool,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> (Option<Verdict>, Option<ClockRecord>, bool) {
    let Some(now) = now else {
        // No reference precise enough yet: compare later. A jump meanwhile is this leader's
        // own probes' to find: they watch from their first one.
        return (None, recorded.cloned(), compared);
    };
    let Some(recorded) = recorded.filter(|r| r.run_id == now.run_id) else {
        // A process first read now (or never recorded, e.g. by an older operator): its first
        // reading is the baseline. A process is held in full from its first observation, so
        // a jump before it expires no lock.
        return (None, Some(now), true);
    };
    let verdict = if compared {
        None
    } else {
        gap_verdict(recorded, &now, drift_factor, max_lock_ttl)
    };
    let record = if verdict.is_some() || needs_refresh(recorded, &now, drift_factor, max_lock_ttl) {
        now
    } else {
        recorded.clone()
    };
    (verdict, Some(record), true)
}

fn age(recorded: &ClockRecord, now: &ClockRecord) -> Duration {
    recorded
        .read_at
        .0
        .duration_until(now.read_at.0)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

/// How far the readings may differ, either way, from drift alone.
fn allowance(recorded: &ClockRecord, now: &ClockRecord, drift_factor: f64, max_lock_ttl: Duration) -> i64 {
    let age = age(recorded, now);
    let factor = drift_factor.max(0.0);
    let drift = age.min(max_lock_ttl).as_secs_f64() * factor + age.as_secs_f64() * ASSUMED_DRIFT_PPM / 1e6;
    (drift * 1000.0).ceil() as i64 + READ_SLACK.as_millis() as i64
}

fn gap_verdict(
    recorded: &ClockRecord,
    now: &ClockRecord,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> Option<Verdict> {
    let allowed = allowance(recorded, now, drift_factor, max_lock_ttl);
    // The least the clock moved ahead of the reference since the record: both intervals
    // contain the truth, so a gap between them is real.
    let ahead = now.offset_low_millis - recorded.offset_high_millis;
    let behind = recorded.offset_low_millis - now.offset_high_millis;
    if ahead > allowed {
        Some(Verdict::JumpedForward {
            by: Duration::from_millis(ahead as u64),
            unwatched_since: Some(recorded.read_at.0),
        })
    } else if behind > allowed {
        Some(Verdict::SteppedBack {
            by: Duration::from_millis(behind as u64),
        })
    } else {
        None
    }
}

/// How far the readings may move apart before the record is written again: half of what a
/// leader's own check allows over one lock TTL, so another leader's comparison never
/// mistakes drift for a jump.
pub(crate) fn refresh_band(drift_factor: f64, max_lock_ttl: Duration) -> i64 {
    ((max_lock_ttl.as_secs_f64() * drift_factor.max(0.0) * 1000.0) / 2.0) as i64
}

fn needs_refresh(
    recorded: &ClockRecord,
    now: &ClockRecord,
    drift_factor: f64,
    max_lock_ttl: Duration,
) -> bool {
    let band = refresh_band(drift_factor, max_lock_ttl);
    // Only a proven move (the intervals apart by more than the band) writes: the intervals'
    // own jitter, as the clock check's samples come and go, never does.
    age(recorded, now) >= REFRESH_AFTER
        || now.offset_low_millis - recorded.offset_high_millis > band
        || recorded.offset_low_millis - now.offset_high_millis > band
}

/// The record to keep for a member whose process is `run_id`: `proposed` when it is about that
/// process, else what was on record when it is, else nothing (a record about another process
/// says nothing about this one).
pub(crate) fn for_process(
    run_id: Option<&str>,
    proposed: Option<&ClockRecord>,
    previous: Option<&ClockRecord>,
) -> Option<ClockRecord> {
    let run_id = run_id?;
    proposed
        .filter(|r| r.run_id == run_id)
        .or(previous.filter(|r| r.run_id == run_id))
        .cloned()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use k8s_openapi::jiff::Timestamp;

    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    fn at(secs: i64) -> MicroTime {
        MicroTime(Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    fn rec(run_id: &str, low: i64, high: i64, read_secs: i64) -> ClockRecord {
        ClockRecord {
            run_id: run_id.into(),
            offset_low_millis: low,
            offset_high_millis: high,
            read_at: at(read_secs),
        }
    }

    #[test]
    fn a_reading_spans_the_servers_uncertainty_and_the_round_trip() {
        let t0 = Instant::now();
        let sample = TimeSample {
            // The member reads 10.5 s past the server's 1_800_000_000.
            member_micros: 1_800_000_010_500_000,
            sent: t0,
            received: t0 + Duration::from_millis(2),
        };
        let server = ServerTime {
            low: Timestamp::from_millisecond(1_800_000_000_000).unwrap(),
            high: Timestamp::from_millisecond(1_800_000_000_200).unwrap(),
        };
        let r = reading("R", &sample, server).unwrap();
        // member - server in [10.5 - 0.2, 10.5 - 0] ± (1 ms half round trip + 2 ms slack).
        assert_eq!((r.offset_low_millis, r.offset_high_millis), (10_297, 10_503));
        assert_eq!(
            r.read_at,
            at(0)
                .0
                .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(100))
                .map(MicroTime)
                .unwrap()
        );
        assert_eq!(r.run_id, "R");
        // The server's time known to within one second only (the clock check's first
        // sample): no reading, so no comparison either.
        let wide = ServerTime {
            high: Timestamp::from_millisecond(1_800_000_001_000).unwrap(),
            ..server
        };
        assert_eq!(reading("R", &sample, wide), None);
    }

    #[test]
    fn a_probe_slower_than_the_reference_width_gives_no_reading() {
        let t0 = Instant::now();
        let server = ServerTime {
            low: Timestamp::from_millisecond(1_800_000_000_000).unwrap(),
            high: Timestamp::from_millisecond(1_800_000_000_100).unwrap(),
        };
        let probe = |rtt_ms: u64| TimeSample {
            member_micros: 1_800_000_000_050_000,
            sent: t0,
            received: t0 + Duration::from_millis(rtt_ms),
        };
        assert!(reading("R", &probe(250), server).is_some());
        assert_eq!(reading("R", &probe(251), server), None);
    }

    /// A member's clock jumped 3 s while no leader probed it; the new leader's first probe of
    /// it takes 8 s. Taken as a reading, that probe would span 8 s, overlap the record, and end
    /// the comparison with nothing found; the leader's own later probes, judged against it,
    /// would see a clock in step. So it is no reading, and the next fast probe compares.
    #[test]
    fn a_leader_whose_first_probe_is_slow_compares_at_the_next_fast_one() {
        let t0 = Instant::now();
        let later = |ms: u64| t0 + Duration::from_millis(ms);
        let server_at = |ms: i64| ServerTime {
            low: Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap(),
            high: Timestamp::from_millisecond(1_800_000_000_100 + ms).unwrap(),
        };
        // In step with the server's clock when recorded, 20 s before; 3 s ahead now.
        let recorded = rec("R", -100, 100, -20);
        let slow = TimeSample {
            member_micros: 1_800_000_003_050_000,
            sent: t0,
            received: later(8_000),
        };
        let (first, track) = judge_sample(None, Some(&recorded), "R", slow, Some(server_at(0)), 0.01, TTL);
        let fast = TimeSample {
            member_micros: 1_800_000_012_050_000,
            sent: later(9_000),
            received: later(9_001),
        };
        let (next, _) = judge_sample(
            Some(&track),
            Some(&recorded),
            "R",
            fast,
            Some(server_at(9_000)),
            0.01,
            TTL,
        );
        assert!(
            matches!(
                next.verdict,
                Verdict::JumpedForward {
                    unwatched_since: Some(_),
                    ..
                }
            ),
            "{next:?}"
        );
        assert!(next.compared);
        // The slow probe judged nothing and left the record as it was.
        assert_eq!(
            first,
            Across {
                verdict: Verdict::Steady,
                record: Some(recorded.clone()),
                compared: false
            }
        );
    }

    #[test]
    fn a_jump_or_step_found_by_the_leaders_own_probes_moves_the_record() {
        let recorded = rec("R", -100, 100, 0);
        let now = rec("R", 500, 700, 20);
        let own_jump = Verdict::JumpedForward {
            by: Duration::from_millis(600),
            unwatched_since: None,
        };
        for own in [
            own_jump,
            Verdict::SteppedBack {
                by: Duration::from_millis(600),
            },
        ] {
            let a = across_leaders(Some(&recorded), Some(now.clone()), true, own, 0.01, TTL);
            assert_eq!(a.verdict, own);
            assert_eq!(a.record, Some(now.clone()), "{own:?}");
        }
        // Found by both: the leader's own (it is the more precise).
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", 4_900, 5_100, 20)),
            false,
            own_jump,
            0.01,
            TTL,
        );
        assert_eq!(a.verdict, own_jump);
    }

    #[test]
    fn a_forward_jump_against_the_record_wins_over_the_leaders_other_verdicts() {
        let recorded = rec("R", -100, 100, 0);
        let now = rec("R", 4_900, 5_100, 20);
        for own in [
            Verdict::SteppedBack {
                by: Duration::from_millis(50),
            },
            Verdict::Drifting {
                ratio_ppm: 20_000,
                over: Duration::from_secs(30),
            },
        ] {
            let a = across_leaders(Some(&recorded), Some(now.clone()), false, own, 0.01, TTL);
            assert!(
                matches!(
                    a.verdict,
                    Verdict::JumpedForward {
                        unwatched_since: Some(_),
                        ..
                    }
                ),
                "{own:?}: {a:?}"
            );
        }
        // A step back against the record does not hide the leader's own drift report.
        let drifting = Verdict::Drifting {
            ratio_ppm: 20_000,
            over: Duration::from_secs(30),
        };
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", -5_100, -4_900, 20)),
            false,
            drifting,
            0.01,
            TTL,
        );
        assert_eq!(a.verdict, drifting);
    }

    #[test]
    fn a_forward_jump_while_no_leader_probed_is_found_once() {
        let recorded = rec("R", -100, 100, 0);
        // 20 s later another leader reads the clock 5 s further ahead of the server's.
        let now = rec("R", 4_900, 5_100, 20);
        let a = across_leaders(
            Some(&recorded),
            Some(now.clone()),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(
            a.verdict,
            Verdict::JumpedForward {
                by: Duration::from_millis(4_800),
                unwatched_since: Some(recorded.read_at.0),
            }
        );
        // The record moves to the new reading: the jump is not found again.
        assert_eq!(a.record, Some(now.clone()));
        assert!(a.compared);
        let again = across_leaders(
            a.record.as_ref(),
            Some(rec("R", 4_900, 5_100, 21)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(again.verdict, Verdict::Steady);
    }

    #[test]
    fn drift_within_the_allowance_is_no_jump_and_writes_nothing() {
        // 20 s at factor 1 %: 200 ms, + 100 ppm of 20 s (2 ms), + 2 ms slack.
        let recorded = rec("R", -100, 100, 0);
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", 300, 500, 20)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(a.verdict, Verdict::Steady);
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", 305, 505, 20)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert!(matches!(a.verdict, Verdict::JumpedForward { .. }), "{a:?}");
        // Overlapping readings (the intervals' jitter): the record stays as it is.
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", -50, 400, 20)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!((a.verdict, a.record), (Verdict::Steady, Some(recorded.clone())));
    }

    #[test]
    fn the_factor_counts_over_one_lock_ttl_at_most_and_the_record_age_adds_assumed_drift() {
        let recorded = rec("R", -100, 100, 0);
        // 1800 s later: factor over 30 s (300 ms) + 100 ppm of 1800 s (180 ms) + 2 ms.
        let ok = across_leaders(
            Some(&recorded),
            Some(rec("R", 580, 700, 1800)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(ok.verdict, Verdict::Steady);
        let jump = across_leaders(
            Some(&recorded),
            Some(rec("R", 590, 700, 1800)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert!(matches!(jump.verdict, Verdict::JumpedForward { .. }), "{jump:?}");
    }

    #[test]
    fn a_backward_step_is_reported_not_a_jump() {
        let recorded = rec("R", -100, 100, 0);
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", -5_100, -4_900, 20)),
            false,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(
            a.verdict,
            Verdict::SteppedBack {
                by: Duration::from_millis(4_800)
            }
        );
    }

    #[test]
    fn only_the_first_comparison_of_a_leader_judges() {
        let recorded = rec("R", -100, 100, 0);
        // Compared already: this leader's own probes judge from here (a jump they missed
        // cannot hide from them), so no verdict; the record moves along.
        let a = across_leaders(
            Some(&recorded),
            Some(rec("R", 4_900, 5_100, 20)),
            true,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(a.verdict, Verdict::Steady);
        assert_eq!(a.record, Some(rec("R", 4_900, 5_100, 20)));
    }

    #[test]
    fn a_new_process_or_no_record_starts_a_baseline_without_a_verdict() {
        let other = rec("OLD", -100, 100, 0);
        let now = rec("R", 60_000, 60_200, 20);
        for recorded in [None, Some(&other)] {
            let a = across_leaders(recorded, Some(now.clone()), false, Verdict::Steady, 0.01, TTL);
            assert_eq!(
                a,
                Across {
                    verdict: Verdict::Steady,
                    record: Some(now.clone()),
                    compared: true
                }
            );
        }
    }

    #[test]
    fn without_the_servers_time_nothing_is_judged_and_the_record_stays() {
        let recorded = rec("R", -100, 100, 0);
        let a = across_leaders(Some(&recorded), None, false, Verdict::Steady, 0.01, TTL);
        assert_eq!(
            a,
            Across {
                verdict: Verdict::Steady,
                record: Some(recorded),
                compared: false
            }
        );
    }

    #[test]
    fn a_record_is_written_again_when_proven_apart_or_an_hour_old() {
        let recorded = rec("R", -100, 100, 0);
        // Band at factor 1 %, TTL 30 s: 150 ms.
        assert_eq!(refresh_band(0.01, TTL), 150);
        let near = across_leaders(
            Some(&recorded),
            Some(rec("R", 200, 300, 600)),
            true,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(near.record, Some(recorded.clone()));
        let apart = across_leaders(
            Some(&recorded),
            Some(rec("R", 260, 400, 600)),
            true,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(apart.record, Some(rec("R", 260, 400, 600)));
        let behind = across_leaders(
            Some(&recorded),
            Some(rec("R", -400, -260, 600)),
            true,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(behind.record, Some(rec("R", -400, -260, 600)));
        let old = across_leaders(
            Some(&recorded),
            Some(rec("R", -90, 90, 3600)),
            true,
            Verdict::Steady,
            0.01,
            TTL,
        );
        assert_eq!(old.record, Some(rec("R", -90, 90, 3600)));
    }

    #[test]
    fn a_member_keeps_only_a_record_about_its_own_process() {
        let mine = rec("R", 0, 1, 0);
        let old = rec("OLD", 0, 1, 0);
        assert_eq!(
            for_process(Some("R"), Some(&mine), Some(&old)),
            Some(mine.clone())
        );
        assert_eq!(for_process(Some("R"), None, Some(&mine)), Some(mine.clone()));
        assert_eq!(for_process(Some("R"), Some(&old), Some(&old)), None);
        assert_eq!(for_process(None, Some(&mine), Some(&mine)), None);
    }
}
