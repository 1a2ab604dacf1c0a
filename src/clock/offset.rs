//! The operator's wall-clock offset to the API server (docs/design.md §9.2).
//!
//! Holds no longer depend on it ([`crate::clock::timers`] times every hold on this process's
//! own monotonic clock), but `heldUntil` and `lowersAt` are written in wall time, and users,
//! alerts and other replicas read them as such. So the operator measures how far its wall
//! clock is from the API server's, exports it, and releases nothing while the offset *may*
//! exceed a bound: a status that says "held until 12:00:00" is then true to within the bound.
//!
//! The API server is the reference because it is the one clock every reader of the status
//! already shares (it stamps `creationTimestamp`, Lease expiry for kubelets, and the Events
//! users read). Its HTTP `Date` header has whole-second resolution: one sample bounds the
//! offset to an interval of one second plus the round trip; samples at different phases of
//! the second narrow it (their intersection), as long as no step happened in between.

use std::collections::VecDeque;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// One timed request: the local wall clock when it was sent and when the answer came, and the
/// server's `Date` (a whole second: the server's time was in `[date, date + 1 s)`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub sent: Timestamp,
    pub received: Timestamp,
    pub date: Timestamp,
}

impl Sample {
    /// The interval that `local - server` lies in.
    fn bounds(&self) -> (SignedDuration, SignedDuration) {
        let second = SignedDuration::from_secs(1);
        let lo = self.sent.duration_since(self.date) - second;
        let hi = self.received.duration_since(self.date);
        (lo, hi)
    }
}

/// The offset as measured: `local - server` lies in `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offset {
    pub low: SignedDuration,
    pub high: SignedDuration,
}

impl Offset {
    pub fn estimate(&self) -> SignedDuration {
        (self.low + self.high) / 2
    }

    /// The largest the offset may be, either way (the tests' measure of what a bound may be
    /// exceeded by).
    #[cfg(test)]
    pub fn worst(&self) -> Duration {
        self.low.unsigned_abs().max(self.high.unsigned_abs())
    }
}

/// Samples of the last `window` (monotonic), narrowed to their intersection.
#[derive(Debug)]
pub(crate) struct OffsetTracker {
    window: Duration,
    /// (monotonic time of the sample, its bounds)
    samples: VecDeque<(Duration, SignedDuration, SignedDuration)>,
}

impl OffsetTracker {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Adds a sample taken at monotonic time `mono`.
    pub fn add(&mut self, sample: Sample, mono: Duration) {
        let (lo, hi) = sample.bounds();
        while let Some((t, ..)) = self.samples.front() {
            if mono.saturating_sub(*t) > self.window {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        self.samples.push_back((mono, lo, hi));
        // Samples that contradict the newest one come from before a step of either clock:
        // only the newest tells the truth about now.
        if self.intersection().is_none() {
            self.samples.retain(|s| s.0 == mono);
        }
    }

    fn intersection(&self) -> Option<Offset> {
        let mut it = self.samples.iter();
        let &(_, mut low, mut high) = it.next()?;
        for &(_, lo, hi) in it {
            low = low.max(lo);
            high = high.min(hi);
        }
        (low <= high).then_some(Offset { low, high })
    }

    /// The offset, if a sample of the last window exists at `mono`.
    pub fn offset(&self, mono: Duration) -> Option<Offset> {
        let newest = self.samples.back()?.0;
        if mono.saturating_sub(newest) > self.window {
            return None;
        }
        self.intersection()
    }
}

/// Why releases must wait, given the measured offset and the bound: only while the offset is
/// *certainly* beyond it (the whole measured interval outside `±bound`: a clock that NTP lost
/// or a hand set wrong). Holds never depend on it (§9.1), only the truth of the wall times in
/// status does, so what cannot be measured blocks nothing (safety review 3, N9): API servers
/// behind one load balancer with clocks a second or two apart give samples that contradict
/// each other (only the newest, one second plus the round trip wide, is kept, and its edge
/// flaps across the bound), and a proxy may drop the `Date` header; waiting on either would
/// stop every release of every cluster. Those cases are logged and exported instead
/// (`ClockCheck::run`).
pub(crate) fn release_blocked(offset: Option<Offset>, bound: Duration) -> Option<String> {
    let o = offset?;
    let bound = SignedDuration::try_from(bound).unwrap_or(SignedDuration::MAX);
    (o.low > bound || o.high < -bound).then(|| {
        format!(
            "the operator's clock is off the API server's by {:.3}..{:.3} s, more than the bound of {:.3} s (--max-clock-offset-ms); releases wait until its clock is corrected",
            o.low.as_secs_f64(),
            o.high.as_secs_f64(),
            bound.as_secs_f64()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + n).unwrap()
    }
    fn sample(sent: i64, received: i64, date_s: i64) -> Sample {
        Sample {
            sent: ms(sent),
            received: ms(received),
            date: ms(date_s * 1000),
        }
    }
    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn one_sample_bounds_the_offset_to_a_second_and_the_round_trip() {
        let mut t = OffsetTracker::new(secs(60));
        // Local 10.200 -> 10.210, server says 10 (it was 10.000..10.999 there).
        t.add(sample(10_200, 10_210, 10), secs(0));
        let o = t.offset(secs(0)).unwrap();
        assert_eq!(o.low, SignedDuration::from_millis(-800));
        assert_eq!(o.high, SignedDuration::from_millis(210));
        assert_eq!(o.worst(), Duration::from_millis(800));
    }

    #[test]
    fn samples_at_other_phases_narrow_it() {
        let mut t = OffsetTracker::new(secs(60));
        // True offset +20 s (local ahead): server time = local - 20 s.
        t.add(sample(30_100, 30_105, 10), secs(0)); // server 10.100..10.105
        t.add(sample(40_950, 40_955, 20), secs(10)); // server 20.950..20.955
        t.add(sample(51_010, 51_015, 31), secs(21)); // server 31.010..31.015
        let o = t.offset(secs(21)).unwrap();
        assert!(o.low <= SignedDuration::from_secs(20) && SignedDuration::from_secs(20) <= o.high);
        assert!(o.high - o.low <= SignedDuration::from_millis(100), "{o:?}");
        assert!((o.estimate() - SignedDuration::from_secs(20)).abs() < SignedDuration::from_millis(50));
    }

    #[test]
    fn a_step_discards_the_samples_before_it() {
        let mut t = OffsetTracker::new(secs(60));
        t.add(sample(10_500, 10_505, 10), secs(0));
        // Local clock stepped +5 s.
        t.add(sample(25_500, 25_505, 20), secs(10));
        let o = t.offset(secs(10)).unwrap();
        assert!(o.low >= SignedDuration::from_millis(4400), "{o:?}");
    }

    #[test]
    fn old_samples_expire_and_an_unmeasured_offset_blocks_nothing() {
        let mut t = OffsetTracker::new(secs(30));
        t.add(sample(10_500, 10_505, 10), secs(0));
        assert!(t.offset(secs(31)).is_none());
        assert_eq!(release_blocked(t.offset(secs(31)), secs(2)), None);
    }

    #[test]
    fn releases_wait_only_while_the_offset_is_certainly_beyond_the_bound() {
        let within = Offset {
            low: SignedDuration::from_millis(-800),
            high: SignedDuration::from_millis(200),
        };
        assert_eq!(release_blocked(Some(within), secs(2)), None);
        let off = Offset {
            low: SignedDuration::from_millis(19_500),
            high: SignedDuration::from_millis(20_100),
        };
        let why = release_blocked(Some(off), secs(2)).unwrap();
        assert!(why.contains("19.500..20.100"), "{why}");
        let behind = Offset {
            low: SignedDuration::from_millis(-20_100),
            high: SignedDuration::from_millis(-19_500),
        };
        assert!(release_blocked(Some(behind), secs(2)).is_some());
        // Straddling the bound: it may be within it, so nothing waits.
        let edge = Offset {
            low: SignedDuration::from_millis(1500),
            high: SignedDuration::from_millis(2500),
        };
        assert_eq!(release_blocked(Some(edge), secs(2)), None);
        let just_beyond = Offset {
            low: SignedDuration::from_millis(2001),
            high: SignedDuration::from_millis(2900),
        };
        assert!(release_blocked(Some(just_beyond), secs(2)).is_some());
    }

    /// N9: two API servers behind one load balancer, their clocks 1.5 s either side of the
    /// operator's, answer in turn. Every sample contradicts the one before, so only the newest
    /// is kept, and the worst case of its interval exceeds 2 s half the time: releases must go
    /// on all the same.
    #[test]
    fn api_servers_whose_clocks_disagree_do_not_stop_releases() {
        let mut t = OffsetTracker::new(secs(40));
        let mut may_exceed = 0;
        for i in 0..12i64 {
            let local = 10_000 + i * 10_000 + (i * 370) % 1000;
            // Server A is 1.5 s ahead of the operator, server B 1.5 s behind.
            let server_ms = if i % 2 == 0 { local + 1500 } else { local - 1500 };
            t.add(
                sample(local, local + 5, server_ms.div_euclid(1000)),
                secs(i as u64 * 10),
            );
            let o = t.offset(secs(i as u64 * 10)).unwrap();
            assert_eq!(release_blocked(Some(o), secs(2)), None, "sample {i}: {o:?}");
            may_exceed += usize::from(o.worst() > secs(2));
        }
        // What "wait while it may exceed the bound" did: it stopped releases again and again.
        assert!(may_exceed >= 3, "{may_exceed}");
    }
}
