//! Crash-loop backoff of a container, as the kubelet does it: the first restart is
//! immediate, every further one waits `base`, `2·base`, … up to `max`; a container that
//! ran for `reset_after` without crashing starts over at an immediate restart.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    reset_after: Duration,
    /// Restarts since the last reset.
    consecutive: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration, reset_after: Duration) -> Self {
        Self {
            base,
            max,
            reset_after,
            consecutive: 0,
        }
    }

    /// Records an exit after the container ran for `ran_for`; returns how long to wait
    /// before starting it again.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= self.reset_after {
            self.consecutive = 0;
        }
        let delay = match self.consecutive {
            0 => Duration::ZERO,
            n => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                self.base.checked_mul(factor).unwrap_or(self.max).min(self.max)
            }
        };
        self.consecutive = self.consecutive.saturating_add(1);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn doubles_from_an_immediate_first_restart_up_to_the_max() {
        let mut b = Backoff::new(10 * S, 300 * S, 600 * S);
        let delays: Vec<u64> = (0..9).map(|_| b.next_delay(S).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_long_run_resets_the_backoff() {
        let mut b = Backoff::new(10 * S, 300 * S, 600 * S);
        b.next_delay(S);
        b.next_delay(S);
        assert_eq!(b.next_delay(S), 20 * S);
        assert_eq!(b.next_delay(600 * S), Duration::ZERO);
        assert_eq!(b.next_delay(S), 10 * S);
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(S, 5 * S, 600 * S);
        for _ in 0..100 {
            assert!(b.next_delay(Duration::ZERO) <= 5 * S);
        }
    }
}
