//! The operator's clock, built so that no step of its wall clock can shorten a hold
//! (docs/design.md §9.1).
//!
//! Holds end at wall-clock instants (`heldUntil`: what users and other replicas read), but
//! the wall clock can be *stepped* (NTP stepping instead of slewing, a VM resumed, `date -s`).
//! The monotonic clock cannot: NTP slews both alike, only steps set them apart. So every
//! reading compares the two and sums the wall clock's forward steps (`skipped`); a deadline
//! this process timed is pushed back by every step since it was set ([`crate::hold_timers`]).
//! A backward step only makes wall deadlines later; it is never subtracted.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// One reading of the operator's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The wall clock (what status timestamps are written in).
    pub wall: Timestamp,
    /// The sum of the wall clock's forward steps since this process started.
    pub skipped: Duration,
}

impl Reading {
    /// A reading with no step seen (tests, and the first reading of a process).
    pub fn at(wall: Timestamp) -> Self {
        Self {
            wall,
            skipped: Duration::ZERO,
        }
    }
}

/// Changes of `wall - monotonic` smaller than this are reading noise (the two clocks are not
/// read at the same instant). They are not lost: they add up until they pass it, then count
/// in full.
pub const STEP_RESOLUTION: Duration = Duration::from_millis(1);

/// Sums forward steps of a wall clock against a monotonic one. Pure: both readings are
/// arguments (the monotonic one as time since any fixed origin).
#[derive(Debug, Default, Clone)]
pub struct StepWatch {
    /// `wall - monotonic` when a step was last accounted for.
    base: Option<SignedDuration>,
    skipped: Duration,
    /// The last monotonic reading: a reading older than it (two callers racing) is not used
    /// to judge steps.
    last_mono: Duration,
}

impl StepWatch {
    pub fn observe(&mut self, wall: Timestamp, mono: Duration) -> Reading {
        let offset = SignedDuration::from_nanos_i128(wall.as_nanosecond())
            - SignedDuration::try_from(mono).expect("monotonic time since start fits");
        if mono >= self.last_mono {
            self.last_mono = mono;
            match self.base {
                None => self.base = Some(offset),
                Some(base) => {
                    let moved = offset - base;
                    let resolution = SignedDuration::try_from(STEP_RESOLUTION).expect("small");
                    if moved > resolution {
                        self.skipped += moved.unsigned_abs();
                        self.base = Some(offset);
                    } else if moved < -resolution {
                        // Backward: deadlines already set come later in real time; nothing to do.
                        self.base = Some(offset);
                    }
                }
            }
        }
        Reading {
            wall,
            skipped: self.skipped,
        }
    }

    pub fn skipped(&self) -> Duration {
        self.skipped
    }
}

/// The process's clock: the system's wall and monotonic clocks through a [`StepWatch`].
pub struct SystemClock {
    origin: Instant,
    watch: Mutex<StepWatch>,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemClock {
    pub fn new() -> Self {
        let clock = Self {
            origin: Instant::now(),
            watch: Mutex::new(StepWatch::default()),
        };
        clock.now();
        clock
    }

    pub fn now(&self) -> Reading {
        let mut watch = self.watch.lock().expect("clock lock is never poisoned");
        // Both clocks are read under the lock, so readings are ordered.
        let mono = self.origin.elapsed();
        watch.observe(Timestamp::now(), mono)
    }

    /// Forward steps of the wall clock seen so far.
    pub fn skipped(&self) -> Duration {
        self.watch.lock().expect("clock lock is never poisoned").skipped()
    }

    /// Time since this process's clock started (monotonic).
    pub fn uptime(&self) -> Duration {
        self.origin.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// (wall ms, monotonic ms) readings -> skipped after each.
    fn run(readings: &[(i64, u64)]) -> Vec<u64> {
        let mut w = StepWatch::default();
        readings
            .iter()
            .map(|&(wl, mo)| w.observe(wall(wl), ms(mo)).skipped.as_millis() as u64)
            .collect()
    }

    #[test]
    fn clocks_in_step_skip_nothing() {
        assert_eq!(run(&[(0, 0), (1000, 1000), (5000, 5000)]), [0, 0, 0]);
    }

    #[test]
    fn a_forward_step_counts_in_full_once() {
        // +20 s between the second and third reading.
        assert_eq!(
            run(&[(0, 0), (1000, 1000), (22_000, 2000), (23_000, 3000)]),
            [0, 0, 20_000, 20_000]
        );
    }

    #[test]
    fn a_backward_step_is_not_subtracted_and_a_later_forward_step_counts() {
        // -30 s, then NTP steps +30 s back to the right time: the forward step counts, since
        // deadlines set in between were set on the slow clock.
        assert_eq!(
            run(&[(0, 0), (-29_000, 1000), (-28_000, 2000), (3000, 3000)]),
            [0, 0, 0, 30_000]
        );
    }

    #[test]
    fn noise_below_the_resolution_adds_up_until_it_counts() {
        let mut w = StepWatch::default();
        let mut t = 0i64;
        let mut m = 0u64;
        w.observe(wall(0), ms(0));
        // 0.4 ms of excess per reading: nothing for two readings, then 1.2 ms at once.
        let mut seen = vec![];
        for _ in 0..3 {
            t += 1_000_400; // µs
            m += 1_000_000;
            let r = w.observe(
                Timestamp::from_microsecond(1_800_000_000_000_000 + t).unwrap(),
                Duration::from_micros(m),
            );
            seen.push(r.skipped.as_micros());
        }
        assert_eq!(seen, [0, 0, 1200]);
    }

    #[test]
    fn a_stale_reading_does_not_judge_steps() {
        let mut w = StepWatch::default();
        w.observe(wall(0), ms(0));
        w.observe(wall(2000), ms(2000));
        // A reading taken before the last one (racing callers) with a wall time that looks
        // like a jump relative to it.
        let r = w.observe(wall(9000), ms(1000));
        assert_eq!(r.skipped, Duration::ZERO);
    }

    #[test]
    fn the_system_clock_reads_without_steps() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b.wall >= a.wall || a.wall.duration_since(b.wall) < SignedDuration::from_millis(1));
        assert_eq!(c.skipped(), Duration::ZERO);
    }
}
