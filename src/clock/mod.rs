//! The operator's clock, built so that no step of its wall clock can shorten a hold
//! (docs/design.md §9.1).
//!
//! Holds end at wall-clock instants (`heldUntil`: what users and other replicas read), but
//! the wall clock can be *stepped* (NTP stepping instead of slewing, a VM resumed, `date -s`).
//! The monotonic clock cannot: NTP slews both alike, only steps set them apart. So every
//! reading compares the two and sums the wall clock's forward steps (`skipped`); a deadline
//! this process timed is pushed back by every step since it was set ([`crate::clock::timers`]).
//! A backward step only makes wall deadlines later; it is never subtracted.
//!
//! This folder is time, pure (the clock is read at the edges and passed in): [`timers`]
//! (§9.1), [`offset`] (§9.2), [`server`], [`member`] and [`record`] (§9.3). The task that
//! samples the offset runs in `crate::runtime::clock_check`.

pub mod member;
pub(crate) mod offset;
pub(crate) mod record;
pub(crate) mod server;
pub mod timers;

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
pub(crate) const STEP_RESOLUTION: Duration = Duration::from_millis(1);

/// Sums forward steps of a wall clock against a monotonic one. Pure: the readings are
/// arguments (the monotonic ones as time since any fixed origin).
///
/// The wall clock is read between two monotonic reads, `before` and `after`, so the true
/// `wall - monotonic` at the wall read lies between `wall - after` (low) and `wall - before`
/// (high). A forward step is judged on the high end (a delay before the wall read counts as a
/// step: it only lengthens holds), a backward one on the low end, and the base is always set
/// to the low end. Then, whatever the delays, between any two readings i < j the sum grows by
/// at least the true offset's rise minus twice the resolution, so a hold anchored at i and
/// ended at j is never short by more than 2 ms (`docs/design.md` §9.1). (Judging and setting
/// the base on the high end alone was not so: a delayed anchor reading raised the base by its
/// delay, and the next step was undercounted by it.)
#[derive(Debug, Default, Clone)]
pub(crate) struct StepWatch {
    /// The low end of `wall - monotonic` when a step was last accounted for.
    base: Option<SignedDuration>,
    skipped: Duration,
    /// The last monotonic reading: a reading that began before it (two callers racing) is
    /// not used to judge steps.
    last_mono: Duration,
}

impl StepWatch {
    /// `wall` was read after the monotonic reading `before` and before `after`.
    pub fn observe(&mut self, wall: Timestamp, before: Duration, after: Duration) -> Reading {
        let after = after.max(before);
        let wall_ns = SignedDuration::from_nanos_i128(wall.as_nanosecond());
        let mono = |d: Duration| SignedDuration::try_from(d).expect("monotonic time since start fits");
        let (low, high) = (wall_ns - mono(after), wall_ns - mono(before));
        if before >= self.last_mono {
            self.last_mono = after;
            match self.base {
                None => self.base = Some(low),
                Some(base) => {
                    let resolution = SignedDuration::try_from(STEP_RESOLUTION).expect("small");
                    let moved = high - base;
                    if moved > resolution {
                        self.skipped += moved.unsigned_abs();
                        self.base = Some(low);
                    } else if low - base < -resolution {
                        // Backward (or a wide reading that may be): deadlines already set come
                        // later in real time; nothing to count. The base only goes down, so a
                        // later forward step is counted in full (a wide reading's width at worst
                        // on top).
                        self.base = Some(low);
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

/// A reading whose wall read took longer than this is taken again (see [`narrow_reading`]).
pub(crate) const MAX_READING_WIDTH: Duration = Duration::from_micros(100);

/// Reads per [`SystemClock::now`] at most (the first and two more).
const READ_ATTEMPTS: usize = 3;

/// `read` gives (monotonic before, wall, monotonic after). A delay between the reads (a
/// preemption on a loaded node; libfaketime re-reading its offset file) widens the interval
/// the true offset is known in; [`StepWatch`] counts the width as a forward step (safe: it
/// only lengthens holds), and a CI run saw 3 ms of it in
/// `redlock_operator_clock_forward_steps_seconds_total` before any step had happened. So a reading
/// wider than [`MAX_READING_WIDTH`] is taken again, at most [`READ_ATTEMPTS`] reads in all,
/// and the narrowest used.
pub(crate) fn narrow_reading(
    mut read: impl FnMut() -> (Duration, Timestamp, Duration),
) -> (Duration, Timestamp, Duration) {
    let width = |r: &(Duration, Timestamp, Duration)| r.2.saturating_sub(r.0);
    let mut best = read();
    for _ in 1..READ_ATTEMPTS {
        if width(&best) <= MAX_READING_WIDTH {
            break;
        }
        let next = read();
        if width(&next) < width(&best) {
            best = next;
        }
    }
    best
}

/// The process's clock: the system's wall and monotonic clocks through a [`StepWatch`].
pub(crate) struct SystemClock {
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
        let (before, wall, after) = narrow_reading(|| {
            let before = self.origin.elapsed();
            let wall = Timestamp::now();
            (before, wall, self.origin.elapsed())
        });
        watch.observe(wall, before, after)
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
            .map(|&(wl, mo)| w.observe(wall(wl), ms(mo), ms(mo)).skipped.as_millis() as u64)
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
        w.observe(wall(0), ms(0), ms(0));
        // 0.4 ms of excess per reading: nothing for two readings, then 1.2 ms at once.
        let mut seen = vec![];
        for _ in 0..3 {
            t += 1_000_400; // µs
            m += 1_000_000;
            let r = w.observe(
                Timestamp::from_microsecond(1_800_000_000_000_000 + t).unwrap(),
                Duration::from_micros(m),
                Duration::from_micros(m),
            );
            seen.push(r.skipped.as_micros());
        }
        assert_eq!(seen, [0, 0, 1200]);
    }

    #[test]
    fn a_stale_reading_does_not_judge_steps() {
        let mut w = StepWatch::default();
        w.observe(wall(0), ms(0), ms(0));
        w.observe(wall(2000), ms(2000), ms(2000));
        // A reading taken before the last one (racing callers) with a wall time that looks
        // like a jump relative to it.
        let r = w.observe(wall(9000), ms(1000), ms(1000));
        assert_eq!(r.skipped, Duration::ZERO);
    }

    /// A reading at real time `t` µs: the monotonic clock read at `t`, the wall clock
    /// (`offset` µs ahead of real time) `d1` µs later, the monotonic clock again `d2` µs
    /// after that. Returns the sum in µs.
    fn read(w: &mut StepWatch, t: u64, offset: i64, d1: u64, d2: u64) -> i64 {
        let wall = Timestamp::from_microsecond(1_800_000_000_000_000 + (t + d1) as i64 + offset).unwrap();
        let before = Duration::from_micros(t);
        let r = w.observe(wall, before, before + Duration::from_micros(d1 + d2));
        r.skipped.as_micros() as i64
    }

    #[test]
    fn a_delay_before_the_wall_read_counts_as_a_step_never_less() {
        let mut w = StepWatch::default();
        read(&mut w, 0, 0, 0, 0);
        // The wall read 3 ms late: conservatively a 3 ms step; nothing more after it.
        assert_eq!(read(&mut w, 1_000_000, 0, 3000, 0), 3000);
        assert_eq!(read(&mut w, 2_000_000, 0, 0, 0), 3000);
    }

    #[test]
    fn a_delayed_anchor_reading_does_not_shorten_the_next_step() {
        // The review's case: a hold anchored at a reading whose wall read came 3 ms late, then
        // a +20 s step. The sum between the two readings must grow by the full 20 s.
        let mut w = StepWatch::default();
        read(&mut w, 0, 0, 0, 0);
        let anchor = read(&mut w, 1_000_000, 0, 3000, 1);
        let end = read(&mut w, 5_000_000, 20_000_000, 0, 0);
        assert!(end - anchor >= 20_000_000, "{anchor} -> {end}");
    }

    #[test]
    fn a_delay_between_the_reads_with_no_step_adds_at_most_twice_its_width() {
        let mut w = StepWatch::default();
        read(&mut w, 0, 0, 0, 0);
        let mut total = 0;
        for (i, (d1, d2)) in [(3000, 0), (0, 0), (0, 40_000), (0, 0), (900, 900), (0, 0)]
            .into_iter()
            .enumerate()
        {
            total += d1 + d2;
            let s = read(&mut w, (i as u64 + 1) * 1_000_000, 0, d1, d2);
            assert!(s <= 2 * total as i64, "reading {i}: {s} > 2 x {total}");
        }
    }

    proptest::proptest! {
        /// Any mix of steps (either way) and delays around the wall read: for every pair of
        /// readings i < j the sum grows by at least the true offset's rise between them minus
        /// twice the resolution. That is what a hold anchored at i and ended at j needs to last
        /// its length in real time (design §9.1's proof).
        #[test]
        fn the_sum_never_falls_short_of_the_true_steps_between_two_readings(
            events in proptest::collection::vec(
                (
                    proptest::prop_oneof![3 => proptest::strategy::Just(0i64), 1 => -60_000_000i64..60_000_000],
                    proptest::prop_oneof![2 => proptest::strategy::Just(0u64), 1 => 0u64..5_000],
                    proptest::prop_oneof![2 => proptest::strategy::Just(0u64), 1 => 0u64..5_000],
                ),
                1..40,
            )
        ) {
            let mut w = StepWatch::default();
            let mut offset = 0i64;
            let mut seen = vec![(offset, read(&mut w, 0, 0, 0, 0))];
            for (k, (step, d1, d2)) in events.into_iter().enumerate() {
                offset += step;
                seen.push((offset, read(&mut w, (k as u64 + 1) * 1_000_000, offset, d1, d2)));
            }
            let slack = 2 * STEP_RESOLUTION.as_micros() as i64;
            for (i, &(oi, si)) in seen.iter().enumerate() {
                for &(oj, sj) in &seen[i + 1..] {
                    proptest::prop_assert!(sj - si + slack >= oj - oi, "{:?}", seen);
                }
            }
        }
    }

    fn scripted(reads: &[(u64, i64)]) -> ((Duration, Timestamp, Duration), usize) {
        // (width µs, wall ms) per attempt; attempt n starts at n seconds.
        let mut n = 0;
        let chosen = narrow_reading(|| {
            let (width, wall_ms) = reads[n];
            n += 1;
            let before = Duration::from_secs(n as u64);
            (before, wall(wall_ms), before + Duration::from_micros(width))
        });
        (chosen, n)
    }

    #[test]
    fn a_wide_reading_is_taken_again_and_the_narrowest_used_whole() {
        let at = |n: u64, width: u64, wall_ms: i64| {
            let before = Duration::from_secs(n);
            (before, wall(wall_ms), before + Duration::from_micros(width))
        };
        // Narrow at once (the bound itself is narrow): one read.
        assert_eq!(scripted(&[(100, 1), (5, 2), (5, 3)]), (at(1, 100, 1), 1));
        // Wide, then narrow: the second, its wall with its monotonic reads.
        assert_eq!(scripted(&[(3000, 1), (20, 2), (5, 3)]), (at(2, 20, 2), 2));
        // All wide: the narrowest of the three.
        assert_eq!(scripted(&[(3000, 1), (900, 2), (2000, 3)]), (at(2, 900, 2), 3));
    }

    #[test]
    fn the_system_clock_reads_without_steps() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b.wall >= a.wall || a.wall.duration_since(b.wall) < SignedDuration::from_millis(1));
        // Zero unless every read of a reading was delayed past the resolution (preempted on a
        // loaded machine), which counts the delay as a step: never more than a few ms.
        assert!(c.skipped() < Duration::from_millis(50), "{:?}", c.skipped());
    }
}
