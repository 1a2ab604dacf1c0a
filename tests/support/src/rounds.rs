//! When a background client's rounds began and ended: the proof that it kept running through
//! what the test did meanwhile, judged in time and not in a count. A count ("more than 20
//! rounds") fails a correct run on a loaded machine, where each round (fresh connections to
//! every member) is slower, and still passes a client that stalled for seconds at the moment
//! that mattered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shared between the client's task (which [`Rounds::record`]s) and the test (which asserts).
#[derive(Clone)]
pub struct Rounds(Arc<Mutex<Inner>>);

struct Inner {
    started: Instant,
    /// (began, ended) of every finished round, in order.
    done: Vec<(Instant, Instant)>,
}

impl Default for Rounds {
    fn default() -> Self {
        Self::new()
    }
}

impl Rounds {
    /// Starts the clock: the first round must end within the gap of now.
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(Inner {
            started: Instant::now(),
            done: Vec::new(),
        })))
    }

    /// A round that began at `began` ended now.
    pub fn record(&self, began: Instant) {
        self.0.lock().unwrap().done.push((began, Instant::now()));
    }

    /// Finished rounds so far.
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().done.len()
    }

    /// The longest time without a round ending: from the start to the first end, between
    /// ends, and from the last end to `until`.
    pub fn longest_gap(&self, until: Instant) -> Duration {
        let inner = self.0.lock().unwrap();
        let mut last = inner.started;
        let mut longest = Duration::ZERO;
        for &(_, ended) in &inner.done {
            longest = longest.max(ended.saturating_duration_since(last));
            last = ended;
        }
        longest.max(until.saturating_duration_since(last))
    }

    /// Rounds that began at or after `since` and have ended.
    pub fn begun_since(&self, since: Instant) -> usize {
        self.0
            .lock()
            .unwrap()
            .done
            .iter()
            .filter(|(b, _)| *b >= since)
            .count()
    }

    /// Panics unless the rounds ran throughout, up to now, with no gap over `max_gap`, and
    /// at least `min_after` whole rounds began at or after `since` (e.g. once the new
    /// password was published).
    pub fn assert_steady(&self, max_gap: Duration, since: Instant, min_after: usize) {
        let gap = self.longest_gap(Instant::now());
        let after = self.begun_since(since);
        assert!(
            gap <= max_gap && after >= min_after,
            "the client did not run throughout: {} rounds, the longest gap {gap:?} (at most \
             {max_gap:?}), {after} begun since the moment that mattered (at least {min_after})",
            self.count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_rounds_pass_and_a_stall_or_a_late_start_fails() {
        let r = Rounds::new();
        let t0 = Instant::now();
        for _ in 0..3 {
            let began = Instant::now();
            std::thread::sleep(Duration::from_millis(5));
            r.record(began);
        }
        r.assert_steady(Duration::from_secs(5), t0, 3);
        assert_eq!(r.count(), 3);
        // None began after a moment still to come.
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(r.begun_since(later), 0);
        let failed = std::panic::catch_unwind(|| r.assert_steady(Duration::from_secs(1), later, 1));
        assert!(failed.is_err(), "no round after the moment");
        // A stall at the end counts as a gap.
        std::thread::sleep(Duration::from_millis(60));
        assert!(r.longest_gap(Instant::now()) >= Duration::from_millis(60));
        let failed = std::panic::catch_unwind(|| r.assert_steady(Duration::from_millis(50), t0, 0));
        assert!(failed.is_err(), "a 60 ms stall against a 50 ms bound");
    }

    #[test]
    fn a_client_that_never_finished_a_round_fails() {
        let r = Rounds::new();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.count(), 0);
        let failed =
            std::panic::catch_unwind(|| r.assert_steady(Duration::from_millis(10), Instant::now(), 0));
        assert!(failed.is_err());
    }
}
