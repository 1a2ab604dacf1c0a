//! The Redlock delayed-restart rule as arithmetic (docs/design.md §2). Pure; the clock is an argument.
//!
//! An instance that lost its keys may serve again only when every lock it could have granted
//! has expired everywhere: after the longest TTL any client uses, plus the clock drift the
//! clients themselves allow for, plus a margin for observation delay.
//!
//! This folder is the rule and what keeps it, pure: [`policy`] (the `maxLockTTL` in force),
//! [`release_ahead`] and [`fence_ahead`] (releases and fences ahead of their status write),
//! [`ledger`] (which process each slot ran, outside the status), [`maintenance`] (members
//! fenced on purpose), [`ttl_audit`] (no TTL above `maxLockTTL`).

pub mod fence_ahead;
pub mod ledger;
pub mod maintenance;
pub(crate) mod policy;
pub mod release_ahead;
pub(crate) mod ttl_audit;

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `hold = maxLockTTL + ceil(maxLockTTL × clockDriftFactor) + holdMargin`, with the drift term
/// rounded up to the next millisecond (the reference clients compute drift in ms).
pub(crate) fn hold_duration(max_lock_ttl: Duration, clock_drift_factor: f64, margin: Duration) -> Duration {
    let drift_ms = (max_lock_ttl.as_secs_f64() * 1000.0 * clock_drift_factor.max(0.0)).ceil();
    max_lock_ttl + Duration::from_millis(drift_ms as u64) + margin
}

/// When a hold that starts at `observed_at` ends, rounded *up* to the microsecond, the
/// precision status stores (`MicroTime`): rounding down would shorten the hold.
/// A hold too long to represent ends at the last representable instant: never sooner (the
/// spec bounds maxLockTTL to 24 h, and what clients are told is bounded the same way, so this
/// is a guard against a panic in the reconcile, not a rule).
pub(crate) fn held_until(observed_at: Timestamp, hold: Duration) -> Timestamp {
    let end = SignedDuration::try_from(hold)
        .ok()
        .and_then(|h| observed_at.checked_add(h).ok())
        .unwrap_or(Timestamp::MAX);
    if end == Timestamp::MAX {
        return floor_micros(end);
    }
    ceil_micros(end)
}

/// `t` rounded up to a whole microsecond.
pub(crate) fn ceil_micros(t: Timestamp) -> Timestamp {
    let nanos = t.as_nanosecond();
    let rem = nanos.rem_euclid(1000);
    if rem == 0 {
        t
    } else {
        Timestamp::from_nanosecond(nanos + (1000 - rem)).expect("rounding up by < 1µs stays in range")
    }
}

/// `t` truncated to a whole microsecond (for `since`, where earlier is harmless).
pub(crate) fn floor_micros(t: Timestamp) -> Timestamp {
    let nanos = t.as_nanosecond();
    Timestamp::from_nanosecond(nanos - nanos.rem_euclid(1000)).expect("truncating stays in range")
}

/// How long until `until`, zero if it has passed.
pub(crate) fn remaining(now: Timestamp, until: Timestamp) -> Duration {
    let d = until.duration_since(now);
    if d.is_negative() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn hold_adds_ttl_drift_and_margin() {
        // (ttl, drift factor, margin) -> hold
        let cases = [
            (ms(30_000), 0.01, ms(1_000), ms(31_300)),
            (ms(10_000), 0.01, ms(1_000), ms(11_100)),
            (ms(1_000), 0.0, ms(0), ms(1_000)),
            // ceil: 150 ms × 0.01 = 1.5 ms → 2 ms
            (ms(150), 0.01, ms(0), ms(152)),
            // 1 ms × 0.01 = 0.01 ms → 1 ms: never zero drift for a non-zero factor
            (ms(1), 0.01, ms(0), ms(2)),
            (
                ms(86_400_000),
                0.5,
                ms(3_600_000),
                ms(86_400_000 + 43_200_000 + 3_600_000),
            ),
        ];
        for (ttl, f, margin, want) in cases {
            assert_eq!(
                hold_duration(ttl, f, margin),
                want,
                "ttl={ttl:?} f={f} margin={margin:?}"
            );
        }
    }

    #[test]
    fn the_specs_defaults_give_a_30s_ttl_a_hold_of_31_3s() {
        let spec: crate::crd::RedlockClusterSpec =
            serde_json::from_value(serde_json::json!({"maxLockTTL": "30s"})).unwrap();
        let hold = hold_duration(
            spec.max_lock_ttl.into(),
            spec.clock_drift_factor,
            spec.hold_margin.into(),
        );
        assert_eq!(hold, ms(31_300));
    }

    #[test]
    fn a_hold_too_long_to_represent_ends_at_the_last_instant_instead_of_panicking() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let end = held_until(now, Duration::from_secs(u64::MAX / 4));
        assert!(end > now + SignedDuration::from_hours(24 * 365 * 7000), "{end}");
        assert_eq!(end.as_nanosecond() % 1000, 0);
    }

    #[test]
    fn held_until_rounds_up_to_microseconds() {
        let t = Timestamp::from_nanosecond(1_000_000_000_000_000_001).unwrap();
        let until = held_until(t, ms(1_000));
        assert_eq!(until.as_nanosecond(), 1_000_000_001_000_001_000);
        assert!(until.duration_since(t) >= SignedDuration::from_secs(1));
        let exact = Timestamp::from_second(100).unwrap();
        assert_eq!(
            held_until(exact, ms(1)),
            Timestamp::from_millisecond(100_001).unwrap()
        );
    }

    #[test]
    fn floor_and_remaining() {
        let t = Timestamp::from_nanosecond(1_999).unwrap();
        assert_eq!(floor_micros(t).as_nanosecond(), 1_000);
        assert_eq!(ceil_micros(t).as_nanosecond(), 2_000);
        let a = Timestamp::from_second(10).unwrap();
        let b = Timestamp::from_second(12).unwrap();
        assert_eq!(remaining(a, b), Duration::from_secs(2));
        assert_eq!(remaining(b, a), Duration::ZERO);
    }
}
