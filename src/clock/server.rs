//! The API server's clock on this process's monotonic timeline (docs/design.md §9.3).
//!
//! Members' clocks are compared across operator leaders through a reference every leader
//! shares: the API server's clock, read from the `Date` header of the clock check's samples
//! ([`crate::runtime::clock_check`]). Unlike [`crate::clock::offset`], which measures this process's
//! *wall* clock against the server's, this places the server's time on the *monotonic* clock:
//! a step of the operator's own wall clock then cannot move a member's reading, so it can
//! never make a member look as if its clock jumped.
//!
//! One sample says the server's clock read somewhere in `[date, date + 1 s)` at some instant
//! between the request leaving and its answer arriving. Assuming the server's clock runs at
//! the monotonic clock's rate between samples of one window, each sample bounds the server's
//! time at any instant `m`; samples at other phases of the server's second narrow it (their
//! intersection). Samples that contradict the newest come from before a step of the server's
//! clock and are dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// One timed request: when it left and when its answer arrived (monotonic), and the server's
/// `Date` (a whole second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedDate {
    pub sent: Instant,
    pub received: Instant,
    pub date: Timestamp,
}

/// The server's clock at one instant, as far as it is known: somewhere in `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerTime {
    pub low: Timestamp,
    pub high: Timestamp,
}

impl ServerTime {
    pub fn middle(&self) -> Timestamp {
        self.low + self.low.duration_until(self.high) / 2
    }

    /// How wide the interval is.
    pub fn width(&self) -> SignedDuration {
        self.low.duration_until(self.high)
    }
}

/// A signed span from `base` to `at` on the monotonic clock.
fn since(at: Instant, base: Instant) -> SignedDuration {
    if at >= base {
        SignedDuration::try_from(at - base).unwrap_or(SignedDuration::MAX)
    } else {
        -SignedDuration::try_from(base - at).unwrap_or(SignedDuration::MAX)
    }
}

/// How fast the server's clock may run against this process's monotonic clock (both drift,
/// and NTP slews a clock by up to 500 ppm while correcting it): each sample's bounds widen by
/// this much of its age, so that old samples never narrow the estimate to a wrong interval.
pub(crate) const MAX_RATE_PPM: i64 = 500;

impl TimedDate {
    /// The server's time at `at`, from this sample alone.
    fn bounds_at(&self, at: Instant) -> (Timestamp, Timestamp) {
        // The server read `date..date+1s` at an unknown instant t in [sent, received]:
        // server(at) = server(t) + (at - t), give or take the rates' difference.
        let age = since(at, self.received).abs();
        let slack = SignedDuration::from_nanos(
            (age.as_nanos().saturating_mul(i128::from(MAX_RATE_PPM)) / 1_000_000).min(i128::from(i64::MAX))
                as i64,
        );
        let low = self.date + since(at, self.received) - slack;
        let high = self.date + SignedDuration::from_secs(1) + since(at, self.sent) + slack;
        (low, high)
    }
}

/// The samples of the last `window` (monotonic), as an estimate of the server's clock.
#[derive(Debug)]
pub(crate) struct ServerClock {
    window: Duration,
    samples: VecDeque<TimedDate>,
}

impl ServerClock {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            samples: VecDeque::new(),
        }
    }

    pub fn add(&mut self, sample: TimedDate) {
        while let Some(first) = self.samples.front() {
            if sample.received.saturating_duration_since(first.received) > self.window {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        self.samples.push_back(sample);
        // Samples that contradict the newest one come from before a step of the server's
        // clock: only the newest tells the truth about now.
        if self.intersection(sample.received).is_none() {
            self.samples.retain(|s| *s == sample);
        }
    }

    fn intersection(&self, at: Instant) -> Option<ServerTime> {
        let mut it = self.samples.iter().map(|s| s.bounds_at(at));
        let (mut low, mut high) = it.next()?;
        for (lo, hi) in it {
            low = low.max(lo);
            high = high.min(hi);
        }
        (low <= high).then_some(ServerTime { low, high })
    }

    /// The server's time at `at`, if a sample of the last window exists.
    pub fn at(&self, at: Instant) -> Option<ServerTime> {
        let newest = self.samples.back()?;
        if at.saturating_duration_since(newest.received) > self.window {
            return None;
        }
        self.intersection(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    /// A sample whose request left at `sent` ms after `t0` and took 4 ms, against a server
    /// whose clock reads `server_at_t0` ms at `t0`.
    fn sample(t0: Instant, sent: u64, server_at_t0: i64) -> TimedDate {
        let sent_at = t0 + Duration::from_millis(sent);
        // The server reads its clock half way; the header keeps the whole second.
        let server_ms = server_at_t0 + sent as i64 + 2;
        TimedDate {
            sent: sent_at,
            received: sent_at + Duration::from_millis(4),
            date: ts(server_ms.div_euclid(1000) * 1000),
        }
    }

    #[test]
    fn one_sample_bounds_the_server_to_a_second_and_the_round_trip() {
        let t0 = Instant::now();
        let mut c = ServerClock::new(Duration::from_secs(60));
        c.add(sample(t0, 0, 10_300));
        let now = c.at(t0 + Duration::from_secs(5)).unwrap();
        let truth = ts(15_300);
        assert!(now.low <= truth && truth <= now.high, "{now:?}");
        // A second, the round trip, and 500 ppm of 5 s either way.
        assert!(now.low.duration_until(now.high) <= SignedDuration::from_millis(1009));
    }

    #[test]
    fn samples_at_other_phases_narrow_it() {
        let t0 = Instant::now();
        let mut c = ServerClock::new(Duration::from_secs(60));
        for (i, phase) in [0u64, 370, 740, 110, 480, 850].iter().enumerate() {
            c.add(sample(t0, i as u64 * 10_000 + phase, 10_300));
        }
        let at = t0 + Duration::from_secs(60);
        let now = c.at(at).unwrap();
        let truth = ts(70_300);
        assert!(now.low <= truth && truth <= now.high, "{now:?}");
        // The widest gap between the six phases (of the server's second: .042, .152, .302,
        // .412, .672, .782) is 260 ms, plus the round trip, plus 500 ppm of the samples' ages
        // (up to 60 s: 30 ms) either way.
        assert!(now.width() <= SignedDuration::from_millis(324), "{now:?}");
        assert!(now.middle().duration_since(truth).abs() <= SignedDuration::from_millis(162));
    }

    #[test]
    fn a_server_clock_running_fast_within_the_rate_bound_stays_inside_the_estimate() {
        let t0 = Instant::now();
        let mut c = ServerClock::new(Duration::from_secs(120));
        // The server's clock gains 400 ppm on the monotonic clock (an NTP slew).
        let fast = |sent: u64| {
            let mut s = sample(t0, sent, 10_300);
            let gained = (sent as i64 + 2) * 400 / 1_000_000;
            let server_ms = 10_300 + sent as i64 + 2 + gained;
            s.date = ts(server_ms.div_euclid(1000) * 1000);
            (s, server_ms)
        };
        // The oldest sample read the server's clock 10 ms before a second's end: without
        // widening, 2 min later its upper bound (drawn at the monotonic rate) would be 38 ms
        // below the server's time.
        let (oldest, server_ms) = fast(688);
        assert_eq!(server_ms.rem_euclid(1000), 990);
        c.add(oldest);
        c.add(fast(60_370).0);
        c.add(fast(119_740).0);
        let at = 120_000;
        let truth = ts(10_300 + at as i64 + at as i64 * 400 / 1_000_000);
        let now = c.at(t0 + Duration::from_millis(at)).unwrap();
        assert!(now.low <= truth && truth <= now.high, "{now:?} vs {truth}");
    }

    #[test]
    fn a_step_of_the_servers_clock_keeps_only_the_newest_sample() {
        let t0 = Instant::now();
        let mut c = ServerClock::new(Duration::from_secs(60));
        c.add(sample(t0, 0, 10_300));
        c.add(sample(t0, 10_370, 10_300));
        // The server's clock stepped 5 s back.
        c.add(sample(t0, 20_740, 5_300));
        let now = c.at(t0 + Duration::from_secs(21)).unwrap();
        let truth = ts(5_300 + 21_000);
        assert!(now.low <= truth && truth <= now.high, "{now:?}");
    }

    #[test]
    fn no_estimate_without_a_recent_sample() {
        let t0 = Instant::now();
        let mut c = ServerClock::new(Duration::from_secs(40));
        assert!(c.at(t0).is_none());
        c.add(sample(t0, 0, 10_300));
        assert!(c.at(t0 + Duration::from_secs(30)).is_some());
        assert!(c.at(t0 + Duration::from_secs(41)).is_none());
    }
}
